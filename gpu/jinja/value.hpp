#pragma once
// Values of the Jinja engine, as Python sees them (chat templates are written for Jinja2 on Python): none,
// booleans, integers, floats, strings, lists and dicts (insertion-ordered, as Python's), the undefined value of a
// name or key that is not there, namespaces (the one mutable object templates have) and callables (macros,
// global functions, bound methods). Rendering, truth, equality and tojson follow Python's rules.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace illm::jinja {

using json = nlohmann::ordered_json;

class value;
/// Positional and keyword arguments of a call.
struct call_args {
  std::vector<value> positional;
  std::vector<std::pair<std::string, value>> keywords;
  /// The keyword `name`, else positional `index`, else nullptr.
  const value* get(size_t index, const std::string& name) const;
};
using function = std::function<value(const call_args&)>;

/// The longest text a render builds (a string, a filter's result, the output): a bound on memory, as the step limit of
/// a render bounds its time.
inline constexpr size_t max_text_bytes = size_t(64) << 20;
/// The most items a list a render builds may hold.
inline constexpr size_t max_list_items = size_t(1) << 20;
/// The deepest nesting of lists and dicts a render builds or walks (client data arrives bounded at 128 levels).
inline constexpr int max_data_depth = 512;

/// What kind of error a template raised, as Jinja2 tells them apart: a construct it cannot read
/// (TemplateSyntaxError), the template's own raise_exception (transformers' TemplateError), a use of an undefined
/// value that Jinja2 refuses (UndefinedError: its attribute, its item, a call, arithmetic), a method that would
/// change data (SecurityError: the immutable sandbox transformers renders in), or a type or value error of Python.
enum class error_kind : uint8_t { syntax, raised, undefined, unsafe, type };

/// An error of the template (a parse error, a type error, raise_exception): its message says where.
struct template_error : std::runtime_error {
  explicit template_error(const std::string& what, error_kind k = error_kind::type) : std::runtime_error(what), kind(k) {}
  error_kind kind;
};

/// A value.
class value {
 public:
  enum class kind : uint8_t { undefined, data, ns, callable };

  value() = default;  ///< undefined
  value(json j) : kind_(kind::data), data_(std::move(j)) {}
  static value undefined() { return {}; }
  static value none() { return value(json(nullptr)); }
  static value make_namespace(json object) {
    value v;
    v.kind_ = kind::ns;
    v.ns_ = std::make_shared<json>(std::move(object));
    return v;
  }
  /// What Jinja2's map, select and the like give: items to iterate once, not a list (no length, no index, not
  /// JSON, always true).
  static value generator(json items) {
    value v(std::move(items));
    v.generator_ = true;
    return v;
  }
  static value make_callable(function f) {
    value v;
    v.kind_ = kind::callable;
    v.fn_ = std::make_shared<function>(std::move(f));
    return v;
  }

  kind type() const { return kind_; }
  bool is_undefined() const { return kind_ == kind::undefined; }
  bool is_data() const { return kind_ == kind::data; }
  bool is_none() const { return kind_ == kind::data && data_.is_null(); }
  bool is_string() const { return kind_ == kind::data && data_.is_string(); }
  bool is_number() const { return kind_ == kind::data && data_.is_number() ; }
  bool is_list() const { return kind_ == kind::data && data_.is_array() && !generator_; }
  /// A string marked safe (Jinja2's Markup, from |safe): adding a plain string to it escapes that string.
  static value markup(std::string s) {
    value v{json(std::move(s))};
    v.markup_ = true;
    return v;
  }
  bool is_markup() const { return markup_; }
  bool is_generator() const { return generator_; }
  bool is_dict() const { return kind_ == kind::data && data_.is_object(); }
  bool is_namespace() const { return kind_ == kind::ns; }
  bool is_callable() const { return kind_ == kind::callable; }
  /// The data (none for a namespace's or callable's); a namespace's attributes through ns().
  const json& data() const { return data_; }
  json& ns() const { return *ns_; }
  const function& fn() const { return *fn_; }
  const std::string& str() const;  ///< a string's text (type_error otherwise)

  /// Python's truth.
  bool truthy() const;
  /// What {{ v }} writes: Python's str() (None, True, [1, 'a'], {'k': 2}); undefined writes nothing.
  std::string render() const;
  /// Python's ==.
  bool operator==(const value& o) const;
  /// Its type's name for messages ("str", "int", "list", ...).
  std::string type_name() const;

 private:
  kind kind_ = kind::undefined;
  bool generator_ = false;
  bool markup_ = false;
  json data_;
  std::shared_ptr<json> ns_;
  std::shared_ptr<function> fn_;
};

/// How deep the lists and dicts of `j` nest (a scalar: 0), counted to at most `limit` + 1.
int data_depth(const json& j, int limit = max_data_depth);
/// A template_error when `j` nests deeper than max_data_depth (`what` names what built it).
void check_data_depth(const json& j, const char* what);

/// Python's repr() of data ('text' quoted as Python quotes it).
std::string python_repr(const json& j);
/// Python's str() of data.
std::string python_str(const json& j);
/// json.dumps(j, ensure_ascii=False, indent=indent (negative: none), sort_keys) with Python's separators.
std::string python_json(const json& j, int indent, bool sort_keys);
/// Python's == on data (1 == 1.0, lists and dicts element by element).
bool python_equal(const json& a, const json& b);

}  // namespace illm::jinja
