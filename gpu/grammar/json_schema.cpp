#include "gpu/grammar/json_schema.hpp"

#include <map>
#include <optional>
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gpu/text.hpp"

namespace illm::gpu::grammar {

namespace {

using json = nlohmann::ordered_json;
using sequence = std::vector<part>;

/// Joins sequences into one.
sequence cat(std::initializer_list<sequence> parts) {
  sequence out;
  for (const sequence& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

/// Schemas into rules of one grammar.
class compiler {
 public:
  compiler(const json& root, const schema_limits& limits) : root_(root), limits_(limits) {}

  /// The rule of the values `s` (at `where`) accepts.
  result<uint32_t> value_of(const json& s, const std::string& where, int depth);
  grammar g;

 private:
  uint32_t rule(const std::string& name, std::vector<sequence> alternatives) {
    const uint32_t r = g.add_rule(name);
    for (auto& a : alternatives) g.add(r, std::move(a));
    return r;
  }
  /// A primitive rule, made once.
  uint32_t primitive(const std::string& name);
  uint32_t make_primitive(const std::string& name);
  /// A two-digit field from "00" (or "01" when `from_one`) to `max`.
  uint32_t two_digits(int max, bool from_one);
  /// RFC 3339's full-date: months 01-12, each month's days, 29 February in leap years only.
  uint32_t date_rule();
  /// RFC 3339's full-time: hour 00-23, minute 00-59, second 00-60, a fraction, and an offset (Z or +hh:mm).
  uint32_t time_rule();
  status refuse(const std::string& where, const std::string& why) {
    return {status_code::invalid_argument, text::format("json schema at {}: {}", where.empty() ? "#" : where, why)};
  }
  result<uint32_t> typed(const json& s, const std::string& type, const std::string& where, int depth);
  result<uint32_t> object_of(const json& s, const std::string& where, int depth);
  result<uint32_t> array_of(const json& s, const std::string& where, int depth);
  result<uint32_t> string_of(const json& s, const std::string& where);
  result<uint32_t> reference(const std::string& target, const std::string& where, int depth);
  /// `count` copies of `item` each after ", ", then up to `optional` more (none: any number more).
  uint32_t more_items(uint32_t item, int count, std::optional<int> optional);

  const json& root_;
  schema_limits limits_;
  std::map<std::string, uint32_t> primitives_, references_;
};

uint32_t compiler::primitive(const std::string& name) {
  if (auto it = primitives_.find(name); it != primitives_.end()) return it->second;
  const uint32_t r = make_primitive(name);
  primitives_[name] = r;
  return r;
}

uint32_t compiler::make_primitive(const std::string& name) {
  const part cont = bytes_part(byte_range(0x80, 0xBF));
  if (name == "ws") return rule(name, {{}, literal(" ")});
  if (name.rfind("digits", 0) == 0) {  // "digits N": up to N digits (a number's digits past double precision mean nothing,
    uint32_t r = rule("no digits", {{}});      // and a model that repeats a digit would never end it)
    for (int k = std::stoi(name.substr(7)); k > 0; --k) r = rule("digits", {{}, {bytes_part(byte_range('0', '9')), ref(r)}});
    return r;
  }
  if (name == "hex") return rule(name, {{bytes_part(byte_range('0', '9') | byte_range('a', 'f') | byte_range('A', 'F'))}});
  if (name == "char") {
    byte_set plain = byte_range(0x20, 0x7F);
    plain.reset('"');
    plain.reset('\\');
    const uint32_t hex = primitive("hex");
    return rule(name, {{bytes_part(plain)},
                       {any_of("\\"), any_of("\"\\/bfnrt")},
                       {any_of("\\"), any_of("u"), ref(hex), ref(hex), ref(hex), ref(hex)},
                       {bytes_part(byte_range(0xC2, 0xDF)), cont},
                       {any_of("\xE0"), bytes_part(byte_range(0xA0, 0xBF)), cont},
                       {bytes_part(byte_range(0xE1, 0xEC) | byte_range(0xEE, 0xEF)), cont, cont},
                       {any_of("\xED"), bytes_part(byte_range(0x80, 0x9F)), cont},
                       {any_of("\xF0"), bytes_part(byte_range(0x90, 0xBF)), cont, cont},
                       {bytes_part(byte_range(0xF1, 0xF3)), cont, cont, cont},
                       {any_of("\xF4"), bytes_part(byte_range(0x80, 0x8F)), cont, cont}});
  }
  if (name == "chars") {
    const uint32_t c = primitive("char"), r = g.add_rule(name);
    g.add(r, {ref(c), ref(r)});
    g.add(r, {});
    return r;
  }
  if (name == "string") return rule(name, {cat({literal("\""), {ref(primitive("chars"))}, literal("\"")})});
  if (name == "integer") {
    const uint32_t digits = primitive("digits 15");
    const uint32_t magnitude = rule("magnitude", {literal("0"), {bytes_part(byte_range('1', '9')), ref(digits)}});
    return rule(name, {{ref(magnitude)}, {any_of("-"), ref(magnitude)}});
  }
  if (name == "number") {
    const uint32_t digit_rule = rule("digit", {{bytes_part(byte_range('0', '9'))}});
    const uint32_t fraction = rule("fraction", {{}, {any_of("."), ref(digit_rule), ref(primitive("digits 15"))}});
    const uint32_t sign = rule("exponent-sign", {{}, {any_of("+-")}});
    const uint32_t exponent = rule("exponent", {{}, {any_of("eE"), ref(sign), ref(digit_rule), ref(primitive("digits 2"))}});
    return rule(name, {{ref(primitive("integer")), ref(fraction), ref(exponent)}});
  }
  if (name == "boolean") return rule(name, {literal("true"), literal("false")});
  if (name == "null") return rule(name, {literal("null")});
  if (name == "value") {  // any JSON value; its object and array rules refer back to it
    const uint32_t r = g.add_rule(name);
    primitives_[name] = r;
    for (const char* p : {"object", "array", "string", "number", "boolean", "null"}) g.add(r, {ref(primitive(p))});
    return r;
  }
  if (name == "object") {
    const uint32_t value = primitive("value"), ws = primitive("ws"), key = primitive("string");
    const uint32_t member = rule("member", {{ref(key), any_of(":"), ref(ws), ref(value)}});
    const uint32_t members = g.add_rule("members");
    g.add(members, {any_of(","), ref(ws), ref(member), ref(members)});
    g.add(members, {});
    return rule(name, {literal("{}"), {any_of("{"), ref(member), ref(members), any_of("}")}});
  }
  if (name == "array") {
    const uint32_t value = primitive("value");
    return rule(name, {literal("[]"), {any_of("["), ref(value), ref(more_items(value, 0, std::nullopt)), any_of("]")}});
  }
  // Formats of strings (RFC 3339's full-date, full-time, date-time; uuid): their fields in range.
  if (name == "date") return date_rule();
  if (name == "time") return time_rule();
  if (name == "date-time") return rule(name, {{ref(primitive("date")), any_of("T"), ref(primitive("time"))}});
  if (name == "uuid") {
    const uint32_t hex = primitive("hex");
    sequence s;
    for (int group : {8, 4, 4, 4, 12}) {
      if (!s.empty()) s.push_back(any_of("-"));
      for (int i = 0; i < group; ++i) s.push_back(ref(hex));
    }
    return rule(name, {s});
  }
  return rule(name, {});  // unreachable: every caller names a primitive above
}

uint32_t compiler::two_digits(int max, bool from_one) {
  const std::string name = text::format("two digits {} to {}", from_one ? 1 : 0, max);
  if (auto it = primitives_.find(name); it != primitives_.end()) return it->second;
  std::vector<sequence> alternatives;
  const int tens_max = max / 10;
  for (int tens = 0; tens <= tens_max; ++tens) {
    const int lo = tens == 0 && from_one ? 1 : 0, hi = tens == tens_max ? max % 10 : 9;
    alternatives.push_back({any_of(std::string(1, char('0' + tens))), bytes_part(byte_range('0' + lo, '0' + hi))});
  }
  return primitives_[name] = rule(name, std::move(alternatives));
}

uint32_t compiler::date_rule() {
  const part digit = bytes_part(byte_range('0', '9'));
  // Two digits divisible by 4: an even tens digit with 0, 4 or 8, an odd one with 2 or 6.
  const std::vector<sequence> fours = {{any_of("02468"), any_of("048")}, {any_of("13579"), any_of("26")}};
  const std::vector<sequence> not_fours = {{any_of("02468"), any_of("1235679")}, {any_of("13579"), any_of("01345789")}};
  // Leap years: the last two digits divisible by 4 but not 00, or 00 after a century divisible by 4.
  std::vector<sequence> leap, common;
  for (const sequence& f : fours) {
    if (f[0].bytes.test('0') && f[1].bytes.test('0')) {  // "x0": 00 is a century, 40 and 80 are not
      leap.push_back({digit, digit, any_of("2468"), any_of("0")});
      leap.push_back({digit, digit, any_of("02468"), any_of("48")});
    } else {
      leap.push_back({digit, digit, f[0], f[1]});
    }
    leap.push_back({f[0], f[1], any_of("0"), any_of("0")});
  }
  for (const sequence& n : not_fours) {
    common.push_back({digit, digit, n[0], n[1]});
    common.push_back({n[0], n[1], any_of("0"), any_of("0")});
  }
  const uint32_t day28 = two_digits(28, true);
  const uint32_t day29 = rule("day 01-29", {{ref(day28)}, literal("29")});
  const uint32_t day30 = rule("day 01-30", {{ref(day29)}, literal("30")});
  const uint32_t day31 = rule("day 01-31", {{ref(day30)}, literal("31")});
  const auto month_days = [&](uint32_t february) {
    std::vector<sequence> out;
    for (const char* m : {"01", "03", "05", "07", "08", "10", "12"}) out.push_back(cat({literal(m), literal("-"), {ref(day31)}}));
    for (const char* m : {"04", "06", "09", "11"}) out.push_back(cat({literal(m), literal("-"), {ref(day30)}}));
    out.push_back(cat({literal("02-"), {ref(february)}}));
    return out;
  };
  const uint32_t leap_year = rule("leap year", std::move(leap)), common_year = rule("common year", std::move(common));
  const uint32_t leap_days = rule("month and day", month_days(day29));
  const uint32_t common_days = rule("month and day", month_days(day28));
  return rule("date", {{ref(leap_year), any_of("-"), ref(leap_days)}, {ref(common_year), any_of("-"), ref(common_days)}});
}

uint32_t compiler::time_rule() {
  const uint32_t hour = two_digits(23, false), minute = two_digits(59, false), second = two_digits(60, false);
  const uint32_t fraction =
      rule("time-fraction", {{}, {any_of("."), bytes_part(byte_range('0', '9')), ref(primitive("digits 8"))}});
  const uint32_t zone = rule("time-zone", {literal("Z"), {any_of("+-"), ref(hour), any_of(":"), ref(minute)}});
  return rule("time", {{ref(hour), any_of(":"), ref(minute), any_of(":"), ref(second), ref(fraction), ref(zone)}});
}

uint32_t compiler::more_items(uint32_t item, int count, std::optional<int> optional) {
  const uint32_t ws = primitive("ws");
  const sequence next = {any_of(","), ref(ws), ref(item)};
  uint32_t tail;
  if (!optional) {
    tail = g.add_rule("items");
    g.add(tail, cat({next, {ref(tail)}}));
    g.add(tail, {});
  } else {
    tail = rule("no-more-items", {{}});
    for (int k = 0; k < *optional; ++k) tail = rule("more-items", {{}, cat({next, {ref(tail)}})});
  }
  sequence required;
  for (int k = 0; k < count; ++k) required.insert(required.end(), next.begin(), next.end());
  required.push_back(ref(tail));
  return rule("items", {required});
}

result<uint32_t> compiler::reference(const std::string& target, const std::string& where, int depth) {
  if (auto it = references_.find(target); it != references_.end()) return it->second;
  if (target.empty() || target[0] != '#') return refuse(where, "$ref " + target + ": only references into this schema (#...)");
  const json* at = &root_;
  if (target.size() > 1) {
    try {
      at = &root_.at(json::json_pointer(target.substr(1)));
    } catch (const json::exception&) {
      return refuse(where, "$ref " + target + " names nothing in the schema");
    }
  }
  const uint32_t r = g.add_rule("ref " + target);  // before its body: a recursive schema refers to it
  references_[target] = r;
  auto body = value_of(*at, target, depth + 1);
  if (!body.is_ok()) return body.error();
  g.add(r, {ref(body.value())});
  return r;
}

result<uint32_t> compiler::string_of(const json& s, const std::string& where) {
  if (s.contains("pattern")) return refuse(where, "pattern is not supported");
  for (const char* k : {"minLength", "maxLength"})
    if (s.contains(k)) return refuse(where, std::string(k) + " is not supported");
  const std::string format = s.value("format", "");
  if (format == "date" || format == "time" || format == "date-time" || format == "uuid")
    return rule("string " + format, {cat({literal("\""), {ref(primitive(format))}, literal("\"")})});
  return primitive("string");
}

result<uint32_t> compiler::array_of(const json& s, const std::string& where, int depth) {
  for (const char* k : {"prefixItems", "uniqueItems", "contains", "minContains", "maxContains", "unevaluatedItems"})
    if (s.contains(k)) return refuse(where, std::string(k) + " is not supported");
  uint32_t item = primitive("value");
  if (s.contains("items")) {
    if (s.at("items").is_array()) return refuse(where, "items as a list is not supported (prefixItems neither)");
    auto r = value_of(s.at("items"), where + "/items", depth + 1);
    if (!r.is_ok()) return r.error();
    item = r.value();
  }
  auto count = [&](const char* k) -> std::optional<int64_t> {
    if (!s.contains(k)) return std::nullopt;
    if (!s.at(k).is_number_integer() || s.at(k).get<int64_t>() < 0) return -1;
    return s.at(k).get<int64_t>();
  };
  const auto lo = count("minItems"), hi = count("maxItems");
  if ((lo && *lo < 0) || (hi && *hi < 0)) return refuse(where, "minItems and maxItems must be integers of at least 0");
  const int min = int(std::min<int64_t>(lo.value_or(0), limits_.max_bounded_items));
  if (lo && *lo > limits_.max_bounded_items)
    return refuse(where, text::format("minItems above {} is not supported", limits_.max_bounded_items));
  std::optional<int> max;
  if (hi && *hi <= limits_.max_bounded_items) max = int(*hi);
  if (max && *max < min) return refuse(where, "maxItems is below minItems: no array satisfies the schema");
  std::vector<sequence> alternatives;
  if (min == 0) alternatives.push_back(literal("[]"));
  if (!max || *max > 0) {
    const int required = std::max(min, 1);
    std::optional<int> optional;  // past the required items (none: unbounded)
    if (max) optional = *max - required;
    alternatives.push_back({any_of("["), ref(item), ref(more_items(item, required - 1, optional)), any_of("]")});
  }
  return rule("array", std::move(alternatives));
}

result<uint32_t> compiler::object_of(const json& s, const std::string& where, int depth) {
  for (const char* k : {"patternProperties", "minProperties", "maxProperties", "dependentRequired",
                        "dependentSchemas", "propertyNames", "unevaluatedProperties", "if", "then", "else"})
    if (s.contains(k)) return refuse(where, std::string(k) + " is not supported");
  const json additional = s.value("additionalProperties", json(!limits_.strict));
  if (!additional.is_boolean() && !additional.is_object())
    return refuse(where, "additionalProperties must be a boolean or a schema");
  const json properties = s.value("properties", json::object());
  if (!properties.is_object()) return refuse(where, "properties must be an object");
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s.at("required").is_array()) return refuse(where, "required must be a list of names");
    for (const json& name : s.at("required")) {
      if (!name.is_string()) return refuse(where, "required must be a list of names");
      if (!properties.contains(name.get<std::string>()))
        return refuse(where, "required names '" + name.get<std::string>() + "', which properties do not define");
      required.insert(name.get<std::string>());
    }
  }
  const uint32_t ws = primitive("ws");
  if (properties.empty()) {
    if (additional.is_boolean()) return additional.get<bool>() ? primitive("object") : rule("empty object", {literal("{}")});
    auto value = value_of(additional, where + "/additionalProperties", depth + 1);
    if (!value.is_ok()) return value.error();
    const uint32_t member = rule("member", {{ref(primitive("string")), any_of(":"), ref(ws), ref(value.value())}});
    const uint32_t members = g.add_rule("members");
    g.add(members, {any_of(","), ref(ws), ref(member), ref(members)});
    g.add(members, {});
    return rule("object", {literal("{}"), {any_of("{"), ref(member), ref(members), any_of("}")}});
  }
  // The properties in the schema's order, each required one present: after[i] reads properties i.. once one was
  // written (each after ", "), first[i] reads them when none was.
  std::vector<std::pair<std::string, uint32_t>> members;
  for (const auto& [name, schema] : properties.items()) {
    auto value = value_of(schema, where + "/properties/" + name, depth + 1);
    if (!value.is_ok()) return value.error();
    members.emplace_back(name, rule("property " + name, {cat({literal(json(name).dump()), literal(":"), {ref(ws), ref(value.value())}})}));
  }
  uint32_t after = rule("end", {{}}), first = after;
  for (size_t i = members.size(); i-- > 0;) {
    const auto& [name, member] = members[i];
    const sequence comma = {any_of(","), ref(ws), ref(member), ref(after)};
    const uint32_t next_after = required.count(name) ? rule("after", {comma}) : rule("after", {comma, {ref(after)}});
    const uint32_t next_first = required.count(name) ? rule("first", {{ref(member), ref(after)}})
                                                     : rule("first", {{ref(member), ref(after)}, {ref(first)}});
    after = next_after;
    first = next_first;
  }
  return rule("object", {{any_of("{"), ref(first), any_of("}")}});
}

result<uint32_t> compiler::typed(const json& s, const std::string& type, const std::string& where, int depth) {
  if (type == "object") return object_of(s, where, depth);
  if (type == "array") return array_of(s, where, depth);
  if (type == "string") return string_of(s, where);
  if (type == "integer" || type == "number") {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
      if (s.contains(k)) return refuse(where, std::string(k) + " is not supported");
    return primitive(type);
  }
  if (type == "boolean" || type == "null") return primitive(type);
  return refuse(where, "unknown type '" + type + "'");
}

result<uint32_t> compiler::value_of(const json& s, const std::string& where, int depth) {
  if (depth > limits_.max_depth) return refuse(where, text::format("nested deeper than {}", limits_.max_depth));
  if (g.rules() > limits_.max_rules) return refuse(where, text::format("more than {} grammar rules", limits_.max_rules));
  if (s.is_boolean()) {
    if (!s.get<bool>()) return refuse(where, "the schema false accepts nothing");
    return primitive("value");
  }
  if (!s.is_object()) return refuse(where, "a schema must be an object or a boolean");
  for (const char* k : {"oneOf", "allOf", "not"})
    if (s.contains(k)) return refuse(where, std::string(k) + " is not supported (anyOf is)");
  if (s.contains("$ref")) {
    if (!s.at("$ref").is_string()) return refuse(where, "$ref must be a string");
    return reference(s.at("$ref").get<std::string>(), where, depth);
  }
  if (s.contains("const")) return rule("const", {literal(s.at("const").dump())});
  if (s.contains("enum")) {
    if (!s.at("enum").is_array() || s.at("enum").empty()) return refuse(where, "enum must be a non-empty list");
    std::vector<sequence> values;
    for (const json& v : s.at("enum")) values.push_back(literal(v.dump()));
    return rule("enum", std::move(values));
  }
  if (s.contains("anyOf")) {
    if (!s.at("anyOf").is_array() || s.at("anyOf").empty()) return refuse(where, "anyOf must be a non-empty list");
    std::vector<sequence> alternatives;
    for (size_t i = 0; i < s.at("anyOf").size(); ++i) {
      auto r = value_of(s.at("anyOf")[i], where + "/anyOf/" + std::to_string(i), depth + 1);
      if (!r.is_ok()) return r.error();
      alternatives.push_back({ref(r.value())});
    }
    return rule("anyOf", std::move(alternatives));
  }
  std::vector<std::string> types;
  if (s.contains("type")) {
    const json& t = s.at("type");
    if (!t.is_string() && !t.is_array()) return refuse(where, "type must be a name or a list of names");
    for (const json& x : t.is_array() ? t : json::array({t})) {
      if (!x.is_string()) return refuse(where, "type must be a name or a list of names");
      types.push_back(x.get<std::string>());
    }
  } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
    types.push_back("object");
  } else if (s.contains("items")) {
    types.push_back("array");
  }
  if (types.empty()) return primitive("value");
  std::vector<sequence> alternatives;
  for (const std::string& t : types) {
    auto r = typed(s, t, where, depth);
    if (!r.is_ok()) return r.error();
    alternatives.push_back({ref(r.value())});
  }
  return rule("types", std::move(alternatives));
}

}  // namespace

result<std::shared_ptr<const grammar>> json_schema_grammar(const nlohmann::ordered_json& schema,
                                                           const schema_limits& limits) {
  return wrapped_schema_grammar(schema, "", "", limits);
}

result<std::shared_ptr<const grammar>> wrapped_schema_grammar(const nlohmann::ordered_json& schema,
                                                              std::string_view before, std::string_view after,
                                                              const schema_limits& limits) {
  compiler c(schema, limits);
  auto value = c.value_of(schema, "", 0);
  if (!value.is_ok()) return value.error();
  uint32_t root = value.value();
  if (!before.empty() || !after.empty()) {
    root = c.g.add_rule("wrapped");
    c.g.add(root, cat({literal(before), {ref(value.value())}, literal(after)}));
  }
  ILLM_RETURN_IF_ERROR(c.g.finish(root));
  if (!widest_state(c.g, limits.probed_states))
    return status{status_code::invalid_argument,
                  text::format("json schema: its alternatives read the same text in more than {} ways at once (anyOf or "
                               "types over values with a common start, nested): more parse states than an output may "
                               "keep", max_state_stacks)};
  return std::shared_ptr<const grammar>(std::make_shared<grammar>(std::move(c.g)));
}

std::shared_ptr<const grammar> json_object_grammar() {
  return json_schema_grammar(json{{"type", "object"}}).value();
}

}  // namespace illm::gpu::grammar
