#include "gpu/jinja/operators.hpp"

#include <cmath>
#include <limits>

#include "gpu/jinja/builtins.hpp"

namespace illm::jinja {

namespace {

[[noreturn]] void overflow(const std::string& op) {
  type_error("the integer result of " + op + " does not fit 64 bits");
}

/// Python's floor division and modulo of integers, defined for every pair but a zero divisor.
int64_t floor_divide(int64_t x, int64_t y) {
  if (y == -1) {
    if (x == std::numeric_limits<int64_t>::min()) overflow("//");
    return -x;
  }
  const int64_t q = x / y;
  return (x % y != 0 && (x < 0) != (y < 0)) ? q - 1 : q;
}

int64_t floor_modulo(int64_t x, int64_t y) {
  if (y == -1) return 0;
  const int64_t r = x % y;
  return (r != 0 && (r < 0) != (y < 0)) ? r + y : r;
}

/// x ** y for y >= 0 by squaring, every product checked.
int64_t integer_power(int64_t x, int64_t y) {
  int64_t result = 1;
  while (y > 0) {
    if ((y & 1) && __builtin_mul_overflow(result, x, &result)) overflow("**");
    y >>= 1;
    if (y > 0 && __builtin_mul_overflow(x, x, &x)) overflow("**");
  }
  return result;
}

value integer_arithmetic(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(x, y, &r) ? overflow(op), value() : value(json(r));
  if (op == "-") return __builtin_sub_overflow(x, y, &r) ? overflow(op), value() : value(json(r));
  if (op == "*") return __builtin_mul_overflow(x, y, &r) ? overflow(op), value() : value(json(r));
  if (y == 0 && (op == "//" || op == "%")) type_error("integer division or modulo by zero");
  if (op == "//") return value(json(floor_divide(x, y)));
  if (op == "%") return value(json(floor_modulo(x, y)));
  if (op == "**" && y >= 0) return value(json(integer_power(x, y)));
  return value();  // ** of a negative exponent: a float, as Python
}

value float_arithmetic(const std::string& op, double x, double y) {
  if (y == 0.0 && (op == "//" || op == "%")) type_error("float division or modulo by zero");
  if (op == "+") return value(json(x + y));
  if (op == "-") return value(json(x - y));
  if (op == "*") return value(json(x * y));
  if (op == "//") return value(json(std::floor(x / y)));
  if (op == "%") return value(json(x - y * std::floor(x / y)));
  return value(json(std::pow(x, y)));
}

/// A string or list `l` repeated `times` times; the result's size is checked before it is built.
value repeat(const value& l, int64_t times) {
  const size_t n = size_t(std::max<int64_t>(times, 0));
  if (l.is_string()) {
    const std::string& s = l.str();
    if (n > 0 && s.size() > max_text_bytes / n) type_error("a string repeated past max_text_bytes");
    std::string out;
    out.reserve(s.size() * n);
    for (size_t i = 0; i < n; ++i) out += s;
    return value(json(std::move(out)));
  }
  const json& items = l.data();
  if (n > 0 && items.size() > max_list_items / n) type_error("a list repeated past max_list_items");
  json out = json::array();
  for (size_t i = 0; i < n; ++i)
    for (const json& e : items) out.push_back(e);
  return value(std::move(out));
}

value join_sequences(const value& l, const value& r) {
  if (l.is_string()) {
    check_text_size(l.str().size() + r.str().size(), "+");
    return value(json(l.str() + r.str()));
  }
  if (l.data().size() + r.data().size() > max_list_items) type_error("a list joined past max_list_items");
  json out = l.data();
  for (const json& e : r.data()) out.push_back(e);
  return value(std::move(out));
}

}  // namespace

void type_error(const std::string& what) { throw template_error(what); }

bool is_int(const json& j) { return j.is_number_integer() || j.is_number_unsigned() || j.is_boolean(); }

int64_t to_int(const json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_float()) {
    const double d = j.get<double>();
    // [-2^63, 2^63): the doubles that convert to int64_t without undefined behaviour.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) type_error("a float too large for an integer");
    return int64_t(d);
  }
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    type_error("an integer that does not fit 64 bits");
  if (!j.is_number()) type_error("expected a number");
  return j.get<int64_t>();
}

double to_double(const json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_unsigned()) return double(j.get<uint64_t>());
  return j.is_number_float() ? j.get<double>() : double(j.get<int64_t>());
}

bool numeric(const value& v) { return v.is_data() && (v.data().is_number() || v.data().is_boolean()); }

void check_text_size(size_t bytes, const char* what) {
  if (bytes > max_text_bytes) type_error(std::string("the text ") + what + " makes is longer than max_text_bytes");
}

int compare(const value& l, const value& r) {
  if (l.is_undefined() || r.is_undefined()) throw template_error("an undefined value compared", error_kind::undefined);
  if (numeric(l) && numeric(r)) {
    if (is_int(l.data()) && is_int(r.data())) {
      const int64_t a = to_int(l.data()), b = to_int(r.data());
      return a < b ? -1 : a > b ? 1 : 0;
    }
    const double a = to_double(l.data()), b = to_double(r.data());
    return a < b ? -1 : a > b ? 1 : 0;
  }
  if (l.is_string() && r.is_string()) return l.str().compare(r.str()) < 0 ? -1 : l.str() == r.str() ? 0 : 1;
  type_error("'<' is not supported between " + l.type_name() + " and " + r.type_name());
}

bool contains(const value& haystack, const value& needle) {
  if (haystack.is_undefined()) return false;  // an undefined value iterates as nothing
  if (haystack.is_string()) return needle.is_string() && haystack.str().find(needle.str()) != std::string::npos;
  if (haystack.is_list() || haystack.is_generator()) {
    for (const json& e : haystack.data())
      if (needle.is_data() && python_equal(e, needle.data())) return true;
    return false;
  }
  if (haystack.is_dict()) return needle.is_string() && haystack.data().contains(needle.str());
  if (haystack.is_namespace()) return needle.is_string() && haystack.ns().contains(needle.str());
  type_error("argument of type '" + haystack.type_name() + "' is not iterable");
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s)
    out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : std::string(1, c);
  return out;
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = char(upper ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c)));
  return s;
}

value arithmetic(const std::string& op, const value& l, const value& r) {
  if (l.is_undefined() || r.is_undefined())  // Jinja2's Undefined refuses arithmetic
    throw template_error("an undefined value in " + op, error_kind::undefined);
  if (op == "+" && (l.is_markup() || r.is_markup()) && l.is_string() && r.is_string()) {  // Markup + str escapes the str
    const std::string left = l.is_markup() ? l.str() : html_escape(l.str());
    const std::string right = r.is_markup() ? r.str() : html_escape(r.str());
    check_text_size(left.size() + right.size(), "+");
    return value::markup(left + right);
  }
  if (!numeric(l) || !numeric(r)) {
    if (op == "+" && ((l.is_string() && r.is_string()) || (l.is_list() && r.is_list()))) return join_sequences(l, r);
    if (op == "*" && (l.is_string() || l.is_list()) && numeric(r) && is_int(r.data())) return repeat(l, to_int(r.data()));
    type_error("unsupported operand types for " + op + ": '" + l.type_name() + "' and '" + r.type_name() + "'");
  }
  const json &a = l.data(), &b = r.data();
  if (op == "/") {
    if (to_double(b) == 0.0) type_error("division by zero");
    return value(json(to_double(a) / to_double(b)));
  }
  if (is_int(a) && is_int(b))
    if (value v = integer_arithmetic(op, to_int(a), to_int(b)); !v.is_undefined()) return v;
  return float_arithmetic(op, to_double(a), to_double(b));
}

value negate(const value& v, bool minus) {
  if (v.is_undefined()) throw template_error("an undefined value in unary -", error_kind::undefined);
  if (!numeric(v)) type_error("bad operand type for unary " + std::string(minus ? "-" : "+") + ": '" + v.type_name() + "'");
  if (!minus) return v;
  if (!is_int(v.data())) return value(json(-to_double(v.data())));
  const int64_t x = to_int(v.data());
  if (x == std::numeric_limits<int64_t>::min()) overflow("unary -");
  return value(json(-x));
}

value apply_operator(const std::string& op, const value& l, const value& r) {
  if (op == "==") return value(json(l == r));
  if (op == "!=") return value(json(!(l == r)));
  if (op == "<") return value(json(compare(l, r) < 0));
  if (op == ">") return value(json(compare(l, r) > 0));
  if (op == "<=") return value(json(compare(l, r) <= 0));
  if (op == ">=") return value(json(compare(l, r) >= 0));
  if (op == "in") return value(json(contains(r, l)));
  if (op == "not in") return value(json(!contains(r, l)));
  if (op == "~") {
    std::string left = l.render(), right = r.render();
    check_text_size(left.size() + right.size(), "~");
    return value(json(left + right));
  }
  return arithmetic(op, l, r);
}

}  // namespace illm::jinja
