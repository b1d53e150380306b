// What `illm gmanager` and `illm instance --join` share (process_options.hpp), and the parsers of addresses and
// the TLS options that `illm serve` and `illm generate` use too (commands.hpp).
#include "actors/cli/process_options.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

#include "actors/cli/commands.hpp"
#include "actors/cluster/control_security.hpp"
#include "actors/messages/membership.hpp"

namespace illm::cli {

void check_listen(const actors::control_security& s, const std::string& host, const std::string& what) {
  if (gpu::status ok = actors::check_listen_host(s, host, what); !ok.is_ok()) fail(ok.message(), 2);
}

metrics_endpoint start_metrics(const std::string& listen, const std::string& prefix, const std::string& who) {
  metrics_endpoint out;
  if (listen.empty()) return out;
  const host_port at = parse_host_port(listen, "--metrics-listen", true);
  out.registry = std::make_shared<actors::metrics::registry>();
  out.metrics = std::make_shared<actors::metrics::runtime_metrics>(*out.registry, prefix);
  out.server = std::make_unique<actors::frontend::http_server>();
  out.server->route("/metrics", {"GET"}, [registry = out.registry](const actors::frontend::http_request&,
                                                          actors::frontend::http_reply& reply) {
    reply.send(200, "text/plain; version=0.0.4; charset=utf-8", registry->expose());
  });
  if (gpu::status s = out.server->start(at.host, at.port, 2, 4096); !s.is_ok())
    fail(fmt::format("--metrics-listen {}: {}", listen, s.message()), 2);
  log("{}: metrics on http://{}:{}/metrics", who, at.host, out.server->port());
  return out;
}

void add_metrics_options(CLI::App* cmd, std::string& listen, std::string& prefix) {
  cmd->add_option("--metrics-listen", listen,
                  "HOST:PORT to serve Prometheus metrics on, at /metrics (port 0: any free one; default: none)");
  cmd->add_option("--metrics-prefix", prefix, "Metric name prefix: illm: (default) or illm_")
      ->check(CLI::IsMember({"illm:", "illm_"}));
}

void add_config_file(CLI::App* cmd, const std::string& example) {
  auto path = std::make_shared<std::string>();
  cmd->add_option("--config", *path, "JSON file of this command's options, e.g. " + example);
  cmd->parse_complete_callback([cmd, path] {
    if (path->empty()) return;
    std::ifstream in(*path);
    if (!in) fail(fmt::format("--config {}: cannot read it", *path), 2);
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = gpu::parse_bounded_json(text.str(), gpu::json_depth_outside_requests);
    if (!parsed.value) fail(fmt::format("--config {}: not JSON: {}", *path, parsed.error), 2);
    const nlohmann::json& config = *parsed.value;
    if (!config.is_object()) fail(fmt::format("--config {}: expected a JSON object of options", *path), 2);
    for (const auto& [key, value] : config.items()) {
      CLI::Option* opt = key == "config" ? nullptr : cmd->get_option_no_throw("--" + key);
      if (!opt) fail(fmt::format("--config {}: \"{}\" is no option of illm {}", *path, key, cmd->get_name()), 2);
      if (opt->count() > 0) continue;  // given as a flag
      if (!value.is_string() && !value.is_number() && !value.is_boolean())
        fail(fmt::format("--config {}: \"{}\": expected a string, a number or true/false", *path, key), 2);
      try {
        opt->add_result(value.is_string() ? value.get<std::string>() : value.dump());
        opt->run_callback();
      } catch (const CLI::Error& e) {
        fail(fmt::format("--config {}: \"{}\": {}", *path, key, e.what()), 2);
      }
    }
  });
}

host_port parse_host_port(const std::string& text, const char* flag, bool port_zero_ok) {
  host_port out;
  std::string port = text;
  if (const auto colon = text.rfind(':'); colon != std::string::npos) {
    if (colon > 0) out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  try {
    size_t used = 0;
    const long p = std::stol(port, &used);
    if (used != port.size() || p < (port_zero_ok ? 0 : 1) || p > 65535) throw std::out_of_range(port);
    out.port = uint16_t(p);
  } catch (const std::exception&) {
    fail(fmt::format("{} {}: expected HOST:PORT with a port in {}..65535", flag, text, port_zero_ok ? 0 : 1), 2);
  }
  return out;
}

std::vector<actors::control_endpoint> parse_host_port_list(const std::string& text, const char* flag) {
  std::vector<actors::control_endpoint> out;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const host_port at = parse_host_port(text.substr(from, comma - from), flag);
    out.push_back({at.host, at.port});
    from = comma + 1;
  }
  return out;
}

void add_tls_options(CLI::App* cmd, actors::control_security& s, bool listens) {
  cmd->add_option("--tls-ca", s.ca,
                  "PEM file of the cluster's CA: control connections use mutual TLS, and a peer must present a "
                  "certificate it signed (with --tls-cert and --tls-key; deploy/make-certs.sh makes them)");
  cmd->add_option("--tls-cert", s.cert, "PEM certificate this process presents, signed by the CA of --tls-ca");
  cmd->add_option("--tls-key", s.key, "PEM private key (unencrypted) of --tls-cert");
  if (!listens) return;
  cmd->add_flag("--insecure", s.insecure,
                "Without TLS, listen on addresses other than loopback anyway: anyone who reaches the port can join "
                "the cluster and read its KV");
}

void check_tls_options(const actors::control_security& s, const std::string& who) {
  if (gpu::status ok = actors::check_control_security(s); !ok.is_ok()) fail(ok.message(), 2);
  if (s.tls())
    log("{}: control plane over mutual TLS (peers need a certificate of the CA in {})", who, s.ca);
  else
    log("{}: control plane in clear text, without authentication{}", who,
        s.insecure ? " (--insecure)" : " (loopback only)");
}

}  // namespace illm::cli
