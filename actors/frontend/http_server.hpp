#pragma once
// A small HTTP/1.1 server on civetweb: exact-path routes, the request body read with a size limit,
// whole responses, and chunked streams (for server-sent events) whose writes report a client that
// went away. Each request runs on one of the server's threads.

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "gpu/status.hpp"

struct mg_context;
struct mg_connection;

namespace illm::actors::frontend {

/// A request as a handler sees it.
struct http_request {
  std::string method;
  std::string path;
  std::string body;
  bool body_too_large = false;                 ///< the body was over the limit (and was not read whole)
  std::map<std::string, std::string> headers;  ///< names in lower case
};

/// The response side of one request.
class http_reply {
 public:
  explicit http_reply(mg_connection* conn) : conn_(conn) {}
  /// A whole response.
  void send(int status, const std::string& content_type, const std::string& body);
  /// Starts a chunked response; false when the client is gone.
  bool start_stream(const std::string& content_type);
  /// Writes one chunk; false when the client is gone.
  bool write(const std::string& data);
  /// Ends a chunked response.
  void end_stream();
  int status() const { return status_; }

 private:
  mg_connection* conn_;
  int status_ = 0;
};

/// The server.
class http_server {
 public:
  using handler = std::function<void(const http_request&, http_reply&)>;

  http_server() = default;
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Routes exact path `path` (any method) to `h`; before start().
  void route(const std::string& path, handler h);
  /// Listens on host:port (port 0: any free port) with `threads` request threads.
  gpu::status start(const std::string& host, uint16_t port, int threads, size_t max_body_bytes);
  /// The port it listens on.
  uint16_t port() const { return port_; }
  /// Stops listening and waits for the running handlers.
  void stop();

 private:
  static int dispatch(mg_connection* conn, void* self);
  void serve(mg_connection* conn);

  std::map<std::string, handler> routes_;
  mg_context* context_ = nullptr;
  uint16_t port_ = 0;
  size_t max_body_bytes_ = 0;
};

}  // namespace illm::actors::frontend
