// Control-plane security: the TLS files checked with OpenSSL before CAF reads them, CAF's configuration with
// its OpenSSL module, and the actor that listens and connects (TLS or plain).
#include "actors/cluster/control_security.hpp"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/cluster/tls_transport.hpp"
#include "actors/messages.hpp"

namespace illm::actors {

namespace {

/// Where the TLS middleman actor of a process is found (its actor registry).
const caf::atom_value tls_registry_key = caf::atom("illm_tls");

gpu::status bad(const std::string& flag, const std::string& path, const std::string& why) {
  return {gpu::status_code::invalid_argument, fmt::format("{} {}: {}", flag, path, why)};
}

/// The PEM certificates of a file, first to last (none: the file holds none).
std::vector<X509*> read_certificates(BIO* in) {
  std::vector<X509*> out;
  while (X509* c = PEM_read_bio_X509(in, nullptr, nullptr, nullptr)) out.push_back(c);
  ERR_clear_error();  // the end of the file reads as an error
  return out;
}

/// No passphrase prompt: an encrypted key fails to read.
int no_passphrase(char*, int, int, void*) { return 0; }

struct pem_files {
  std::vector<X509*> ca, chain;  // chain: the certificate first, then any intermediates
  EVP_PKEY* key = nullptr;
  ~pem_files() {
    for (X509* c : ca) X509_free(c);
    for (X509* c : chain) X509_free(c);
    EVP_PKEY_free(key);
  }
};

/// Reads `path` with `read`, or says why it cannot be read.
template <class Read>
gpu::status read_pem(const std::string& flag, const std::string& path, Read read) {
  BIO* in = BIO_new_file(path.c_str(), "r");
  if (!in) return bad(flag, path, "cannot read it");
  gpu::status s = read(in);
  BIO_free(in);
  return s;
}

/// Whether the certificate chains to the CA and is valid now; the verifier's reason when not.
std::string verify(const pem_files& f) {
  X509_STORE* store = X509_STORE_new();
  for (X509* c : f.ca) X509_STORE_add_cert(store, c);
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (size_t i = 1; i < f.chain.size(); ++i) sk_X509_push(untrusted, f.chain[i]);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  std::string why;
  if (X509_STORE_CTX_init(ctx, store, f.chain.front(), untrusted) != 1 || X509_verify_cert(ctx) != 1)
    why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx));
  X509_STORE_CTX_free(ctx);
  sk_X509_free(untrusted);
  X509_STORE_free(store);
  return why;
}

}  // namespace

gpu::status check_control_security(const control_security& s) {
  if (!s.tls()) return gpu::status::ok();
  if (s.ca.empty() || s.cert.empty() || s.key.empty())
    return {gpu::status_code::invalid_argument, "TLS needs all three of --tls-ca, --tls-cert and --tls-key"};
  pem_files f;
  ILLM_RETURN_IF_ERROR(read_pem("--tls-ca", s.ca, [&](BIO* in) {
    f.ca = read_certificates(in);
    return f.ca.empty() ? bad("--tls-ca", s.ca, "no PEM certificate in it") : gpu::status::ok();
  }));
  ILLM_RETURN_IF_ERROR(read_pem("--tls-cert", s.cert, [&](BIO* in) {
    f.chain = read_certificates(in);
    return f.chain.empty() ? bad("--tls-cert", s.cert, "no PEM certificate in it") : gpu::status::ok();
  }));
  ILLM_RETURN_IF_ERROR(read_pem("--tls-key", s.key, [&](BIO* in) {
    f.key = PEM_read_bio_PrivateKey(in, nullptr, no_passphrase, nullptr);
    ERR_clear_error();
    return f.key ? gpu::status::ok() : bad("--tls-key", s.key, "no unencrypted PEM private key in it");
  }));
  if (X509_check_private_key(f.chain.front(), f.key) != 1) {
    ERR_clear_error();
    return bad("--tls-key", s.key, fmt::format("not the key of the certificate in {}", s.cert));
  }
  if (const std::string why = verify(f); !why.empty())
    return bad("--tls-cert", s.cert, fmt::format("not accepted by the CA of {}: {}", s.ca, why));
  return gpu::status::ok();
}

gpu::status check_listen_host(const control_security& s, const std::string& host, const std::string& what) {
  if (s.tls() || s.insecure) return gpu::status::ok();
  in_addr v4{};
  in6_addr v6{};
  const bool loopback = host == "localhost" ||
                        (inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127) ||
                        (inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6));
  if (loopback) return gpu::status::ok();
  return {gpu::status_code::invalid_argument,
          fmt::format("{} {}: without TLS (--tls-ca, --tls-cert, --tls-key) the control plane listens only on "
                      "loopback; give TLS files, or --insecure to listen there in clear text to anyone",
                      what, host)};
}

std::unique_ptr<caf::actor_system_config> networked_config() {
  auto cfg = std::make_unique<caf::actor_system_config>();
  register_messages(*cfg);
  quiet_idle_scheduler(*cfg);
  cfg->load<caf::io::middleman>();
  return cfg;
}

control_plane& control_plane::operator=(control_plane&& other) noexcept {
  stop();
  sys_ = std::exchange(other.sys_, nullptr);
  return *this;
}

void control_plane::stop() {
  if (!sys_) return;
  caf::strong_actor_ptr tls = sys_->registry().get(tls_registry_key);
  sys_->registry().erase(tls_registry_key);
  if (tls) {
    caf::scoped_actor waiter{*sys_, true};
    waiter->monitor(tls);
    waiter->send_exit(caf::actor_cast<caf::actor>(tls), caf::exit_reason::user_shutdown);
    tls.reset();
    waiter->receive([](const caf::down_msg&) {}, caf::after(std::chrono::seconds(5)) >> [] {});
  }
  sys_ = nullptr;
}

gpu::result<control_plane> start_control_plane(caf::actor_system& sys, const control_security& s,
                                               const std::string& who) {
  if (!s.tls()) return control_plane{};
  auto tls = spawn_tls_middleman(sys, s, [who](const std::string& peer, bool accepted, const std::string& why) {
    fmt::print(stderr, "{}: {} {}: TLS handshake failed: {}\n", who, accepted ? "refused a connection from" : "refused by",
               peer, why);
    std::fflush(stderr);
  });
  if (!tls.is_ok()) return tls.error();
  sys.registry().put(tls_registry_key, caf::actor_cast<caf::strong_actor_ptr>(tls.value()));
  return control_plane{sys};
}

caf::io::middleman_actor control_connector(caf::actor_system& sys) {
  if (auto tls = sys.registry().get(tls_registry_key)) return caf::actor_cast<caf::io::middleman_actor>(tls);
  return sys.middleman().actor_handle();
}

caf::expected<uint16_t> publish_control(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
                                        std::set<std::string> types, uint16_t port, const std::string& host) {
  caf::expected<uint16_t> out{caf::sec::cannot_publish_invalid_actor};
  caf::scoped_actor self{sys, true};
  self->request(control_connector(sys), caf::infinite, caf::publish_atom::value, port, whom, std::move(types), host,
                true)
      .receive([&](uint16_t bound) { out = bound; }, [&](caf::error& e) { out = std::move(e); });
  return out;
}

caf::expected<uint16_t> open_control(caf::actor_system& sys, uint16_t port, const std::string& host) {
  caf::expected<uint16_t> out{caf::sec::cannot_open_port};
  caf::scoped_actor self{sys, true};
  self->request(control_connector(sys), caf::infinite, caf::open_atom::value, port, host, true)
      .receive([&](uint16_t bound) { out = bound; }, [&](caf::error& e) { out = std::move(e); });
  return out;
}

bool refused_by_peer(const caf::error& e) {
  return e.category() == caf::atom("system") &&
         (e == caf::sec::disconnect_during_handshake || e == caf::sec::unexpected_response ||
          e == caf::sec::incompatible_versions || e == caf::sec::incompatible_application_ids);
}

}  // namespace illm::actors
