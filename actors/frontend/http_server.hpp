#pragma once
// A small HTTP/1.1 server: exact-path routes with their methods (HEAD wherever GET is: the head of its answer;
// another method: 405 with Allow), the request body read with a size limit, whole responses, and streams (for
// server-sent events: chunked, or delimited by the connection's close for HTTP/1.0) whose writes report a
// client that went away.
//
// One thread receives: it accepts connections and reads each request's line, headers and body under deadlines
// and size limits, and keeps connections alive between requests. Only a request that arrived whole goes to the
// pool of handler threads. So a client that sends slowly (slowloris) holds a connection, never a thread, and
// loses it at its deadline; each client address has its own cap on connections, and when all connections of
// the server are taken, the one that has waited longest for its next request is closed to make room. A
// connection whose request a handler runs does not count against its address's cap: the handler's own limit
// (the service's requests in flight, answered with 429) bounds those. A request whose body is over the limit is answered (413) and its unread
// body drained for a while before the connection closes, so that the client reads the answer, not a reset.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/frontend/http_parse.hpp"
#include "gpu/status.hpp"

namespace illm::actors::frontend {

/// What one client may hold and how long it may take.
struct http_limits {
  int max_connections = 4096;            ///< open connections in all (raised file limits permitting)
  /// Connections from one address waiting for (or sending) a request; beyond: 503 and closed. Connections whose
  /// request runs do not count (the service's in-flight limit answers those with 429).
  int max_connections_per_client = 1024;
  int header_timeout_ms = 15000;         ///< a request's line and headers arrive whole within this of its first byte
  int body_timeout_ms = 60000;           ///< its body within this of its headers
  int idle_timeout_ms = 30000;           ///< a connection waits this long for a request, then is closed
  int write_timeout_ms = 30000;          ///< a client that takes nothing of a response for this long is dropped
  size_t max_header_bytes = 16384;       ///< request line and headers together; beyond: 431
  size_t max_request_line_bytes = 8192;  ///< beyond: 414
  size_t max_header_fields = 100;        ///< beyond: 431
  int drain_timeout_ms = 2000;           ///< an unread body after a 413 is read and dropped for at most this long
  size_t max_drain_bytes = size_t(64) << 20;  ///< ... and at most this many bytes
};

/// A response header beyond the ones the server writes itself (e.g. Retry-After, Allow).
struct http_header {
  std::string name, value;
};

/// Told of every connection the server refuses or cuts off, with the reason: "client_limit" (its address had its
/// cap), "full" (all connections were taken by requests), "evicted" (it waited for a request and made room for
/// a new connection), "timeout" (its head or body came too slowly: 408), "malformed" (its head was refused).
/// Called on the server's receiving thread.
using http_refusal_observer = std::function<void(const char* reason)>;

/// A request as a handler sees it.
struct http_request {
  /// The value of `name` in the query ("a=1&b=2"), undecoded; none: absent.
  std::optional<std::string> query_value(const std::string& name) const;
  std::string method;
  std::string path;
  std::string query;  ///< what follows the target's '?' (empty: none)
  std::string body;
  bool body_too_large = false;                 ///< the body was over the limit (and was not read)
  std::map<std::string, std::string> headers;  ///< names in lower case
  std::string client;                          ///< the client's address
};

/// The response side of one request.
class http_reply {
 public:
  /// A reply on socket `fd`; `keep_alive`: the connection may carry another request afterwards; `head_only`: a
  /// HEAD request, answered with the head of the response and no body.
  http_reply(int fd, bool keep_alive, bool http10, bool head_only = false)
      : fd_(fd), keep_alive_(keep_alive), http10_(http10), head_only_(head_only) {}
  /// A whole response.
  void send(int status, const std::string& content_type, const std::string& body,
            const std::vector<http_header>& headers = {});
  /// Starts a streamed response (chunked; for HTTP/1.0, delimited by closing the connection); false when the
  /// client is gone.
  bool start_stream(const std::string& content_type);
  /// Writes one piece of the stream; false when the client is gone.
  bool write(const std::string& data);
  /// Ends a streamed response.
  void end_stream();
  /// The status sent (0: nothing yet).
  int status() const { return status_; }
  /// Whether the connection can carry the next request: a whole response went out in full.
  bool reusable() const { return keep_alive_ && status_ != 0 && !streamed_ && !failed_; }

 private:
  bool send_all(const std::string& bytes);
  int fd_;
  bool keep_alive_, http10_, head_only_;
  int status_ = 0;
  bool streamed_ = false, failed_ = false;
};

/// The server.
class http_server {
 public:
  using handler = std::function<void(const http_request&, http_reply&)>;

  http_server();
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Routes exact path `path` with `methods` ("GET", "POST"; GET brings HEAD) to `h`; before start(). Another
  /// method on the path is answered 405 with the methods allowed.
  void route(const std::string& path, std::vector<std::string> methods, handler h);
  /// Listens on host:port (port 0: any free port) with `threads` handler threads.
  gpu::status start(const std::string& host, uint16_t port, int threads, size_t max_body_bytes,
                    const http_limits& limits = {});
  /// The port it listens on.
  uint16_t port() const;
  /// Tells `observer` of every refusal; before start().
  void on_refusal(http_refusal_observer observer);
  /// Stops listening, lets the running handlers finish, and closes every connection.
  void stop();

 private:
  /// A path's handler and the methods it takes.
  struct endpoint {
    std::vector<std::string> methods;
    handler h;
  };
  class impl;
  std::map<std::string, endpoint> routes_;
  std::unique_ptr<impl> impl_;
};

}  // namespace illm::actors::frontend
