#pragma once
// The HTTP server's sockets and bytes (http_server.cpp keeps the connections): a listening socket, the peer's
// address, the open-file limit, where a request's head ends, the refusals the server writes itself, and a
// handler's reply (http_server.hpp's http_reply) written whole or in chunks.

#include <sys/resource.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "actors/frontend/http_server.hpp"

namespace illm::actors::frontend {

/// An OpenAI-style error body with `message`.
std::string error_json(const std::string& message);

/// A whole response that closes the connection, for what the server refuses itself.
std::string refusal(int status, const std::string& message);

/// Sends what the socket takes now, without waiting (for refusals on the receiving thread).
void send_now(int fd, const std::string& bytes);

/// Makes `fd` blocking or not.
void set_blocking(int fd, bool blocking);

/// The numeric address of a peer.
std::string address_of(const sockaddr_storage& a);

/// Raises the soft limit on open files to the hard one (each connection is a file); returns the limit.
rlim_t raise_file_limit();

/// A listening socket on host:port, or the reason there is none.
gpu::result<int> listen_on(const std::string& host, uint16_t port);

/// Where the head in `in` ends: just past its empty line (CRLF CRLF, or LF LF); npos while it has none.
size_t end_of_head(const std::string& in);

/// The port a listening socket is bound to.
uint16_t bound_port(int fd);

}  // namespace illm::actors::frontend
