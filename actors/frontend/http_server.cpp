#include "actors/frontend/http_server.hpp"

#include "actors/frontend/http_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

namespace illm::actors::frontend {

namespace {

using clock = std::chrono::steady_clock;

}  // namespace

/// The receiving thread, the handler threads and the connections between them.
class http_server::impl {
 public:
  uint16_t port = 0;
  http_refusal_observer observer;

  gpu::status start(const std::map<std::string, endpoint>* routes, const std::string& host, uint16_t at, int threads,
                    size_t max_body_bytes, const http_limits& limits);
  void stop();

 private:
  enum class phase { idle, head, body, draining };
  /// One client connection, on the receiving side or with a handler.
  struct connection {
    int fd = -1;
    std::string client;
    std::string in;  ///< bytes read and not yet used (a pipelined request's start included)
    phase state = phase::idle;
    clock::time_point deadline, waiting_since;
    http_head head;
    bool body_too_large = false;
    bool peer_closed = false;  ///< the client sent all it will (it may still read the answer)
    bool served = false;       ///< it carried a request already
    size_t drain_left = 0;     ///< draining: bytes of an unread body still to read and drop
  };
  using connection_ptr = std::unique_ptr<connection>;

  void receive_loop();
  void accept_all();
  bool make_room(const std::string& client, int fd);
  void read_from(connection& c);
  void advance(connection& c);
  bool finish_head(connection& c, size_t head_end);
  void hand_over(connection& c);
  void take_back();
  void expire();
  void close_connection(connection& c);
  void drain_then_close(connection& c);
  void drop_unread(connection& c);
  void close_with(connection& c, int status, const std::string& message, const char* reason);
  void count(const char* reason) const {
    if (observer) observer(reason);
  }
  void watch(int fd);

  void handler_loop();
  bool serve(connection& c);
  void dispatch(const http_request& req, http_reply& reply);

  const std::map<std::string, endpoint>* routes_ = nullptr;
  http_limits limits_;
  size_t max_body_bytes_ = 0;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  bool accepting_ = true;
  clock::time_point accept_again_, next_expiry_;
  std::unordered_map<int, connection_ptr> receiving_;  // fd -> connection, on this thread
  std::unordered_map<std::string, int> per_client_;    // connections by address on this thread (no handler's)
  int open_ = 0;
  std::thread receiver_;
  std::vector<std::thread> handlers_;

  std::mutex mutex_;  // guards what follows: the queues between the receiving thread and the handlers
  std::condition_variable work_ready_;
  std::deque<connection_ptr> work_;
  std::deque<std::pair<connection_ptr, bool>> returned_;  // connection, whether it may carry another request
  bool stopping_ = false;
};

gpu::status http_server::impl::start(const std::map<std::string, endpoint>* routes, const std::string& host,
                                     uint16_t at, int threads, size_t max_body_bytes, const http_limits& limits) {
  routes_ = routes;
  limits_ = limits;
  max_body_bytes_ = max_body_bytes;
  const rlim_t files = raise_file_limit();
  limits_.max_connections = int(std::min<rlim_t>(rlim_t(limits.max_connections), files > 64 ? files - 64 : 1));
  auto fd = listen_on(host, at);
  if (!fd.is_ok()) return fd.error();
  listen_fd_ = fd.value();
  port = bound_port(listen_fd_);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  watch(listen_fd_);
  watch(wake_fd_);
  receiver_ = std::thread([this] { receive_loop(); });
  for (int i = 0; i < std::max(1, threads); ++i) handlers_.emplace_back([this] { handler_loop(); });
  return gpu::status::ok();
}

void http_server::impl::stop() {
  if (listen_fd_ < 0) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  receiver_.join();
  for (std::thread& t : handlers_) t.join();
  handlers_.clear();
  for (auto& c : work_) ::close(c->fd);
  for (auto& [c, keep] : returned_) ::close(c->fd);
  work_.clear();
  returned_.clear();
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_}) ::close(fd);
  listen_fd_ = epoll_fd_ = wake_fd_ = -1;
}

void http_server::impl::receive_loop() {
  epoll_event events[256];
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
    }
    if (!accepting_ && clock::now() >= accept_again_) {
      watch(listen_fd_);
      accepting_ = true;
    }
    const int n = epoll_wait(epoll_fd_, events, 256, 200);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) accept_all();
      else if (fd == wake_fd_) take_back();
      else if (auto it = receiving_.find(fd); it != receiving_.end()) read_from(*it->second);
    }
    if (clock::now() >= next_expiry_) {  // deadlines are checked a few times a second, not at every wake-up
      expire();
      next_expiry_ = clock::now() + std::chrono::milliseconds(50);
    }
  }
  while (!receiving_.empty()) close_connection(*receiving_.begin()->second);
}

void http_server::impl::accept_all() {
  // A few at a time: between batches the loop reads the connections already taken, so a client that sent its
  // request is served before a flood of newer connections could make it the oldest one and close it for room.
  for (int taken = 0; taken < 64; ++taken) {
    sockaddr_storage peer{};
    socklen_t size = sizeof peer;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &size, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of files: stop accepting for a moment rather than spin on a connection that cannot be taken.
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accepting_ = false;
        accept_again_ = clock::now() + std::chrono::milliseconds(100);
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    const std::string client = address_of(peer);
    if (!make_room(client, fd)) continue;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<connection>();
    c->fd = fd;
    c->client = client;
    c->waiting_since = clock::now();
    c->deadline = c->waiting_since + std::chrono::milliseconds(limits_.header_timeout_ms);
    ++per_client_[client];
    ++open_;
    watch(c->fd);
    receiving_.emplace(fd, std::move(c));
  }
}

/// Whether connection `fd` of `client` may be kept: its address under its cap, and a place for it (the
/// connection waiting longest for a request closed when all are taken). Closes `fd` when not.
bool http_server::impl::make_room(const std::string& client, int fd) {
  auto mine = per_client_.find(client);
  if (mine != per_client_.end() && mine->second >= limits_.max_connections_per_client) {
    send_now(fd, refusal(503, "too many connections from this address"));
    ::close(fd);
    count("client_limit");
    return false;
  }
  if (open_ < limits_.max_connections) return true;
  connection* oldest = nullptr;
  for (auto& [other_fd, c] : receiving_)
    if (c->state != phase::body && (!oldest || c->waiting_since < oldest->waiting_since)) oldest = c.get();
  if (!oldest) {
    send_now(fd, refusal(503, "the server has no connection free"));
    ::close(fd);
    count("full");
    return false;
  }
  count("evicted");
  close_connection(*oldest);
  return true;
}

/// Wakes the receiving loop when `fd` has bytes (or a connection) to read.
void http_server::impl::watch(int fd) {
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
}

void http_server::impl::read_from(connection& c) {
  if (c.state == phase::draining) return drop_unread(c);
  char buffer[16384];
  for (;;) {
    const size_t room = c.state == phase::body ? c.head.content_length + sizeof buffer : limits_.max_header_bytes + 4;
    if (c.in.size() > room) break;  // enough to judge; the rest waits (or is never read)
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      c.in.append(buffer, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) return close_connection(c);  // the connection broke
    // The client sent all it will: a whole request may still be answered, then the connection goes.
    c.peer_closed = true;
    const int fd = c.fd;
    advance(c);
    if (auto it = receiving_.find(fd); it != receiving_.end() && it->second.get() == &c) close_connection(c);
    return;
  }
  advance(c);
}

/// Moves `c` on with what it has read: a head begun, a head complete, a body complete.
void http_server::impl::advance(connection& c) {
  if (c.state == phase::idle && !c.in.empty()) {
    c.state = phase::head;
    c.deadline = clock::now() + std::chrono::milliseconds(limits_.header_timeout_ms);
  }
  if (c.state == phase::head) {
    const size_t head_end = end_of_head(c.in);
    if (head_end == std::string::npos) {
      if (c.in.size() > limits_.max_header_bytes)
        return close_with(c, 431, "the request head is too large", "malformed");
      if (c.in.find('\n') == std::string::npos && c.in.size() > limits_.max_request_line_bytes)
        return close_with(c, 414, "the request line is too long", "malformed");
      return;
    }
    if (!finish_head(c, head_end)) return;
  }
  if (c.state == phase::body && (c.body_too_large || c.in.size() >= c.head.content_length)) hand_over(c);
}

/// Parses the head that ends at `head_end`; false when the connection was refused and closed.
bool http_server::impl::finish_head(connection& c, size_t head_end) {
  if (head_end > limits_.max_header_bytes + 4) {
    close_with(c, 431, "the request head is too large", "malformed");
    return false;
  }
  std::string_view text(c.in.data(), head_end);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  head_parse parsed = parse_request_head(text, limits_.max_request_line_bytes, limits_.max_header_fields);
  if (parsed.status) {
    close_with(c, parsed.status, parsed.error, "malformed");
    return false;
  }
  c.in.erase(0, head_end);
  c.head = std::move(parsed.head);
  c.body_too_large = c.head.content_length > max_body_bytes_;
  if (c.head.expects_continue && !c.body_too_large && c.in.size() < c.head.content_length)
    send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
  c.state = phase::body;
  c.deadline = clock::now() + std::chrono::milliseconds(limits_.body_timeout_ms);
  return true;
}

/// Gives a connection whose request arrived whole to the handler threads.
void http_server::impl::hand_over(connection& c) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  if (auto n = per_client_.find(c.client); n != per_client_.end() && --n->second <= 0) per_client_.erase(n);
  auto it = receiving_.find(c.fd);
  connection_ptr owned = std::move(it->second);
  receiving_.erase(it);
  {
    std::lock_guard lock(mutex_);
    work_.push_back(std::move(owned));
  }
  work_ready_.notify_one();
}

/// Takes back the connections the handlers are done with: kept for the next request, or closed.
void http_server::impl::take_back() {
  uint64_t ignored;
  (void)!::read(wake_fd_, &ignored, sizeof ignored);
  std::deque<std::pair<connection_ptr, bool>> done;
  {
    std::lock_guard lock(mutex_);
    done.swap(returned_);
  }
  for (auto& [c, keep] : done) {
    connection& kept = *c;
    ++per_client_[c->client];  // on this thread again
    receiving_.emplace(c->fd, std::move(c));
    if (!keep && kept.body_too_large) {
      drain_then_close(kept);
      continue;
    }
    if (!keep) {
      close_connection(kept);
      continue;
    }
    kept.state = phase::idle;
    kept.served = true;
    kept.waiting_since = clock::now();
    kept.deadline = kept.waiting_since + std::chrono::milliseconds(limits_.idle_timeout_ms);
    watch(kept.fd);
    advance(kept);  // a pipelined request may be here already
  }
}

void http_server::impl::expire() {
  const auto now = clock::now();
  std::vector<connection*> late;
  for (auto& [fd, c] : receiving_)
    if (now >= c->deadline) late.push_back(c.get());
  for (connection* c : late) {
    if (c->state == phase::draining) {
      close_connection(*c);
      continue;
    }
    if (c->state != phase::idle) {
      close_with(*c, 408, "the request did not arrive in time", "timeout");
      continue;
    }
    if (!c->served) count("timeout");  // opened, and nothing sent: held for nothing
    close_connection(*c);             // (a kept-alive connection nobody used is simply closed)
  }
}

void http_server::impl::close_with(connection& c, int status, const std::string& message,
                                   const char* reason) {
  count(reason);
  send_now(c.fd, refusal(status, message));
  close_connection(c);
}

/// After an answer to a request whose body was not read (413): no more is sent (FIN), and what the client still
/// sends of its body is read and dropped, up to max_drain_bytes for drain_timeout_ms, so that closing does not
/// reset the connection (a close with unread bytes sends RST, and the client may lose the answer).
void http_server::impl::drain_then_close(connection& c) {
  ::shutdown(c.fd, SHUT_WR);
  c.state = phase::draining;
  const size_t unread = c.head.content_length > c.in.size() ? c.head.content_length - c.in.size() : 0;
  c.drain_left = std::min(unread, limits_.max_drain_bytes);
  c.in.clear();
  c.deadline = clock::now() + std::chrono::milliseconds(limits_.drain_timeout_ms);
  if (c.drain_left == 0 || c.peer_closed) return close_connection(c);
  watch(c.fd);
}

void http_server::impl::drop_unread(connection& c) {
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0 || size_t(n) >= c.drain_left) return close_connection(c);  // done, gone, or too much
    c.drain_left -= size_t(n);
  }
}

void http_server::impl::close_connection(connection& c) {
  const int fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  if (auto it = per_client_.find(c.client); it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  --open_;
  ::close(fd);
  receiving_.erase(fd);  // destroys c
}

void http_server::impl::handler_loop() {
  for (;;) {
    connection_ptr c;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !work_.empty(); });
      if (stopping_) return;
      c = std::move(work_.front());
      work_.pop_front();
    }
    const bool keep = serve(*c);
    {
      std::lock_guard lock(mutex_);
      returned_.emplace_back(std::move(c), keep);
    }
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
}

/// Runs the handler of `c`'s request on this thread; whether the connection may carry another request.
bool http_server::impl::serve(connection& c) {
  set_blocking(c.fd, true);
  const timeval write_timeout{limits_.write_timeout_ms / 1000, (limits_.write_timeout_ms % 1000) * 1000};
  setsockopt(c.fd, SOL_SOCKET, SO_SNDTIMEO, &write_timeout, sizeof write_timeout);
  http_request req;
  req.method = c.head.method;
  req.path = c.head.path;
  req.query = c.head.query;
  req.headers = std::move(c.head.headers);
  req.client = c.client;
  req.body_too_large = c.body_too_large;
  if (!c.body_too_large) {
    req.body = c.in.substr(0, c.head.content_length);
    c.in.erase(0, c.head.content_length);
  }
  http_reply reply(c.fd, c.head.keep_alive && !c.body_too_large, c.head.http10, req.method == "HEAD");
  try {
    dispatch(req, reply);
  } catch (const std::exception& e) {
    if (!reply.status()) reply.send(500, "application/json", error_json(e.what()));
  }
  if (!reply.status()) reply.send(500, "application/json", error_json("the request got no answer"));
  set_blocking(c.fd, false);
  return reply.reusable() && !c.peer_closed;
}

/// Runs the route of `req`: 404 for an unknown path, 405 (with Allow) for a method the path does not take.
void http_server::impl::dispatch(const http_request& req, http_reply& reply) {
  auto route = routes_->find(req.path);
  if (route == routes_->end()) return reply.send(404, "application/json", error_json("no such endpoint"));
  const std::vector<std::string>& methods = route->second.methods;
  const auto takes = [&](const std::string& m) { return std::find(methods.begin(), methods.end(), m) != methods.end(); };
  if (takes(req.method) || (req.method == "HEAD" && takes("GET"))) return route->second.h(req, reply);
  std::string allow;
  for (const std::string& m : methods) allow += (allow.empty() ? "" : ", ") + m + (m == "GET" ? ", HEAD" : "");
  reply.send(405, "application/json", error_json(fmt::format("{} takes {}", req.path, allow)), {{"Allow", allow}});
}

http_server::http_server() : impl_(std::make_unique<impl>()) {}

http_server::~http_server() { stop(); }

std::optional<std::string> http_request::query_value(const std::string& name) const {
  for (size_t at = 0; at <= query.size();) {
    const size_t end = std::min(query.find('&', at), query.size());
    const std::string_view pair = std::string_view(query).substr(at, end - at);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) return std::string(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    at = end + 1;
  }
  return std::nullopt;
}

void http_server::route(const std::string& path, std::vector<std::string> methods, handler h) {
  routes_[path] = {std::move(methods), std::move(h)};
}

gpu::status http_server::start(const std::string& host, uint16_t port, int threads, size_t max_body_bytes,
                               const http_limits& limits) {
  return impl_->start(&routes_, host, port, threads, max_body_bytes, limits);
}

uint16_t http_server::port() const { return impl_->port; }

void http_server::on_refusal(http_refusal_observer observer) { impl_->observer = std::move(observer); }

void http_server::stop() { impl_->stop(); }

}  // namespace illm::actors::frontend
