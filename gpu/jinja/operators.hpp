#pragma once
// Python's operators on the Jinja engine's values, shared by the engine's builtins: numbers read as 64-bit integers
// or doubles (Python's integers have no bound; a template's integer that leaves 64 bits is a template_error, never
// undefined behaviour), comparison, membership, and arithmetic whose results are bounded in size
// (max_text_bytes, max_list_items) before they are built.

#include <cstdint>
#include <string>

#include "gpu/jinja/value.hpp"

namespace illm::jinja {

/// A template_error saying `what` (Python's TypeError, ValueError, ZeroDivisionError, OverflowError).
[[noreturn]] void type_error(const std::string& what);
/// Whether `j` is an integer to Python (booleans are).
bool is_int(const json& j);
/// `j` as an integer (a float truncated); a template_error when it does not fit 64 bits.
int64_t to_int(const json& j);
/// `j` as a double.
double to_double(const json& j);
/// Whether `v` is a number or a boolean.
bool numeric(const value& v);
/// Python's ordering of two numbers or two strings: -1, 0 or 1; a template_error for other types.
int compare(const value& l, const value& r);
/// Python's `needle in haystack`.
bool contains(const value& haystack, const value& needle);
/// Python's + - * / // % ** on numbers, + on strings and lists, * of a string or list by an integer.
value arithmetic(const std::string& op, const value& l, const value& r);
/// markupsafe's escape.
std::string html_escape(const std::string& s);
/// ASCII upper or lower case.
std::string ascii_case(std::string s, bool upper);
/// A template_error unless a text of `bytes` fits max_text_bytes (`what` names the operation).
void check_text_size(size_t bytes, const char* what);

}  // namespace illm::jinja
