#include "gpu/jinja/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace illm::jinja {

const value* call_args::get(size_t index, const std::string& name) const {
  for (const auto& [k, v] : keywords)
    if (k == name) return &v;
  return index < positional.size() ? &positional[index] : nullptr;
}

const std::string& value::str() const {
  if (!is_string()) throw template_error("expected a string, got " + type_name());
  return data_.get_ref<const std::string&>();
}

bool value::truthy() const {
  switch (kind_) {
    case kind::undefined: return false;
    case kind::ns:
    case kind::callable: return true;
    case kind::data: break;
  }
  if (generator_) return true;
  if (data_.is_null()) return false;
  if (data_.is_boolean()) return data_.get<bool>();
  if (data_.is_number_integer()) return data_.get<int64_t>() != 0;
  if (data_.is_number_unsigned()) return data_.get<uint64_t>() != 0;
  if (data_.is_number_float()) return data_.get<double>() != 0.0;
  if (data_.is_string()) return !data_.get_ref<const std::string&>().empty();
  return !data_.empty();
}

std::string value::render() const {
  switch (kind_) {
    case kind::undefined: return "";
    case kind::ns: return "<Namespace " + python_repr(*ns_) + ">";
    case kind::callable: return "<function>";
    case kind::data: break;
  }
  if (generator_) return "<generator object>";
  return python_str(data_);
}

bool value::operator==(const value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case kind::undefined: return true;
    case kind::ns: return ns_ == o.ns_;
    case kind::callable: return fn_ == o.fn_;
    case kind::data: break;
  }
  return python_equal(data_, o.data_);
}

std::string value::type_name() const {
  switch (kind_) {
    case kind::undefined: return "Undefined";
    case kind::ns: return "Namespace";
    case kind::callable: return "function";
    case kind::data: break;
  }
  if (generator_) return "generator";
  if (data_.is_null()) return "NoneType";
  if (data_.is_boolean()) return "bool";
  if (data_.is_number_float()) return "float";
  if (data_.is_number()) return "int";
  if (data_.is_string()) return "str";
  if (data_.is_array()) return "list";
  return "dict";
}

namespace {

/// Python's repr of a float: the shortest text that reads back, with ".0" on whole numbers and Python's exponent
/// form (1e-05, 1e+16).
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char digits[64];
  // Python writes a float in exponent form when its exponent is below -4 or at least 16.
  const int exponent = d == 0.0 ? 0 : int(std::floor(std::log10(std::fabs(d))));
  if (exponent < -4 || exponent >= 16) {
    auto r = std::to_chars(digits, digits + sizeof digits, d, std::chars_format::scientific);
    std::string s(digits, r.ptr);  // 1e-05 style: at least two exponent digits, as Python
    const size_t e = s.find('e');
    std::string mantissa = s.substr(0, e), exp = s.substr(e + 1);
    const char sign = exp[0] == '-' ? '-' : '+';
    if (exp[0] == '-' || exp[0] == '+') exp.erase(0, 1);
    while (exp.size() < 2) exp = "0" + exp;
    return mantissa + "e" + sign + exp;
  }
  auto r = std::to_chars(digits, digits + sizeof digits, d, std::chars_format::fixed);
  std::string s(digits, r.ptr);
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

void quote_python(std::string& out, const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  out += q;
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else out += char(c);
  }
  out += q;
}

/// A template_error when a walk of data reaches `depth` past max_data_depth, or a text past max_text_bytes.
void check_walk(const std::string& out, int depth) {
  if (depth > max_data_depth) throw template_error("data nested deeper than max_data_depth");
  if (out.size() > max_text_bytes) throw template_error("data written longer than max_text_bytes");
}

void repr_into(std::string& out, const json& j, int depth = 0) {
  check_walk(out, depth);
  if (j.is_string()) return quote_python(out, j.get_ref<const std::string&>());
  if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      repr_into(out, j[i], depth + 1);
    }
    out += ']';
    return;
  }
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      if (!first) out += ", ";
      first = false;
      quote_python(out, k);
      out += ": ";
      repr_into(out, v, depth + 1);
    }
    out += '}';
    return;
  }
  out += python_str(j);
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "\\u%04x", c);
          out += hex;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void json_into(std::string& out, const json& j, int indent, bool sort_keys, int depth) {
  check_walk(out, depth);
  const auto newline = [&](int d) {
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  const char* item_separator = indent >= 0 ? "," : ", ";
  if (j.is_string()) return json_string(out, j.get_ref<const std::string&>());
  if (j.is_array()) {
    if (j.empty()) return void(out += "[]");
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += item_separator;
      if (indent >= 0) newline(depth + 1);
      json_into(out, j[i], indent, sort_keys, depth + 1);
    }
    if (indent >= 0) newline(depth);
    out += ']';
    return;
  }
  if (j.is_object()) {
    if (j.empty()) return void(out += "{}");
    std::vector<std::pair<std::string, const json*>> items;
    for (const auto& [k, v] : j.items()) items.emplace_back(k, &v);
    if (sort_keys) std::sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.first < b.first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_separator;
      if (indent >= 0) newline(depth + 1);
      json_string(out, items[i].first);
      out += ": ";
      json_into(out, *items[i].second, indent, sort_keys, depth + 1);
    }
    if (indent >= 0) newline(depth);
    out += '}';
    return;
  }
  if (j.is_null()) return void(out += "null");
  if (j.is_boolean()) return void(out += j.get<bool>() ? "true" : "false");
  if (j.is_number_float()) {
    const double d = j.get<double>();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
    return;
  }
  out += j.dump();
}

double as_double(const json& j) { return j.is_number_float() ? j.get<double>() : j.is_number_unsigned() ? double(j.get<uint64_t>()) : double(j.get<int64_t>()); }

}  // namespace

std::string python_str(const json& j) {
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_string()) return j.get<std::string>();
  if (j.is_number_float()) return float_repr(j.get<double>());
  if (j.is_number()) return j.dump();
  std::string out;
  repr_into(out, j);
  return out;
}

std::string python_repr(const json& j) {
  std::string out;
  repr_into(out, j);
  return out;
}

std::string python_json(const json& j, int indent, bool sort_keys) {
  std::string out;
  json_into(out, j, indent, sort_keys, 0);
  return out;
}

namespace {

bool equal_within(const json& a, const json& b, int depth) {
  if (depth > max_data_depth) throw template_error("data nested deeper than max_data_depth");
  const bool na = a.is_number() || a.is_boolean(), nb = b.is_number() || b.is_boolean();
  if (na && nb) {
    const double x = a.is_boolean() ? double(a.get<bool>()) : as_double(a);
    const double y = b.is_boolean() ? double(b.get<bool>()) : as_double(b);
    return x == y;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!equal_within(a[i], b[i], depth + 1)) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items())
      if (!b.contains(k) || !equal_within(v, b[k], depth + 1)) return false;
    return true;
  }
  return a == b;
}

}  // namespace

bool python_equal(const json& a, const json& b) { return equal_within(a, b, 0); }

int data_depth(const json& j, int limit) {
  if (!j.is_array() && !j.is_object()) return 0;
  if (limit <= 0) return 1;
  int deepest = 0;
  for (const json& e : j) deepest = std::max(deepest, data_depth(e, limit - 1));
  return deepest + 1;
}

void check_data_depth(const json& j, const char* what) {
  if (data_depth(j) > max_data_depth)
    throw template_error(std::string(what) + " nests data deeper than max_data_depth");
}

}  // namespace illm::jinja
