#include "actors/faults/fault_plan.hpp"

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

namespace illm::actors::faults {

namespace {

/// "point.fault" of a control key: the point's index and which chance; false when it is no control key.
bool control_key(std::string_view key, control_fault_spec& spec, double*& chance) {
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view point = key.substr(0, dot), fault = key.substr(dot + 1);
  for (int p = 0; p < control_point_count; ++p) {
    if (point != to_string(control_point(p))) continue;
    if (fault == "drop") chance = &spec.drop[p];
    else if (fault == "dup") chance = &spec.duplicate[p];
    else if (fault == "delay") chance = &spec.delay_chance[p];
    else chance = nullptr;
    return true;
  }
  return false;
}

std::vector<std::string_view> split(std::string_view text, char by) {
  std::vector<std::string_view> out;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t at = std::min(text.find(by, from), text.size());
    out.push_back(text.substr(from, at - from));
    from = at + 1;
  }
  return out;
}

/// Reads "POINT.drop_first=N" into `plan`; false when `key` is no such key (an error message in `error`).
bool read_drop_first(std::string_view key, std::string_view value, fault_plan& plan, std::string& error) {
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos || key.substr(dot + 1) != "drop_first") return false;
  for (int p = 0; p < control_point_count; ++p) {
    if (key.substr(0, dot) != to_string(control_point(p))) continue;
    const std::string v(value);
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 0 || n > 1000000)
      error = fmt::format("faults: \"{}={}\": expected a count from 0 to 1000000", key, value);
    else
      plan.control.drop_first[p] = uint32_t(n);
    return true;
  }
  return false;
}

/// Reads one control pair into `plan`; an error message, or empty.
std::string read_control(std::string_view key, std::string_view value, fault_plan& plan) {
  if (std::string error; read_drop_first(key, value, plan, error)) return error;
  double* chance = nullptr;
  (void)control_key(key, plan.control, chance);
  if (!chance)
    return fmt::format("faults: \"{}\": the faults of a control point are drop, dup, delay and drop_first", key);
  const std::string v(value);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= 0 && x <= 1))
    return fmt::format("faults: \"{}={}\": expected a chance from 0 to 1", key, value);
  *chance = x;
  return {};
}

/// Reads "POINT" or "POINT@N" of a crash pair into `plan`; an error message, or empty.
std::string read_crash(std::string_view value, fault_plan& plan) {
  const size_t at = value.find('@');
  const std::string_view point = value.substr(0, at);
  for (crash_point p : {crash_point::mid_move, crash_point::mid_room, crash_point::after_order})
    if (point == to_string(p)) plan.crash = p;
  if (plan.crash == crash_point::none)
    return fmt::format("faults: \"crash={}\": the crash points are mid_move, mid_room and after_order, each with an "
                       "optional @N (the N-th time it is reached)",
                       value);
  if (at == std::string_view::npos) return {};
  const std::string n(value.substr(at + 1));
  char* end = nullptr;
  const unsigned long times = std::strtoul(n.c_str(), &end, 10);
  if (n.empty() || *end != '\0' || times < 1 || times > 1000000)
    return fmt::format("faults: \"crash={}\": expected @N with N from 1 to 1000000", value);
  plan.crash_at = uint32_t(times);
  return {};
}

}  // namespace

std::string fault_plan::data_text_for(uint64_t n) const {
  return fmt::format("{}{}seed={}", data_text, data_text.empty() ? "" : ",", data.seed * 1000003 + n);
}

const char* to_string(control_point p) {
  switch (p) {
    case control_point::heartbeat: return "heartbeat";
    case control_point::reply: return "reply";
    case control_point::promise: return "promise";
    case control_point::order: return "order";
  }
  return "?";
}

const char* to_string(crash_point p) {
  switch (p) {
    case crash_point::none: return "none";
    case crash_point::mid_move: return "mid_move";
    case crash_point::mid_room: return "mid_room";
    case crash_point::after_order: return "after_order";
  }
  return "?";
}

bool control_fault_spec::any() const {
  for (int p = 0; p < control_point_count; ++p)
    if (drop[p] > 0 || duplicate[p] > 0 || delay_chance[p] > 0 || drop_first[p] > 0) return true;
  return false;
}

gpu::result<fault_plan> parse_fault_plan(std::string_view text) {
  fault_plan plan;
  if (text.empty()) return plan;
  plan.text = std::string(text);
  std::string data_text;  // the data plane's pairs, and the shared ones, for transport::parse_fault_spec
  bool data_keys = false;
  for (std::string_view pair : split(text, ',')) {
    const size_t eq = pair.find('=');
    const std::string_view key = pair.substr(0, eq), value = eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    double* ignored = nullptr;
    if (control_key(key, plan.control, ignored)) {
      if (std::string why = read_control(key, value, plan); !why.empty())
        return gpu::status{gpu::status_code::invalid_argument, why};
      continue;
    }
    if (key == "crash") {
      if (std::string why = read_crash(value, plan); !why.empty())
        return gpu::status{gpu::status_code::invalid_argument, why};
      continue;
    }
    data_keys = data_keys || (key != "seed" && key != "delay_ms");
    data_text += (data_text.empty() ? "" : ",") + std::string(pair);
  }
  auto data = transport::parse_fault_spec(data_text);
  if (!data.is_ok())
    return gpu::status{gpu::status_code::invalid_argument,
                       data.error().message + "; and the control plane's: heartbeat, reply, promise and order, each "
                                              "with .drop, .dup, .delay or .drop_first; and crash=POINT[@N]"};
  plan.data = std::move(data).value();
  plan.data_faults = data_keys;
  plan.data_text = data_text;
  return plan;
}

gpu::status check_role(const fault_plan& plan, fault_role role) {
  const int order = int(control_point::order);
  const bool orders = plan.control.drop[order] > 0 || plan.control.duplicate[order] > 0 ||
                      plan.control.delay_chance[order] > 0 || plan.control.drop_first[order] > 0 ||
                      plan.crash == crash_point::after_order;
  control_fault_spec others = plan.control;
  others.drop[order] = others.duplicate[order] = others.delay_chance[order] = 0;
  others.drop_first[order] = 0;
  const bool instance_faults = plan.data_faults || others.any() ||
                               (plan.crash != crash_point::none && plan.crash != crash_point::after_order);
  if (role == fault_role::gmanager && instance_faults)
    return {gpu::status_code::invalid_argument,
            "faults: the gManager injects only order.drop, order.dup, order.delay, order.drop_first and crash=after_order (the "
            "others are an instance's: give them to illm instance --faults)"};
  if (role == fault_role::instance && orders)
    return {gpu::status_code::invalid_argument,
            "faults: order.* and crash=after_order are the gManager's (give them to illm gmanager --faults)"};
  return gpu::status::ok();
}

std::string describe(const fault_plan& plan) {
  std::vector<std::string> parts;
  if (plan.data_faults) parts.push_back("data plane: " + transport::describe(plan.data));
  for (int p = 0; p < control_point_count; ++p) {
    const char* name = to_string(control_point(p));
    if (plan.control.drop[p] > 0) parts.push_back(fmt::format("{}.drop={}", name, plan.control.drop[p]));
    if (plan.control.duplicate[p] > 0) parts.push_back(fmt::format("{}.dup={}", name, plan.control.duplicate[p]));
    if (plan.control.delay_chance[p] > 0) parts.push_back(fmt::format("{}.delay={}", name, plan.control.delay_chance[p]));
    if (plan.control.drop_first[p] > 0)
      parts.push_back(fmt::format("{}.drop_first={}", name, plan.control.drop_first[p]));
  }
  if (plan.crash != crash_point::none)
    parts.push_back(fmt::format("crash at {} (time {} it is reached)", to_string(plan.crash), plan.crash_at));
  return fmt::format("seed {}, delay {} ms; {}", plan.data.seed, plan.data.delay.count(),
                     parts.empty() ? "nothing" : fmt::format("{}", fmt::join(parts, ", ")));
}

}  // namespace illm::actors::faults
