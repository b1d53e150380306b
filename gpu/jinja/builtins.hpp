#pragma once
// What Jinja2 and Python give a chat template: the globals (raise_exception, strftime_now, range, namespace,
// dict), attribute and item access with Python's methods of str, list and dict, slices, the operators, and the
// filters and tests templates use. An unknown filter, test or method, or a type error, is a template_error.

#include <string>
#include <vector>

#include "gpu/jinja/value.hpp"

namespace illm::jinja {

/// A global by name (undefined when there is none).
value global(const std::string& name);
/// obj.name: a dict's method or key, a str's or list's method, a namespace's attribute.
value attribute(const value& obj, const std::string& name);
/// obj[key]: a list's element (negative from the end), a dict's key, a str's character; else the attribute.
value item(const value& obj, const value& key);
/// obj[start:stop:step] of a list or str (none: the default bound).
value slice(const value& obj, const value& start, const value& stop, const value& step);
/// -v or +v.
value negate(const value& v, bool minus);
/// The binary operators but "and" and "or": == != < > <= >= in, not in, + - * / // % ** ~.
value apply_operator(const std::string& op, const value& l, const value& r);
/// v | name(args).
value apply_filter(const std::string& name, const value& v, const call_args& args);
/// v is name(args).
bool apply_test(const std::string& name, const value& v, const call_args& args);
/// The data of `v` (a namespace's attributes; undefined: null); a callable is a template_error.
json as_data(const value& v);
/// The characters (code points, as UTF-8) of `s`.
std::vector<std::string> characters(const std::string& s);

}  // namespace illm::jinja
