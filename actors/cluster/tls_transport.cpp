// TLS connections for CAF's middleman: an OpenSSL session per connection, read and written by CAF's stream through
// a policy, a scribe and a doorman that make them, and a middleman actor whose connect and open make those.
#include "actors/cluster/tls_transport.hpp"

#include <csignal>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <caf/io/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <fmt/format.h>

namespace illm::actors {

namespace {

namespace net = caf::io::network;

/// The process's OpenSSL context and where refusals go.
struct tls_shared {
  SSL_CTX* ctx = nullptr;
  tls_refusal_handler on_refused;
  ~tls_shared() { SSL_CTX_free(ctx); }
};

/// OpenSSL's queued errors as text (the queue is emptied).
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    out += out.empty() ? text : std::string("; ") + text;
  }
  return out.empty() ? "the connection closed during the handshake" : out;
}

/// One connection's TLS state.
class tls_session {
 public:
  tls_session(std::shared_ptr<tls_shared> shared, net::native_socket fd, bool accepted)
      : shared_(std::move(shared)), ssl_(SSL_new(shared_->ctx)), accepted_(accepted) {
    if (!ssl_) return;
    SSL_set_fd(ssl_, int(fd));
    if (accepted)
      SSL_set_accept_state(ssl_);
    else
      SSL_set_connect_state(ssl_);
    auto addr = net::remote_addr_of_fd(fd);
    auto port = net::remote_port_of_fd(fd);
    peer_ = fmt::format("{}:{}", addr ? *addr : std::string("?"), port ? *port : 0);
  }
  ~tls_session() { SSL_free(ssl_); }
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;

  bool valid() const { return ssl_ != nullptr; }

  net::rw_state read_some(size_t& result, void* buf, size_t len) {
    result = 0;
    if (len == 0) return net::rw_state::indeterminate;
    ERR_clear_error();
    const int n = SSL_read(ssl_, buf, int(std::min<size_t>(len, INT32_MAX)));
    if (n > 0) {
      result = size_t(n);
      return net::rw_state::success;
    }
    return outcome(n);
  }

  net::rw_state write_some(size_t& result, const void* buf, size_t len) {
    result = 0;
    ERR_clear_error();
    if (len == 0) {  // drives the handshake (CAF forces an empty write when a connection starts)
      if (SSL_is_init_finished(ssl_)) return net::rw_state::success;
      const int r = SSL_do_handshake(ssl_);
      return r == 1 ? net::rw_state::success : outcome(r);
    }
    const int n = SSL_write(ssl_, buf, int(std::min<size_t>(len, INT32_MAX)));
    if (n > 0) {
      result = size_t(n);
      return net::rw_state::success;
    }
    return outcome(n);
  }

  /// Whether OpenSSL holds decrypted bytes not read yet (the socket may have nothing more to say).
  bool pending() const { return SSL_pending(ssl_) > 0; }

 private:
  /// What a call that moved no bytes means: try again later, or the connection is over (a failed handshake is
  /// reported once).
  net::rw_state outcome(int r) {
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        return net::rw_state::success;  // nothing moved now
      case SSL_ERROR_ZERO_RETURN:
        return net::rw_state::failure;  // closed by the peer
      default:
        if (!SSL_is_init_finished(ssl_) && !reported_ && shared_->on_refused) {
          reported_ = true;
          shared_->on_refused(peer_, accepted_, ssl_errors());
        }
        ERR_clear_error();
        return net::rw_state::failure;
    }
  }

  std::shared_ptr<tls_shared> shared_;
  SSL* ssl_;
  bool accepted_;
  bool reported_ = false;
  std::string peer_;
};

/// CAF's stream reads and writes a connection through this.
struct tls_policy {
  explicit tls_policy(std::shared_ptr<tls_session> s) : session(std::move(s)) {}
  net::rw_state read_some(size_t& result, net::native_socket, void* buf, size_t len) {
    return session->read_some(result, buf, len);
  }
  net::rw_state write_some(size_t& result, net::native_socket, const void* buf, size_t len) {
    return session->write_some(result, buf, len);
  }
  bool must_read_more(net::native_socket, size_t threshold) const { return threshold > 0 && session->pending(); }
  std::shared_ptr<tls_session> session;
};

/// A connection over TLS, as CAF's brokers see connections.
class tls_scribe final : public caf::io::scribe {
 public:
  tls_scribe(net::default_multiplexer& mpx, net::native_socket fd, std::shared_ptr<tls_session> session)
      : scribe(net::conn_hdl_from_socket(fd)), stream_(mpx, fd, std::move(session)) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) launch();
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto x = net::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string();
  }
  uint16_t port() const override {
    auto x = net::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  void launch() {
    launched_ = true;
    stream_.start(this);
    stream_.force_empty_write(this);  // the handshake starts at once
  }

  bool launched_ = false;
  net::stream_impl<tls_policy> stream_;
};

/// A listening port whose connections are TLS.
class tls_doorman final : public net::doorman_impl {
 public:
  tls_doorman(net::default_multiplexer& mpx, net::native_socket fd, std::shared_ptr<tls_shared> shared)
      : doorman_impl(mpx, fd), shared_(std::move(shared)) {}

  bool new_connection() override {
    if (detached()) return false;  // the broker let go of it while the socket had events
    auto& mpx = acceptor_.backend();
    const net::native_socket fd = acceptor_.accepted_socket();
    (void)net::nonblocking(fd, true);
    (void)net::tcp_nodelay(fd, true);  // small messages go at once (TLS records wait for no ACK)
    auto session = std::make_shared<tls_session>(shared_, fd, true);
    if (!session->valid()) {
      net::close_socket(fd);
      return false;
    }
    auto scribe = caf::make_counted<tls_scribe>(mpx, fd, std::move(session));
    const auto hdl = scribe->hdl();
    parent()->add_scribe(std::move(scribe));
    return doorman::new_connection(&mpx, hdl);
  }

 private:
  std::shared_ptr<tls_shared> shared_;
};

/// The middleman actor whose connections are TLS (CAF's protocol, and everything else, as the middleman's).
class tls_middleman final : public caf::io::middleman_actor_impl {
 public:
  tls_middleman(caf::actor_config& cfg, caf::actor default_broker, std::shared_ptr<tls_shared> shared)
      : middleman_actor_impl(cfg, std::move(default_broker)), shared_(std::move(shared)) {}
  const char* name() const override { return "illm_tls_middleman"; }

 protected:
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host, uint16_t port) override {
    auto fd = net::new_tcp_connection(host, port);
    if (!fd) return std::move(fd.error());
    (void)net::nonblocking(*fd, true);
    (void)net::tcp_nodelay(*fd, true);
    auto session = std::make_shared<tls_session>(shared_, *fd, false);
    if (!session->valid()) {
      net::close_socket(*fd);
      return caf::sec::cannot_connect_to_node;
    }
    return caf::make_counted<tls_scribe>(mpx(), *fd, std::move(session));
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr, bool reuse) override {
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd) return std::move(fd.error());
    return caf::make_counted<tls_doorman>(mpx(), *fd, shared_);
  }

 private:
  net::default_multiplexer& mpx() { return static_cast<net::default_multiplexer&>(system().middleman().backend()); }
  std::shared_ptr<tls_shared> shared_;
};

/// The process's OpenSSL context on the files of `s`.
gpu::result<std::shared_ptr<tls_shared>> make_context(const control_security& s) {
  auto shared = std::make_shared<tls_shared>();
  ERR_clear_error();
  shared->ctx = SSL_CTX_new(TLS_method());
  auto failed = [&](const std::string& what) {
    return gpu::status{gpu::status_code::invalid_argument, fmt::format("TLS: {}: {}", what, ssl_errors())};
  };
  if (!shared->ctx) return failed("cannot make an OpenSSL context");
  SSL_CTX* ctx = shared->ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
  if (SSL_CTX_use_certificate_chain_file(ctx, s.cert.c_str()) != 1) return failed("--tls-cert " + s.cert);
  if (SSL_CTX_use_PrivateKey_file(ctx, s.key.c_str(), SSL_FILETYPE_PEM) != 1) return failed("--tls-key " + s.key);
  if (SSL_CTX_check_private_key(ctx) != 1) return failed("--tls-key " + s.key);
  if (SSL_CTX_load_verify_locations(ctx, s.ca.c_str(), nullptr) != 1) return failed("--tls-ca " + s.ca);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return shared;
}

}  // namespace

gpu::result<caf::io::middleman_actor> spawn_tls_middleman(caf::actor_system& sys, const control_security& s,
                                                           tls_refusal_handler on_refused) {
  // OpenSSL writes to its sockets with write(): a peer that closed its end (a refused stranger) would end this
  // process with SIGPIPE. The error comes back from the write instead.
  std::signal(SIGPIPE, SIG_IGN);
  auto shared = make_context(s);
  if (!shared.is_ok()) return shared.error();
  shared.value()->on_refused = std::move(on_refused);
  auto basp = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  return caf::io::middleman_actor{sys.spawn<tls_middleman, caf::hidden>(std::move(basp), std::move(shared).value())};
}

}  // namespace illm::actors
