#include "actors/frontend/http_server.hpp"

#include <civetweb.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace illm::actors::frontend {

namespace {

std::once_flag library_once;
std::mutex last_error_mutex;
std::string last_error;  // civetweb's last complaint, for the error that mg_start's failure gives

int remember_error(const mg_connection*, const char* message) {
  std::lock_guard lock(last_error_mutex);
  last_error = message ? message : "";
  return 1;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

}  // namespace

void http_reply::send(int status, const std::string& content_type, const std::string& body) {
  status_ = status;
  mg_printf(conn_, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n\r\n",
            status, reason_phrase(status), content_type.c_str(), body.size());
  mg_write(conn_, body.data(), body.size());
}

bool http_reply::start_stream(const std::string& content_type) {
  status_ = 200;
  return mg_printf(conn_,
                   "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                   "Connection: close\r\n\r\n",
                   content_type.c_str()) > 0;
}

bool http_reply::write(const std::string& data) {
  return data.empty() || mg_send_chunk(conn_, data.data(), unsigned(data.size())) > 0;
}

void http_reply::end_stream() { mg_send_chunk(conn_, "", 0); }

http_server::~http_server() { stop(); }

void http_server::route(const std::string& path, handler h) { routes_[path] = std::move(h); }

gpu::status http_server::start(const std::string& host, uint16_t port, int threads, size_t max_body_bytes) {
  std::call_once(library_once, [] { mg_init_library(0); });
  max_body_bytes_ = max_body_bytes;
  const std::string ports = fmt::format("{}:{}", host, port), thread_count = std::to_string(std::max(1, threads));
  const char* options[] = {"listening_ports", ports.c_str(), "num_threads", thread_count.c_str(),
                           "request_timeout_ms", "60000", "enable_keep_alive", "yes", "tcp_nodelay", "1", nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = &remember_error;
  context_ = mg_start(&callbacks, this, options);
  if (!context_) {
    std::lock_guard lock(last_error_mutex);
    return {gpu::status_code::io_error, fmt::format("cannot serve on {}: {}", ports, last_error)};
  }
  mg_set_request_handler(context_, "/", &http_server::dispatch, this);
  mg_server_port bound[4];
  const int n = mg_get_server_ports(context_, 4, bound);
  port_ = n > 0 ? uint16_t(bound[0].port) : port;
  return gpu::status::ok();
}

void http_server::stop() {
  if (context_) mg_stop(context_);
  context_ = nullptr;
}

namespace {

/// A thread with the default stack that runs what the civetweb thread it belongs to hands it, one job at a time:
/// civetweb's threads have small stacks (Debian's build sets about 100 KiB), and handlers use the actor system
/// and JSON. One per civetweb thread, made at its first request and kept while that thread lives: a thread
/// started per request left resident memory a little higher after every burst larger than the ones before.
class stack_helper {
 public:
  stack_helper() : thread_([this] { loop(); }) {}
  ~stack_helper() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  /// Runs `job` on the helper's thread and returns when it is done.
  void run(const std::function<void()>& job) {
    std::unique_lock lock(mutex_);
    job_ = &job;
    done_ = false;
    changed_.notify_all();
    changed_.wait(lock, [this] { return done_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [this] { return stop_ || job_; });
      if (!job_) return;
      const std::function<void()>* job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      job_ = nullptr;
      done_ = true;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  const std::function<void()>* job_ = nullptr;
  bool done_ = false, stop_ = false;
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace

int http_server::dispatch(mg_connection* conn, void* self) {
  thread_local stack_helper helper;
  helper.run([conn, self] { static_cast<http_server*>(self)->serve(conn); });
  return 1;
}

void http_server::serve(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  http_request req;
  req.method = info->request_method ? info->request_method : "";
  req.path = info->local_uri ? info->local_uri : "";
  for (int i = 0; i < info->num_headers; ++i) req.headers[lower(info->http_headers[i].name)] = info->http_headers[i].value;
  // The body, up to the limit (one byte more tells that it is over).
  char buffer[8192];
  for (int n; req.body.size() <= max_body_bytes_ && (n = mg_read(conn, buffer, sizeof buffer)) > 0;)
    req.body.append(buffer, size_t(n));
  req.body_too_large = req.body.size() > max_body_bytes_;
  http_reply reply(conn);
  auto it = routes_.find(req.path);
  if (it == routes_.end()) {
    reply.send(404, "application/json",
               R"({"error":{"message":"no such endpoint","type":"invalid_request_error","param":null,"code":null}})");
    return;
  }
  it->second(req, reply);
}

}  // namespace illm::actors::frontend
