#include "actors/frontend/serve_config.hpp"

#include <fstream>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace illm::actors::frontend {

namespace {

using json = nlohmann::json;
using setter = std::function<bool(const json&, serve_config&)>;

template <class T>
setter integer(T serve_config::*field, int64_t lo, int64_t hi) {
  return [=](const json& v, serve_config& c) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) return false;
    c.*field = T(v.get<int64_t>());
    return true;
  };
}

setter text(std::string serve_config::*field) {
  return [=](const json& v, serve_config& c) {
    if (!v.is_string() || v.get<std::string>().empty()) return false;
    c.*field = v.get<std::string>();
    return true;
  };
}

template <class T>
setter limit(T api_limits::*field, int64_t lo, int64_t hi) {
  return [=](const json& v, serve_config& c) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) return false;
    c.service.limits.*field = T(v.get<int64_t>());
    return true;
  };
}

const std::map<std::string, std::pair<setter, const char*>>& keys() {
  static const std::map<std::string, std::pair<setter, const char*>> k = {
      {"model", {text(&serve_config::model), "model name (in $ILLM_MODELS) or path"}},
      {"host", {text(&serve_config::host), "address to listen on"}},
      {"port", {integer(&serve_config::port, 0, 65535), "port to listen on (0: any free port)"}},
      {"gmanager", {text(&serve_config::gmanager), "HOST:PORT of a cluster of processes to route to (empty: embedded)"}},
      {"instances", {integer(&serve_config::instances, 1, 64), "instances of the embedded cluster"}},
      {"kv_blocks_per_instance", {integer(&serve_config::kv_blocks_per_instance, 2, 1 << 24), "KV blocks per instance"}},
      {"threads_per_instance", {integer(&serve_config::threads_per_instance, 0, 1024), "CPU threads per instance"}},
      {"max_batch_tokens", {integer(&serve_config::max_batch_tokens, 1, 1 << 16), "tokens per engine step"}},
      {"max_batch_seqs", {integer(&serve_config::max_batch_seqs, 1, 4096), "sequences per engine step"}},
      {"mixed_step_tokens",
       {integer(&serve_config::mixed_step_tokens, 0, 1 << 16),
        "a step with decode tokens prefills up to this many tokens in all, spreading prompts over the decode steps "
        "(0: up to max_batch_tokens)"}},
      {"overlap_min_tokens",
       {integer(&serve_config::overlap_min_tokens, 0, 1 << 20),
        "steps of this many tokens with remote blocks run as two lanes, dense beside remote attention (0: never)"}},
      {"room_prefill_min_chunks",
       {integer(&serve_config::room_prefill_min_chunks, 0, 1 << 20),
        "a request with a room has its prompt prefilled by the room's holders when this many chunks go out (0: never)"}},
      {"heartbeat_ms", {integer(&serve_config::heartbeat_ms, 1, 60000), "rManager heartbeat period"}},
      {"policy_ms", {integer(&serve_config::policy_ms, 1, 3600000), "gManager placement period"}},
      {"policy",
       {[](const json& v, serve_config& c) {
          if (!v.is_string() || (v != "greedy" && v != "simple")) return false;
          c.policy = v.get<std::string>();
          return true;
        },
        "the embedded gManager's placement: \"greedy\" (the performance model) or \"simple\""}},
      {"profile", {text(&serve_config::profile), "profile of the greedy policy (illm profile --out); default: measured at start"}},
      {"shutdown_grace_s", {integer(&serve_config::shutdown_grace_s, 0, 3600), "time in-flight requests get on SIGTERM"}},
      {"metrics_prefix",
       {[](const json& v, serve_config& c) {
          if (!v.is_string() || (v != "illm:" && v != "illm_")) return false;
          c.metrics_prefix = v.get<std::string>();
          return true;
        },
        "metric name prefix: \"illm:\" (as vLLM's \"vllm:\") or \"illm_\""}},
      {"max_requests_in_flight",
       {[](const json& v, serve_config& c) {
          if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 100000) return false;
          c.service.max_requests_in_flight = int(v.get<int64_t>());
          return true;
        },
        "requests served at once (more get 429)"}},
      {"http_threads",
       {[](const json& v, serve_config& c) {
          if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 4096) return false;
          c.service.http_threads = int(v.get<int64_t>());
          return true;
        },
        "HTTP threads (each streaming request holds one)"}},
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
      {"max_body_bytes", {limit(&api_limits::max_body_bytes, 256, 1 << 30), "largest request body"}},
      {"max_prompt_tokens", {limit(&api_limits::max_prompt_tokens, 1, 1 << 24), "longest prompt"}},
      {"max_tokens", {limit(&api_limits::max_tokens, 1, 1 << 24), "largest max_tokens"}},
      {"default_max_tokens", {limit(&api_limits::default_max_tokens, 1, 1 << 24), "max_tokens of a chat request without one"}},
  };
  return k;
}

}  // namespace

gpu::result<serve_config> load_serve_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return gpu::status{gpu::status_code::io_error, fmt::format("cannot read config file {}", path)};
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    return gpu::status{gpu::status_code::invalid_argument, fmt::format("config file {}: {}", path, e.what())};
  }
  if (!j.is_object()) return gpu::status{gpu::status_code::invalid_argument, fmt::format("config file {}: not an object", path)};
  serve_config c;
  for (const auto& [key, value] : j.items()) {
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
  std::string out;
  for (const auto& [key, entry] : keys()) out += fmt::format("  {:<24} {}\n", key, entry.second);
  return out;
}

}  // namespace illm::actors::frontend
