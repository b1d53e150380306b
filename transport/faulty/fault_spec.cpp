#include "transport/faulty/fault_spec.hpp"

#include <charconv>
#include <map>

#include <fmt/format.h>

namespace illm::transport {

namespace {

/// The probability keys and where they go.
const std::map<std::string_view, double fault_spec::*>& chance_keys() {
  static const std::map<std::string_view, double fault_spec::*> keys{
      {"put.fail", &fault_spec::put_fail},     {"put.drop", &fault_spec::put_drop},
      {"put.delay", &fault_spec::put_delay},   {"send.fail", &fault_spec::send_fail},
      {"send.drop", &fault_spec::send_drop},   {"send.dup", &fault_spec::send_duplicate},
      {"send.delay", &fault_spec::send_delay},
  };
  return keys;
}

template <class T>
bool read_number(std::string_view text, T& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

status bad(std::string_view key, std::string_view value, std::string_view allowed) {
  return {status_code::invalid_argument, fmt::format("fault spec: {}={} (expected {})", key, value, allowed)};
}

/// Reads "2+3" into peer ids.
status read_peers(std::string_view value, std::vector<peer_id>& out) {
  while (!value.empty()) {
    const size_t plus = value.find('+');
    peer_id peer = 0;
    if (!read_number(value.substr(0, plus), peer)) return bad("partition", value, "peer ids joined by +");
    out.push_back(peer);
    value = plus == std::string_view::npos ? std::string_view{} : value.substr(plus + 1);
  }
  return status::ok();
}

status read_pair(std::string_view key, std::string_view value, fault_spec& spec) {
  if (auto it = chance_keys().find(key); it != chance_keys().end()) {
    double p = -1;
    if (!read_number(value, p) || !(p >= 0 && p <= 1)) return bad(key, value, "a chance from 0 to 1");
    spec.*(it->second) = p;
    return status::ok();
  }
  if (key == "seed") return read_number(value, spec.seed) ? status::ok() : bad(key, value, "an integer");
  if (key == "partition") return read_peers(value, spec.partitioned);
  if (key == "delay_ms") {
    int64_t ms = -1;
    if (!read_number(value, ms) || ms < 0 || ms > 600000) return bad(key, value, "0 to 600000 milliseconds");
    spec.delay = std::chrono::milliseconds(ms);
    return status::ok();
  }
  std::string known = "seed, delay_ms, partition";
  for (const auto& [name, field] : chance_keys()) known += fmt::format(", {}", name);
  return {status_code::invalid_argument, fmt::format("fault spec: unknown key '{}' (known: {})", key, known)};
}

}  // namespace

result<fault_spec> parse_fault_spec(std::string_view text) {
  fault_spec spec;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return status{status_code::invalid_argument, fmt::format("fault spec: '{}' is not KEY=VALUE", item)};
    if (status s = read_pair(item.substr(0, eq), item.substr(eq + 1), spec); !s.is_ok()) return s;
  }
  return spec;
}

std::string describe(const fault_spec& spec) {
  std::string out = fmt::format("seed={},delay_ms={}", spec.seed, spec.delay.count());
  for (const auto& [name, field] : chance_keys())
    if (spec.*field > 0) out += fmt::format(",{}={}", name, spec.*field);
  if (!spec.partitioned.empty()) out += fmt::format(",partition={}", fmt::join(spec.partitioned, "+"));
  return out;
}

}  // namespace illm::transport
