// The Jinja engine's bounds hold at their limits: expressions nested 200 deep and blocks 100 deep parse, one more
// does not; 64 nested macro calls run, 65 do not; a render stops at its step limit, repetitions and concatenations
// are counted by their length and bounded in size; integer arithmetic is Python's where it fits 64 bits and a
// template error where it does not (never a signal or undefined behaviour); data nests at most max_data_depth.
#include <doctest/doctest.h>

#include <string>

#include "gpu/jinja/template.hpp"

using namespace illm;

namespace {

/// What `source` renders with no variables, or "error: ..." when it raises.
std::string render(const std::string& source, const jinja::json& variables = jinja::json::object()) {
  try {
    return jinja::template_program::parse(source).render(variables);
  } catch (const jinja::template_error& e) {
    return std::string("error: ") + e.what();
  }
}

bool refused(const std::string& source, const std::string& why) {
  const std::string out = render(source);
  INFO(source.substr(0, 80), " -> ", out.substr(0, 200));
  return out.rfind("error: ", 0) == 0 && out.find(why) != std::string::npos;
}

std::string repeated(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("the Jinja parser's nesting bounds hold at their limits") {
    // A parenthesis nests two levels (its expression and the operand it is): 99 take 198 of the 200, with the
    // outer expression and its operand 200.
    const auto parens = [](int n) { return "{{ " + repeated("(", n) + "1" + repeated(")", n) + " }}"; };
    CHECK(render(parens(99)) == "1");
    CHECK(refused(parens(100), "expressions nested too deeply"));
    const auto blocks = [](int n) { return repeated("{% if true %}", n) + "x" + repeated("{% endif %}", n); };
    CHECK(render(blocks(99)) == "x");  // the template's own body is the first level
    CHECK(refused(blocks(100), "blocks nested too deeply"));
  }

  TEST_CASE("macros nest 64 calls deep, a render takes at most its step limit") {
    const auto calls = [](int n) {
      return "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}end{% endif %}{% endmacro %}{{ f(" +
             std::to_string(n) + ") }}";
    };
    CHECK(render(calls(63)) == "end");
    CHECK(refused(calls(64), "macros nested too deeply"));
    // Each iteration is a step: empty loops are bounded too.
    CHECK(refused("{% for i in range(1000000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "too many steps"));
  }

  TEST_CASE("repetition and concatenation are bounded in size and counted by their length") {
    CHECK(render("{{ 'ab' * 3 }}{{ [1] * 2 }}{{ 'x' * -1 }}") == "ababab[1, 1]");
    CHECK(refused("{{ 'x' * 10000000000 }}", "max_text_bytes"));
    CHECK(refused("{{ ([1, 2] * 100000000) | length }}", "max_list_items"));
    CHECK(refused("{{ ('x' * 40000000) + ('x' * 40000000) }}", "max_text_bytes"));
    CHECK(refused("{{ ('x' * 40000000) ~ ('x' * 40000000) }}", "max_text_bytes"));
    CHECK(refused("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                  "too many steps"));  // doubling: its copies reach the step limit before the size limit
    // A million-byte string built again and again: each build costs its length in steps, so the loop stops early.
    CHECK(refused("{% for i in range(100000) %}{% set s = 'x' * 1000000 %}{% endfor %}", "too many steps"));
    CHECK(refused("{{ ('a' * 1000000) | replace('a', '" + std::string(80, 'b') + "') }}", "max_text_bytes"));
    CHECK(refused("{{ 'a' | indent(100000000000) }}", "max_text_bytes"));
  }

  TEST_CASE("integer arithmetic is Python's within 64 bits and an error past them") {
    CHECK(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 5 % -1 }} {{ -5 // -1 }}") ==
          "3 -4 -4 2 -2 0 5");
    CHECK(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 2 ** -1 }}") == "4611686018427387904 -9223372036854775808 0.5");
    const std::string min = "(-9223372036854775807 - 1)";
    CHECK(render("{{ " + min + " % -1 }}") == "0");  // SIGFPE in C
    CHECK(refused("{{ " + min + " // -1 }}", "does not fit 64 bits"));
    CHECK(refused("{{ -" + min + " }}", "does not fit 64 bits"));
    CHECK(refused("{{ 9223372036854775807 + 1 }}", "does not fit 64 bits"));
    CHECK(refused("{{ 4611686018427387904 * 2 }}", "does not fit 64 bits"));
    CHECK(refused("{{ " + min + " - 1 }}", "does not fit 64 bits"));
    CHECK(refused("{{ 2 ** 63 }}", "does not fit 64 bits"));
    CHECK(refused("{{ 1 // 0 }}", "by zero"));
    CHECK(refused("{{ 1 % 0 }}", "by zero"));
    CHECK(refused("{{ 1.5 // 0.0 }}", "by zero"));
    CHECK(refused("{{ 7 is divisibleby 0 }}", "by zero"));
    CHECK(render("{{ " + min + " is divisibleby(-1) }}") == "True");
    CHECK(refused("{{ range(10.0 ** 300) }}", "too large"));
    CHECK(render("{{ range(9223372036854775800, 9223372036854775807, 4) | list }}") ==
          "[9223372036854775800, 9223372036854775804]");
    CHECK(render("{{ [1, 2, 3][::9223372036854775807] }}") == "[1]");
  }

  TEST_CASE("data nests at most max_data_depth, whether it is built or given") {
    CHECK(refused("{% set ns = namespace(x=1) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}",
                  "deeper than max_data_depth"));
    CHECK(refused("{% set ns = namespace(x=1) %}{% for i in range(1000) %}{% set ns.x = dict(a=ns.x) %}{% endfor %}",
                  "deeper than max_data_depth"));
    jinja::json deep = 1;
    for (int i = 0; i < jinja::max_data_depth + 10; ++i) deep = jinja::json::array({deep});
    const jinja::json variables = {{"v", deep}};
    for (const char* use : {"{{ v | tojson }}", "{{ v }}", "{{ v == v }}"})
      CHECK(render(use, variables).find("deeper than max_data_depth") != std::string::npos);
  }
}
