#include "gpu/jinja/builtins.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <set>

#include "gpu/jinja/operators.hpp"

namespace illm::jinja {

namespace {

/// Positional argument i or keyword `name`, else `fallback`.
value arg(const call_args& a, size_t i, const std::string& name, value fallback = value()) {
  const value* v = a.get(i, name);
  return v ? *v : fallback;
}

std::string text_of(const value& v) { return v.render(); }

bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip(const std::string& s, const value& chars, bool left, bool right) {
  const auto strips = [&](char c) { return chars.is_string() ? chars.str().find(c) != std::string::npos : is_space_byte(c); };
  size_t b = 0, e = s.size();
  while (left && b < e && strips(s[b])) ++b;
  while (right && e > b && strips(s[e - 1])) --e;
  return s.substr(b, e - b);
}

json split(const std::string& s, const value& sep, int64_t max_splits) {
  json out = json::array();
  if (sep.is_string()) {
    const std::string& d = sep.str();
    if (d.empty()) type_error("empty separator");
    size_t at = 0;
    for (int64_t n = 0; max_splits < 0 || n < max_splits; ++n) {
      const size_t found = s.find(d, at);
      if (found == std::string::npos) break;
      out.push_back(s.substr(at, found - at));
      at = found + d.size();
    }
    out.push_back(s.substr(at));
    return out;
  }
  size_t i = 0;  // by runs of whitespace, none empty
  int64_t n = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space_byte(s[i])) ++i;
    if (i >= s.size()) break;
    if (max_splits >= 0 && n == max_splits) {
      out.push_back(strip(s.substr(i), value(), false, true));
      break;
    }
    size_t j = i;
    while (j < s.size() && !is_space_byte(s[j])) ++j;
    out.push_back(s.substr(i, j - i));
    ++n;
    i = j;
  }
  return out;
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count = -1) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t found = s.find(from, at);
    if (found == std::string::npos) break;
    check_text_size(out.size() + (found - at) + to.size(), "replace");
    out += s.substr(at, found - at) + to;
    at = found + from.size();
  }
  return out + s.substr(at);
}

std::string capitalize(const std::string& s) { return s.empty() ? s : ascii_case(s.substr(0, 1), true) + ascii_case(s.substr(1), false); }

std::string title(const std::string& s) {
  std::string out = s;
  bool word_start = true;
  for (char& c : out) {
    const bool letter = std::isalpha(uint8_t(c));
    c = char(letter ? (word_start ? std::toupper(uint8_t(c)) : std::tolower(uint8_t(c))) : c);
    word_start = !letter && !std::isdigit(uint8_t(c)) && c != '\'';
  }
  return out;
}

bool affix(const std::string& s, const value& a, bool prefix) {
  const auto one = [&](const std::string& p) {
    return p.size() <= s.size() && (prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
  };
  if (a.is_list()) {
    for (const json& p : a.data())
      if (p.is_string() && one(p.get<std::string>())) return true;
    return false;
  }
  return one(a.str());
}

/// A bound method of a str.
value string_method(const std::string& s, const std::string& name) {
  static const std::set<std::string> known{"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper",
                                           "lower", "title", "capitalize", "replace", "find", "count", "join",
                                           "splitlines", "isdigit", "isalpha", "isspace", "format", "rsplit"};
  if (!known.count(name)) return value();
  return value::make_callable([s, name](const call_args& a) -> value {
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return value(json(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip")));
    if (name == "split" || name == "rsplit") {
      const value limit = arg(a, 1, "maxsplit");
      if (name == "rsplit" && limit.is_data() && !limit.is_none() && to_int(limit.data()) >= 0)
        type_error("str.rsplit with maxsplit is not supported");
      return value(split(s, arg(a, 0, "sep"), limit.is_data() && !limit.is_none() ? to_int(limit.data()) : -1));
    }
    if (name == "startswith" || name == "endswith") return value(json(affix(s, arg(a, 0, "prefix"), name == "startswith")));
    if (name == "upper" || name == "lower") return value(json(ascii_case(s, name == "upper")));
    if (name == "title") return value(json(title(s)));
    if (name == "capitalize") return value(json(capitalize(s)));
    if (name == "replace") {
      const value count = arg(a, 2, "count");
      return value(json(replace_all(s, arg(a, 0, "old").str(), arg(a, 1, "new").str(), count.is_data() ? to_int(count.data()) : -1)));
    }
    if (name == "find") {
      const size_t at = s.find(arg(a, 0, "sub").str());
      return value(json(at == std::string::npos ? int64_t(-1) : int64_t(characters(s.substr(0, at)).size())));
    }
    if (name == "count") {
      const std::string& sub = arg(a, 0, "sub").str();
      int64_t n = 0;
      for (size_t at = s.find(sub); !sub.empty() && at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return value(json(n));
    }
    if (name == "join") {
      std::string out;
      const value items = arg(a, 0, "iterable");
      if (!items.is_list()) type_error("str.join needs a list");
      for (size_t i = 0; i < items.data().size(); ++i) out += (i ? s : "") + python_str(items.data()[i]);
      return value(json(out));
    }
    if (name == "splitlines") {
      json out = json::array();
      for (const json& line : split(s, value(json("\n")), -1)) out.push_back(strip(line.get<std::string>(), value(json("\r")), false, true));
      if (!out.empty() && out.back() == "" && !s.empty() && s.back() == '\n') out.erase(out.size() - 1);
      return value(std::move(out));
    }
    if (name == "format") {  // "{}" and "{0}" fields; "{{" and "}}" are braces
      std::string out;
      size_t next_field = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if ((s[i] == '{' || s[i] == '}') && i + 1 < s.size() && s[i + 1] == s[i]) {
          out += s[i++];
          continue;
        }
        if (s[i] != '{') {
          out += s[i];
          continue;
        }
        const size_t close = s.find('}', i);
        if (close == std::string::npos) type_error("str.format: a field is never closed");
        const std::string field = s.substr(i + 1, close - i - 1);
        const value* given = field.empty()                      ? a.get(next_field++, "")
                             : std::isdigit(uint8_t(field[0])) ? a.get(std::strtoul(field.c_str(), nullptr, 10), "")
                                                               : a.get(SIZE_MAX, field);
        if (!given) type_error("str.format: no argument for {" + field + "}");
        out += given->render();
        i = close;
      }
      return value(json(out));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace") {
      bool all = !s.empty();
      for (char c : s)
        all = all && (name == "isdigit" ? std::isdigit(uint8_t(c)) : name == "isalpha" ? std::isalpha(uint8_t(c)) : is_space_byte(c));
      return value(json(all));
    }
    type_error("str." + name + " is not supported");
  });
}

/// A method of a list or dict that would change it: refused when called, as the immutable sandbox transformers
/// renders in refuses it (an undefined value otherwise).
value unsafe_method(const value& obj, const std::string& name) {
  static const std::set<std::string> list_mutators{"append", "extend", "insert", "pop", "remove", "reverse", "sort",
                                                   "clear"};
  static const std::set<std::string> dict_mutators{"clear", "pop", "popitem", "setdefault", "update"};
  if (!(obj.is_list() ? list_mutators : dict_mutators).count(name)) return value();
  const std::string what = "access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe";
  return value::make_callable([what](const call_args&) -> value { throw template_error(what, error_kind::unsafe); });
}

value dict_method(const json& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values")
    return value::make_callable([d, name](const call_args&) {
      json out = json::array();
      for (const auto& [k, v] : d.items())
        out.push_back(name == "items" ? json::array({k, v}) : name == "keys" ? json(k) : v);
      return value(std::move(out));
    });
  if (name == "get")
    return value::make_callable([d](const call_args& a) {
      const value key = arg(a, 0, "key");
      if (key.is_string() && d.contains(key.str())) return value(d[key.str()]);
      return arg(a, 1, "default", value::none());
    });
  return value();
}

int64_t index_in(int64_t i, size_t size) { return i < 0 ? i + int64_t(size) : i; }

std::string strftime_now(const std::string& format) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char out[256];
  const size_t n = std::strftime(out, sizeof out, format.c_str(), &local);
  return std::string(out, n);
}

json range_of(const call_args& a) {
  int64_t start = 0, stop = 0, step = 1;
  const auto n = [&](size_t i) { return to_int(a.positional.at(i).data()); };
  if (a.positional.size() == 1) stop = n(0);
  else if (a.positional.size() >= 2) start = n(0), stop = n(1);
  if (a.positional.size() == 3) step = n(2);
  if (step == 0 || a.positional.empty() || a.positional.size() > 3) type_error("range() takes 1 to 3 whole numbers");
  json out = json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= max_list_items) type_error("range() of more than max_list_items");
    out.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // past int64: past stop too
  }
  return out;
}

json keywords_object(const call_args& a) {
  json o = json::object();
  for (const auto& [k, v] : a.keywords) o[k] = as_data(v);
  check_data_depth(o, "dict() or namespace()");
  return o;
}

/// The attribute `name` of each list element (dotted paths walk dicts); undefined where absent.
value attribute_path(const value& v, const std::string& path) {
  value at = v;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    at = at.is_undefined() ? at : item(at, value(json(part)));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return at;
}

json list_of(const value& v) {
  if (v.is_list() || v.is_generator()) return v.data();
  json out = json::array();
  if (v.is_undefined()) return out;
  if (v.is_dict())
    for (const auto& [k, e] : v.data().items()) out.push_back(k);
  else if (v.is_string())
    for (const std::string& c : characters(v.str())) out.push_back(c);
  else
    type_error("'" + v.type_name() + "' object is not iterable");
  return out;
}

value select(const value& v, const call_args& a, bool by_attribute, bool keep) {
  json out = json::array();
  if (!v.truthy()) return value::generator(std::move(out));  // Jinja2 walks a sequence only when it is true
  const size_t test_at = by_attribute ? 1 : 0;
  const std::string attr = by_attribute ? arg(a, 0, "attribute").str() : "";
  const value test = arg(a, test_at, "test");
  call_args rest;
  for (size_t i = test_at + 1; i < a.positional.size(); ++i) rest.positional.push_back(a.positional[i]);
  for (const json& e : list_of(v)) {
    const value subject = by_attribute ? attribute_path(value(e), attr) : value(e);
    const bool hit = test.is_undefined() ? subject.truthy() : apply_test(test.str(), subject, rest);
    if (hit == keep) out.push_back(e);
  }
  return value::generator(std::move(out));
}

std::string indent(const std::string& s, const value& width, bool first, bool blank) {
  const int64_t spaces = width.is_data() && !width.is_string() ? to_int(width.data()) : 4;
  check_text_size(size_t(std::max<int64_t>(spaces, 0)), "indent");
  const std::string pad = width.is_string() ? width.str() : std::string(size_t(std::max<int64_t>(spaces, 0)), ' ');
  std::string out;
  size_t at = 0;
  bool first_line = true;
  while (at <= s.size()) {
    const size_t nl = s.find('\n', at);
    const std::string line = s.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if ((first_line ? first : true) && (blank || !line.empty())) out += pad;
    out += line;
    check_text_size(out.size(), "indent");
    if (nl == std::string::npos) break;
    out += '\n';
    at = nl + 1;
    first_line = false;
  }
  return out;
}

}  // namespace

std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = uint8_t(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

json as_data(const value& v) {
  if (v.is_undefined()) return json();
  if (v.is_generator()) type_error("Object of type generator is not JSON serializable");
  if (v.is_namespace()) return v.ns();
  if (v.is_callable()) type_error("a function is not data");
  return v.data();
}

value global(const std::string& name) {
  if (name == "raise_exception")
    return value::make_callable([](const call_args& a) -> value {
      throw template_error("raise_exception: " + arg(a, 0, "message").render(), error_kind::raised);
    });
  if (name == "strftime_now")
    return value::make_callable([](const call_args& a) { return value(json(strftime_now(arg(a, 0, "format").str()))); });
  if (name == "range") return value::make_callable([](const call_args& a) { return value(range_of(a)); });
  if (name == "namespace")
    return value::make_callable([](const call_args& a) {
      json o = keywords_object(a);
      if (!a.positional.empty() && a.positional[0].is_dict())
        for (const auto& [k, v] : a.positional[0].data().items()) o[k] = v;
      return value::make_namespace(std::move(o));
    });
  if (name == "dict") return value::make_callable([](const call_args& a) { return value(keywords_object(a)); });
  return value();
}

value attribute(const value& obj, const std::string& name) {
  if (obj.is_undefined()) throw template_error("'" + name + "' of an undefined value", error_kind::undefined);
  if (obj.is_namespace()) return obj.ns().contains(name) ? value(obj.ns()[name]) : value();
  if (obj.is_dict()) {
    if (value m = dict_method(obj.data(), name); !m.is_undefined()) return m;
    if (obj.data().contains(name)) return value(obj.data()[name]);
    return unsafe_method(obj, name);
  }
  if (obj.is_string()) return string_method(obj.str(), name);
  if (obj.is_list()) return unsafe_method(obj, name);
  return value();
}

value item(const value& obj, const value& key) {
  if (obj.is_undefined()) throw template_error("an item of an undefined value", error_kind::undefined);
  if (obj.is_list() && numeric(key)) {
    const int64_t i = index_in(to_int(key.data()), obj.data().size());
    return i >= 0 && size_t(i) < obj.data().size() ? value(obj.data()[size_t(i)]) : value();
  }
  if (obj.is_string() && numeric(key)) {
    const auto chars = characters(obj.str());
    const int64_t i = index_in(to_int(key.data()), chars.size());
    return i >= 0 && size_t(i) < chars.size() ? value(json(chars[size_t(i)])) : value();
  }
  if (obj.is_dict() && key.is_string() && obj.data().contains(key.str())) return value(obj.data()[key.str()]);
  if (key.is_string()) return attribute(obj, key.str());
  return value();
}

value slice(const value& obj, const value& start, const value& stop, const value& step) {
  if (!obj.is_list() && !obj.is_string()) type_error("'" + obj.type_name() + "' object is not subscriptable");
  std::vector<json> items;
  if (obj.is_list())
    for (const json& e : obj.data()) items.push_back(e);
  else
    for (const std::string& c : characters(obj.str())) items.push_back(c);
  const int64_t n = int64_t(items.size());
  const int64_t by = step.is_none() ? 1 : to_int(step.data());
  if (by == 0) type_error("slice step cannot be zero");
  const auto bound = [&](const value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t i = to_int(v.data());
    if (i < 0) i += n;
    return by > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = bound(start, by > 0 ? 0 : n - 1), e = bound(stop, by > 0 ? n : -1);
  json out = json::array();
  for (int64_t i = b; by > 0 ? i < e : i > e;) {
    out.push_back(items[size_t(i)]);
    if (__builtin_add_overflow(i, by, &i)) break;  // past int64: past the end too
  }
  if (obj.is_list()) return value(std::move(out));
  std::string s;
  for (const json& c : out) s += c.get<std::string>();
  return value(json(s));
}

value apply_filter(const std::string& name, const value& v, const call_args& a) {
  if (name == "length" || name == "count") {
    if (v.is_string()) return value(json(int64_t(characters(v.str()).size())));
    if (v.is_namespace()) return value(json(int64_t(v.ns().size())));
    if (v.is_generator()) type_error("object of type 'generator' has no len()");
    return value(json(int64_t(v.is_undefined() ? 0 : list_of(v).size())));
  }
  if (name == "tojson") {
    const value ind = arg(a, 0, "indent");
    return value(json(python_json(as_data(v), ind.is_data() && !ind.is_none() ? int(to_int(ind.data())) : -1,
                                  arg(a, 1, "sort_keys", value(json(false))).truthy())));
  }
  if (name == "trim" || name == "strip") return value(json(strip(text_of(v), arg(a, 0, "chars"), true, true)));
  if (name == "upper" || name == "lower") return value(json(ascii_case(text_of(v), name == "upper")));
  if (name == "capitalize") return value(json(capitalize(text_of(v))));
  if (name == "title") return value(json(title(text_of(v))));
  if (name == "string") return value(json(text_of(v)));
  if (name == "safe") return value::markup(text_of(v));
  if (name == "e" || name == "escape" || name == "forceescape") return v.is_markup() ? v : value(json(html_escape(text_of(v))));
  if (name == "int") return value(json(v.is_string() ? int64_t(std::strtoll(v.str().c_str(), nullptr, 10)) : numeric(v) ? to_int(v.data()) : 0));
  if (name == "float") return value(json(v.is_string() ? std::strtod(v.str().c_str(), nullptr) : numeric(v) ? to_double(v.data()) : 0.0));
  if (name == "abs") return numeric(v) && (is_int(v.data()) ? to_int(v.data()) < 0 : to_double(v.data()) < 0) ? negate(v, true) : v;
  if (name == "round") {
    const double scale = std::pow(10.0, double(to_int(arg(a, 0, "precision", value(json(0))).data())));
    return value(json(std::round(to_double(v.data()) * scale) / scale));
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean", value(json(false))).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? arg(a, 0, "default_value", value(json(""))) : v;
  }
  if (name == "list") return value(list_of(v));
  if (name == "first" || name == "last") {
    const json l = list_of(v);
    return l.empty() ? value() : value(name == "first" ? l.front() : l.back());
  }
  if (name == "reverse") {
    if (v.is_string()) return slice(v, value::none(), value::none(), value(json(-1)));
    json l = list_of(v);
    std::reverse(l.begin(), l.end());
    return value(std::move(l));
  }
  if (name == "join") {
    const value attr = arg(a, 1, "attribute");
    std::string out;
    const std::string sep = text_of(arg(a, 0, "d", value(json(""))));
    bool first = true;
    for (const json& e : list_of(v)) {
      out += (first ? "" : sep) + (attr.is_string() ? attribute_path(value(e), attr.str()).render() : python_str(e));
      first = false;
    }
    return value(json(out));
  }
  if (name == "replace") {
    const value count = arg(a, 2, "count");
    return value(json(replace_all(text_of(v), text_of(arg(a, 0, "old")), text_of(arg(a, 1, "new")),
                                  count.is_data() && !count.is_none() ? to_int(count.data()) : -1)));
  }
  if (name == "items") {
    if (v.is_undefined()) return value(json::array());
    if (!v.is_dict()) type_error("items of a " + v.type_name());
    return attribute(v, "items").fn()({});
  }
  if (name == "dictsort") {
    if (!v.is_dict()) type_error("dictsort of a " + v.type_name());
    json out = json::array();
    for (const auto& [k, e] : v.data().items()) out.push_back(json::array({k, e}));
    std::sort(out.begin(), out.end(), [](const json& x, const json& y) { return ascii_case(x[0].get<std::string>(), false) < ascii_case(y[0].get<std::string>(), false); });
    return value(std::move(out));
  }
  if (name == "map") {
    json out = json::array();
    if (!v.truthy()) return value::generator(std::move(out));
    const value attr = arg(a, 99, "attribute");
    call_args rest;
    for (size_t i = 1; i < a.positional.size(); ++i) rest.positional.push_back(a.positional[i]);
    for (const json& e : list_of(v)) {
      if (attr.is_string()) {
        const value got = attribute_path(value(e), attr.str());
        out.push_back(got.is_undefined() ? as_data(arg(a, 99, "default")) : as_data(got));
      } else {
        out.push_back(as_data(apply_filter(arg(a, 0, "filter").str(), value(e), rest)));
      }
    }
    return value::generator(std::move(out));
  }
  if (name == "select" || name == "reject") return select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr");
  if (name == "unique") {
    json out = json::array();
    for (const json& e : list_of(v))
      if (std::none_of(out.begin(), out.end(), [&](const json& o) { return python_equal(o, e); })) out.push_back(e);
    return value::generator(std::move(out));
  }
  if (name == "sort") {
    json l = list_of(v);
    const value attr = arg(a, 2, "attribute");
    const bool reverse = arg(a, 0, "reverse", value(json(false))).truthy();
    std::stable_sort(l.begin(), l.end(), [&](const json& x, const json& y) {
      const value vx = attr.is_string() ? attribute_path(value(x), attr.str()) : value(x);
      const value vy = attr.is_string() ? attribute_path(value(y), attr.str()) : value(y);
      return reverse ? compare(vy, vx) < 0 : compare(vx, vy) < 0;
    });
    return value(std::move(l));
  }
  if (name == "sum" || name == "min" || name == "max") {
    json l = list_of(v);
    if (name == "sum") {
      value total(json(0));
      for (const json& e : l) total = arithmetic("+", total, value(e));
      return total;
    }
    if (l.empty()) return value();
    json best = l[0];
    for (const json& e : l)
      if ((name == "min" ? compare(value(e), value(best)) : compare(value(best), value(e))) < 0) best = e;
    return value(best);
  }
  if (name == "indent")
    return value(json(indent(text_of(v), arg(a, 0, "width"), arg(a, 1, "first", value(json(false))).truthy(),
                             arg(a, 2, "blank", value(json(false))).truthy())));
  if (name == "wordcount") return value(json(int64_t(split(text_of(v), value(), -1).size())));
  type_error("unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const value& v, const call_args& a) {
  const value other = arg(a, 0, "other");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_data() && v.data().is_number();
  if (name == "integer") return v.is_data() && (v.data().is_number_integer() || v.data().is_number_unsigned());
  if (name == "float") return v.is_data() && v.data().is_number_float();
  if (name == "boolean") return v.is_data() && v.data().is_boolean();
  if (name == "true") return v.is_data() && v.data().is_boolean() && v.data().get<bool>();
  if (name == "false") return v.is_data() && v.data().is_boolean() && !v.data().get<bool>();
  if (name == "mapping") return v.is_dict() || v.is_namespace();
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even") {
    if (!numeric(v)) type_error(name + " of a " + v.type_name());
    return (to_int(v.data()) % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") return arithmetic("%", value(json(to_int(v.data()))), value(json(to_int(other.data())))) == value(json(0));
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return v == other;
  if (name == "ne" || name == "!=") return !(v == other);
  if (name == "lt" || name == "lessthan") return compare(v, other) < 0;
  if (name == "gt" || name == "greaterthan") return compare(v, other) > 0;
  if (name == "le") return compare(v, other) <= 0;
  if (name == "ge") return compare(v, other) >= 0;
  if (name == "in") return contains(other, v);
  if (name == "lower" || name == "upper") return v.is_string() && ascii_case(v.str(), name == "upper") == v.str();
  type_error("unknown test '" + name + "'");
}

}  // namespace illm::jinja
