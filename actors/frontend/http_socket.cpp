#include "actors/frontend/http_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace illm::actors::frontend {

std::string error_json(const std::string& message) {
  std::string escaped;
  for (char c : message) escaped += (c == '"' || c == '\\') ? std::string{'\\', c} : std::string{c};
  return fmt::format(R"({{"error":{{"message":"{}","type":"invalid_request_error","param":null,"code":null}}}})",
                     escaped);
}

/// A whole response that closes the connection, for what the server refuses itself.
std::string refusal(int status, const std::string& message) {
  const std::string body = error_json(message);
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                     status, reason_phrase(status), body.size(), body);
}

/// Sends what the socket takes now, without waiting (for refusals on the receiving thread).
void send_now(int fd, const std::string& bytes) { (void)::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL); }

void set_blocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

/// The numeric address of a peer.
std::string address_of(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof text);
  if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof text);
  return text;
}

/// Raises the soft limit on open files to the hard one: each connection is a file.
rlim_t raise_file_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur;
}

/// A listening socket on host:port, or the reason there is none.
gpu::result<int> listen_on(const std::string& host, uint16_t port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string service = std::to_string(port);
  if (int e = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); e != 0)
    return gpu::status{gpu::status_code::io_error, fmt::format("cannot serve on {}:{}: {}", host, port, gai_strerror(e))};
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(found);
  return gpu::status{gpu::status_code::io_error, fmt::format("cannot serve on {}:{}: {}", host, port, why)};
}

/// Where the head in `in` ends: just past its empty line (CRLF CRLF, or LF LF); npos while it has none.
size_t end_of_head(const std::string& in) {
  const size_t crlf = in.find("\r\n\r\n"), lf = in.find("\n\n");
  return std::min(crlf == std::string::npos ? crlf : crlf + 4, lf == std::string::npos ? lf : lf + 2);
}

uint16_t bound_port(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(a).sin6_port
                                       : reinterpret_cast<sockaddr_in&>(a).sin_port);
}


bool http_reply::send_all(const std::string& bytes) {
  for (size_t sent = 0; !failed_ && sent < bytes.size();) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) sent += size_t(n);
    else if (n < 0 && errno == EINTR) continue;
    else failed_ = true;  // gone, or took nothing for the write timeout
  }
  return !failed_;
}

void http_reply::send(int status, const std::string& content_type, const std::string& body,
                      const std::vector<http_header>& headers) {
  status_ = status;
  std::string extra = !keep_alive_ ? "Connection: close\r\n" : http10_ ? "Connection: keep-alive\r\n" : "";
  for (const http_header& h : headers) extra += fmt::format("{}: {}\r\n", h.name, h.value);
  send_all(fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{}\r\n",
                       status, reason_phrase(status), content_type, body.size(), extra) +
           (head_only_ ? std::string() : body));
}

bool http_reply::start_stream(const std::string& content_type) {
  status_ = 200;
  streamed_ = true;
  // An HTTP/1.0 client knows no chunks: the stream ends where the connection closes.
  return send_all(fmt::format("HTTP/1.1 200 OK\r\nContent-Type: {}\r\nCache-Control: no-cache\r\n{}Connection: close\r\n\r\n",
                              content_type, http10_ ? "" : "Transfer-Encoding: chunked\r\n"));
}

bool http_reply::write(const std::string& data) {
  if (data.empty() || head_only_) return !failed_;
  return send_all(http10_ ? data : fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
}

void http_reply::end_stream() {
  if (!http10_ && !head_only_) send_all("0\r\n\r\n");
}

}  // namespace illm::actors::frontend
