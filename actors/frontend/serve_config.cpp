#include "actors/frontend/serve_config.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

namespace illm::actors::frontend {

namespace {

using json = nlohmann::json;
using setter = std::function<bool(const json&, serve_config&)>;

setter text(std::string serve_config::*field) {
  return [=](const json& v, serve_config& c) {
    if (!v.is_string() || v.get<std::string>().empty()) return false;
    c.*field = v.get<std::string>();
    return true;
  };
}

/// A setter of a non-empty string at `field` of the part `part` of the configuration.
template <class Part>
setter text_of(Part serve_config::*part, std::string Part::*field) {
  return [=](const json& v, serve_config& c) {
    if (!v.is_string() || v.get<std::string>().empty()) return false;
    c.*part.*field = v.get<std::string>();
    return true;
  };
}

/// A setter of a string that must be one of `allowed`.
setter one_of(std::string serve_config::*field, std::vector<std::string> allowed) {
  return [=](const json& v, serve_config& c) {
    if (!v.is_string() || std::find(allowed.begin(), allowed.end(), v.get<std::string>()) == allowed.end())
      return false;
    c.*field = v.get<std::string>();
    return true;
  };
}

/// A setter of an integer in [lo, hi] at `field` of what `part` picks out of the configuration.
template <class Part, class T>
setter integer_in(Part& (*part)(serve_config&), T Part::*field, int64_t lo, int64_t hi) {
  return [=](const json& v, serve_config& c) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) return false;
    part(c).*field = T(v.get<int64_t>());
    return true;
  };
}

template <class T>
setter integer(T serve_config::*field, int64_t lo, int64_t hi) {
  return integer_in<serve_config>([](serve_config& c) -> serve_config& { return c; }, field, lo, hi);
}

template <class T>
setter limit(T api_limits::*field, int64_t lo, int64_t hi) {
  return integer_in<api_limits>([](serve_config& c) -> api_limits& { return c.service.limits; }, field, lo, hi);
}

template <class T>
setter http_integer(T http_limits::*field, int64_t lo, int64_t hi) {
  return integer_in<http_limits>([](serve_config& c) -> http_limits& { return c.service.http; }, field, lo, hi);
}

template <class T>
setter service_integer(T service_options::*field, int64_t lo, int64_t hi) {
  return integer_in<service_options>([](serve_config& c) -> service_options& { return c.service; }, field, lo, hi);
}

const std::map<std::string, std::pair<setter, const char*>>& keys() {
  static const std::map<std::string, std::pair<setter, const char*>> k = {
      {"model", {text(&serve_config::model), "model name (in $ILLM_MODELS) or path: a Hugging Face folder, a GGUF file or a llama2.c file"}},
      {"served_model_name", {text(&serve_config::served_model_name), "the model id clients ask for (default: the model folder's or file's name)"}},
      {"chat_template", {text(&serve_config::chat_template), "Jinja file replacing the model's chat template (default: the model's; a model without one joins the messages by newlines)"}},
      {"weight_type",
       {one_of(&serve_config::weight_type, {"", "f32", "f16", "bf16", "q8_0", "q6_k", "q5_0", "q4_k"}),
        "every matrix converted to this type at load (default \"\": as the model file stores them)"}},
      {"host", {text(&serve_config::host), "address to listen on"}},
      {"port", {integer(&serve_config::port, 0, 65535), "port to listen on (0: any free port)"}},
      {"gmanager", {text(&serve_config::gmanager), "HOST:PORT (or a comma-separated list) of the gManager of a cluster of processes to route to (empty: embedded)"}},
      {"tls_ca", {text_of(&serve_config::tls, &control_security::ca), "PEM file of the cluster's CA: the connections to a cluster of processes use mutual TLS"}},
      {"tls_cert", {text_of(&serve_config::tls, &control_security::cert), "PEM certificate the front end presents to the cluster, signed by the CA of tls_ca"}},
      {"tls_key", {text_of(&serve_config::tls, &control_security::key), "PEM private key (unencrypted) of tls_cert"}},
      {"instances", {integer(&serve_config::instances, 1, 64), "instances of the embedded cluster"}},
      {"backend", {text_of(&serve_config::instance, &instance_settings::backend), "what the embedded instances run on: cpu, cuda or auto"}},
      {"kv_type", {text_of(&serve_config::instance, &instance_settings::kv_type), "element type of the instances' KV pools: f32, f16 or bf16 (16-bit pools hold twice the tokens)"}},
      {"prefix_cache", {text_of(&serve_config::instance, &instance_settings::prefix_cache), "\"local\": each instance keeps full KV blocks by content, so requests that share a prefix compute it once; \"cluster\" (the default): a request also reads a prefix cached on another instance, where it lies; \"off\": none"}},
      {"devices", {text_of(&serve_config::instance, &instance_settings::devices), "GPUs of the cuda backend, e.g. \"0,1\": instance i runs on the (i mod n)-th (default: GPU 0)"}},
      {"faults", {text(&serve_config::faults), "faults the embedded cluster injects, e.g. \"seed=7,send.drop=0.01,heartbeat.drop=0.1\" (docs/faults.md; empty: none)"}},
      {"policy",
       {one_of(&serve_config::policy, {"greedy", "simple"}),
        "the embedded gManager's placement: \"greedy\" (the performance model) or \"simple\""}},
      {"profile", {text(&serve_config::profile), "profile of the greedy policy (illm profile --out); default: measured at the first start on this machine and kept in $ILLM_CACHE/profiles"}},
      {"shutdown_grace_s", {integer(&serve_config::shutdown_grace_s, 0, 3600), "time in-flight requests get on SIGTERM"}},
      {"metrics_prefix",
       {one_of(&serve_config::metrics_prefix, {"illm:", "illm_"}),
        "metric name prefix: \"illm:\" (as vLLM's \"vllm:\") or \"illm_\""}},
      {"max_requests_in_flight",
       {service_integer(&service_options::max_requests_in_flight, 1, 100000), "requests served at once (more get 429)"}},
      {"http_threads",
       {service_integer(&service_options::http_threads, 1, 4096),
        "HTTP threads (each running request holds one; at least max_requests_in_flight + 16 are started)"}},
      {"http_max_connections",
       {http_integer(&http_limits::max_connections, 16, 1 << 20),
        "open HTTP connections in all (when all are taken, the one idle longest is closed for a new one)"}},
      {"http_max_connections_per_client",
       {http_integer(&http_limits::max_connections_per_client, 1, 1 << 20),
        "HTTP connections from one address waiting for or sending a request (those whose request runs do not "
        "count: max_requests_in_flight bounds them)"}},
      {"http_header_timeout_ms",
       {http_integer(&http_limits::header_timeout_ms, 100, 3600000), "time a request's line and headers may take"}},
      {"http_body_timeout_ms", {http_integer(&http_limits::body_timeout_ms, 100, 3600000), "time a request's body may take"}},
      {"http_idle_timeout_ms",
       {http_integer(&http_limits::idle_timeout_ms, 100, 3600000), "time a connection may wait for its next request"}},
      {"http_write_timeout_ms",
       {http_integer(&http_limits::write_timeout_ms, 100, 3600000), "time a client may take nothing of a response"}},
      {"http_max_header_bytes",
       {http_integer(&http_limits::max_header_bytes, 1024, 1 << 20), "largest request line and headers together"}},
      {"http_max_header_fields",
       {http_integer(&http_limits::max_header_fields, 1, 10000), "most header fields of a request (more: 431)"}},
      {"api_keys",
       {[](const json& v, serve_config& c) {
          if (!v.is_array()) return false;
          c.service.api_keys.clear();
          for (const json& k : v) {
            if (!k.is_string() || k.get<std::string>().empty()) return false;
            c.service.api_keys.push_back(k.get<std::string>());
          }
          return true;
        },
        "accepted Bearer keys (empty: none needed)"}},
      {"prefix_cache_per_key",
       {[](const json& v, serve_config& c) {
          if (!v.is_boolean()) return false;
          c.service.prefix_cache_per_key = v.get<bool>();
          return true;
        },
        "true: each API key its own prefix-cache namespace (a tenant never reads another's cached blocks)"}},
      {"max_body_bytes", {limit(&api_limits::max_body_bytes, 256, 1 << 30), "largest request body"}},
      {"max_json_depth", {limit(&api_limits::max_json_depth, 16, 1024),
                          "deepest nesting of arrays and objects in a request body (deeper: 400)"}},
      {"max_prompt_tokens", {limit(&api_limits::max_prompt_tokens, 1, 1 << 24), "longest prompt"}},
      {"max_tokens", {limit(&api_limits::max_tokens, 1, 1 << 24), "largest max_tokens"}},
      {"default_max_tokens", {limit(&api_limits::default_max_tokens, 1, 1 << 24), "max_tokens of a chat request without one"}},
  };
  return k;
}

/// What a runtime setting means and its range, for an error about it.
std::string help_of(const std::string& key) {
  for (const auto& [name, help] : runtime_setting_keys())
    if (key == name) return help;
  return {};
}

}  // namespace

gpu::result<serve_config> load_serve_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return gpu::status{gpu::status_code::io_error, fmt::format("cannot read config file {}", path)};
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = gpu::parse_bounded_json<json>(text.str(), gpu::json_depth_outside_requests);
  if (!parsed.value)
    return gpu::status{gpu::status_code::invalid_argument, fmt::format("config file {}: {}", path, parsed.error)};
  const json& j = *parsed.value;
  if (!j.is_object()) return gpu::status{gpu::status_code::invalid_argument, fmt::format("config file {}: not an object", path)};
  serve_config c;
  for (const auto& [key, value] : j.items()) {
    const setting_read runtime = read_runtime_setting(key, value, c.batch, c.instance, c.embedded_gmanager);
    if (runtime == setting_read::read) continue;
    if (runtime == setting_read::bad_value)
      return gpu::status{gpu::status_code::invalid_argument,
                         fmt::format("config file {}: bad value for '{}' ({})", path, key, help_of(key))};
    auto it = keys().find(key);
    if (it == keys().end())
      return gpu::status{gpu::status_code::invalid_argument, fmt::format("config file {}: unknown key '{}'", path, key)};
    if (!it->second.first(value, c))
      return gpu::status{gpu::status_code::invalid_argument,
                         fmt::format("config file {}: bad value for '{}' ({})", path, key, it->second.second)};
  }
  return c;
}

std::string serve_config_keys() {
  std::map<std::string, std::string> all;
  for (const auto& [key, entry] : keys()) all[key] = entry.second;
  for (const auto& [key, help] : runtime_setting_keys()) all[key] = help;
  std::string out;
  for (const auto& [key, help] : all) out += fmt::format("  {:<24} {}\n", key, help);
  return out;
}

}  // namespace illm::actors::frontend
