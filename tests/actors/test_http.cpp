// The HTTP server's edge: the head parser refuses what a proxy in front could read otherwise (request smuggling:
// CL with TE, two CLs, folded lines, bare LF or CR) and too many fields, reads Connection as tokens and wants Host
// of HTTP/1.1; a live server answers HEAD without a body, a wrong method with 405 and Allow, pipelined requests in
// order, streams HTTP/1.0 clients without chunks, lets a client read its 413 rather than a reset, and counts only
// connections without a running request against an address's cap.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "actors/frontend/http_server.hpp"

using namespace illm::actors::frontend;

namespace {

int status_of(const std::string& head_text, size_t max_fields = 100) {
  return parse_request_head(head_text, 8192, max_fields).status;
}

/// A client socket connected to 127.0.0.1:port, with a receive timeout.
int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  const timeval t{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  return fd;
}

/// Sends all of `s`; false when the connection broke first (what the server answered may still be read).
bool send_text(int fd, const std::string& s) {
  for (size_t at = 0; at < s.size();) {
    const ssize_t n = ::send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += size_t(n);
  }
  return true;
}

/// What the server sends until it closes the connection (or `until` appears, or nothing comes for 10 s).
std::string read_all(int fd, const std::string& until = {}) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    out.append(buffer, size_t(n));
    if (!until.empty() && out.find(until) != std::string::npos) break;
  }
  return out;
}

/// A server on 127.0.0.1 with a GET route, a POST route, a streaming route and a route that blocks until released.
struct live_server {
  http_server server;
  std::mutex mutex;
  std::condition_variable changed;
  bool release = false;
  int running = 0;

  explicit live_server(http_limits limits = {}) {
    server.route("/get", {"GET"}, [](const http_request&, http_reply& r) { r.send(200, "text/plain", "hello"); });
    server.route("/post", {"POST"}, [](const http_request& q, http_reply& r) {
      if (q.body_too_large) return r.send(413, "text/plain", "too large");
      r.send(200, "text/plain", q.body);
    });
    server.route("/stream", {"GET"}, [](const http_request&, http_reply& r) {
      if (!r.start_stream("text/plain")) return;
      for (const char* piece : {"one ", "two ", "three"}) r.write(piece);
      r.end_stream();
    });
    server.route("/block", {"GET"}, [this](const http_request&, http_reply& r) {
      std::unique_lock lock(mutex);
      ++running;
      changed.notify_all();
      changed.wait(lock, [this] { return release; });
      r.send(200, "text/plain", "released");
    });
    REQUIRE(server.start("127.0.0.1", 0, 8, 1024, limits).is_ok());
  }
  ~live_server() {
    {
      std::lock_guard lock(mutex);
      release = true;
    }
    changed.notify_all();
    server.stop();
  }
};

}  // namespace

TEST_CASE("http head: request smuggling shapes and limits are refused, the rest is read strictly") {
  CHECK(status_of("GET /v1/models HTTP/1.1\r\nHost: x") == 0);
  CHECK(status_of("GET / HTTP/1.1") == 400);         // HTTP/1.1 without Host
  CHECK(status_of("GET / HTTP/1.0") == 0);           // HTTP/1.0 needs none
  CHECK(status_of("GET / HTTP/1.1\r\nHost: a\r\nHost: b") == 400);
  CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked") == 400);
  CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked") == 501);
  CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5") == 400);
  CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5") == 400);
  CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5") == 400);
  CHECK(status_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length : 5") == 400);     // space before the colon
  CHECK(status_of("GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded") == 400);        // obs-fold
  CHECK(status_of("GET / HTTP/1.1\nHost: x") == 400);                               // bare LF
  CHECK(status_of("GET / HTTP/1.1\r\nHost: x\rX-Smuggled: 1") == 400);             // bare CR in a field
  CHECK(status_of("GET /\r HTTP/1.1\r\nHost: x") == 400);                           // bare CR in the request line
  CHECK(status_of("GET / HTTP/2.0\r\nHost: x") == 505);
  std::string many = "GET / HTTP/1.1\r\nHost: x";
  for (int i = 0; i < 10; ++i) many += "\r\nX-" + std::to_string(i) + ": 1";
  CHECK(status_of(many, 11) == 0);
  CHECK(status_of(many, 10) == 431);
  CHECK(status_of("GET " + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x") == 414);
}

TEST_CASE("http head: Connection is a list of tokens") {
  auto keep_alive = [](const std::string& text) { return parse_request_head(text, 8192).head.keep_alive; };
  CHECK(keep_alive("GET / HTTP/1.1\r\nHost: x"));
  CHECK_FALSE(keep_alive("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, Close"));
  CHECK(keep_alive("GET / HTTP/1.1\r\nHost: x\r\nConnection: x-close-later"));  // no "close" token
  CHECK_FALSE(keep_alive("GET / HTTP/1.0"));
  CHECK(keep_alive("GET / HTTP/1.0\r\nConnection: foo, Keep-Alive"));
  CHECK_FALSE(keep_alive("GET / HTTP/1.0\r\nConnection: keep-alive-ish"));
}

TEST_CASE("http server: HEAD has no body, a wrong method gets 405 with Allow, pipelined requests answer in order") {
  live_server s;
  const int fd = connect_to(s.server.port());
  send_text(fd, "HEAD /get HTTP/1.1\r\nHost: x\r\n\r\nPOST /get HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
                "GET /get HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string got = read_all(fd);
  ::close(fd);
  const size_t second = got.find("HTTP/1.1 405");
  REQUIRE(second != std::string::npos);
  const std::string head_answer = got.substr(0, second);
  CHECK(head_answer.find("HTTP/1.1 200") == 0);
  CHECK(head_answer.find("Content-Length: 5\r\n") != std::string::npos);
  CHECK(head_answer.substr(head_answer.size() - 4) == "\r\n\r\n");  // the head, and no body
  const size_t third = got.find("HTTP/1.1 200", second);
  REQUIRE(third != std::string::npos);
  CHECK(got.substr(second, third - second).find("Allow: GET, HEAD\r\n") != std::string::npos);
  CHECK(got.substr(got.size() - 5) == "hello");
}

TEST_CASE("http server: an HTTP/1.0 client's stream has no chunks and ends where the connection closes") {
  live_server s;
  int fd = connect_to(s.server.port());
  send_text(fd, "GET /stream HTTP/1.0\r\n\r\n");
  std::string got = read_all(fd);
  ::close(fd);
  CHECK(got.find("Transfer-Encoding") == std::string::npos);
  CHECK(got.substr(got.find("\r\n\r\n") + 4) == "one two three");
  fd = connect_to(s.server.port());
  send_text(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  got = read_all(fd);
  ::close(fd);
  CHECK(got.find("Transfer-Encoding: chunked") != std::string::npos);
  CHECK(got.find("4\r\none \r\n") != std::string::npos);
  CHECK(got.substr(got.size() - 5) == "0\r\n\r\n");
}

TEST_CASE("http server: a body over the limit gets a 413 that the client reads, not a reset") {
  // A client that sends its whole body before it reads (as most do) must not find the connection reset under it:
  // the server answers at once, then reads and drops the rest of the body before it closes.
  live_server s;  // bodies of at most 1024 bytes
  const int fd = connect_to(s.server.port());
  const size_t body = 4 << 20;
  REQUIRE(send_text(fd, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body) + "\r\n\r\n"));
  REQUIRE(send_text(fd, std::string(64 << 10, 'x')));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server answers before the body is in
  CHECK_MESSAGE(send_text(fd, std::string(body - (64 << 10), 'x')), "the connection was reset while the body was sent");
  const std::string got = read_all(fd);
  ::close(fd);
  CHECK_MESSAGE(got.find("HTTP/1.1 413") == 0, got);
  CHECK(got.find("Connection: close") != std::string::npos);
}

TEST_CASE("http server: connections whose request runs do not count against their address's cap") {
  http_limits limits;
  limits.max_connections_per_client = 2;
  live_server s(limits);
  std::vector<int> running;
  for (int i = 0; i < 3; ++i) {
    running.push_back(connect_to(s.server.port()));
    send_text(running.back(), "GET /block HTTP/1.1\r\nHost: x\r\n\r\n");
    std::unique_lock lock(s.mutex);
    REQUIRE(s.changed.wait_for(lock, std::chrono::seconds(10), [&] { return s.running == i + 1; }));
  }
  // Three requests run; two idle connections are still taken, a third is refused.
  const int idle1 = connect_to(s.server.port()), idle2 = connect_to(s.server.port());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int refused = connect_to(s.server.port());
  const std::string answer = read_all(refused);
  CHECK(answer.find("HTTP/1.1 503") == 0);
  send_text(idle1, "GET /get HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(read_all(idle1).find("HTTP/1.1 200") == 0);
  {
    std::lock_guard lock(s.mutex);
    s.release = true;
  }
  s.changed.notify_all();
  for (int fd : running) {
    CHECK(read_all(fd, "released").find("HTTP/1.1 200") == 0);
    ::close(fd);
  }
  for (int fd : {idle1, idle2, refused}) ::close(fd);
}
