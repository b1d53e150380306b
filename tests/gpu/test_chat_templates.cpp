// Chat templates of real models render as Jinja2 renders them for transformers' apply_chat_template: the
// templates in the tokenizer_config.json files of deploy/fetch-tokenizers.sh and llama.cpp's collection of real
// templates (models/templates, which it stores too), each on system, multi-turn, assistant-final, thinking and
// tools conversations (tests/models/chat_template_reference.py renders them with Debian's python3-jinja2). The
// same output, byte for byte (at least 530 of them), or the same kind of refusal (raise_exception, an undefined
// value, a type error).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/jinja/template.hpp"
#include "gpu/model_files.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;
namespace fs = std::filesystem;
using ordered = nlohmann::ordered_json;

namespace {

/// Templates of the collection this engine does not render, and why.
const std::map<std::string, std::string> not_rendered = {
    {"ByteDance-Seed-OSS.jinja", "a dict literal with whole-number keys (this engine's dicts have string keys)"},
};

/// Renders compared byte for byte at the least (560 renders of 70 templates; some refuse by design).
constexpr size_t min_same_renders = 530;

/// The reference's name of an error kind (tests/models/chat_template_reference.py).
std::string kind_name(jinja::error_kind k) {
  switch (k) {
    case jinja::error_kind::syntax: return "syntax";
    case jinja::error_kind::raised: return "raised";
    case jinja::error_kind::undefined: return "undefined";
    case jinja::error_kind::unsafe: return "unsafe";
    case jinja::error_kind::type: return "type";
  }
  return "?";
}

/// Every template the reference rendered, with its conversations and outputs.
ordered template_cases() {
  if (!fs::exists(test::hf_tokenizers_dir() / "templates")) FAIL("the templates are needed: run deploy/fetch-tokenizers.sh");
  char pattern[] = "/tmp/illm-templates-XXXXXX";
  REQUIRE(::mkdtemp(pattern) != nullptr);
  const fs::path dir = pattern;
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::string command = python + " " ILLM_SOURCE_DIR "/tests/models/chat_template_reference.py " + (dir / "out.json").string();
  for (const auto& e : fs::directory_iterator(test::hf_tokenizers_dir() / "templates"))
    if (e.path().extension() == ".jinja") command += " " + e.path().string();
  for (const auto& e : fs::directory_iterator(test::hf_tokenizers_dir()))
    if (fs::exists(e.path() / "tokenizer_config.json")) command += " " + (e.path() / "tokenizer_config.json").string();
  command += " 2> " + (dir / "log.txt").string();
  INFO("the reference needs python3-jinja2 (deploy/install-deps.sh installs it)");
  REQUIRE(std::system(command.c_str()) == 0);
  ordered out;
  std::ifstream(dir / "out.json") >> out;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("chat templates of real models render as Jinja2 renders them") {
    const ordered cases = template_cases();
    std::map<std::string, int> differ_by_template;
    size_t same = 0, refused_alike = 0, templates = 0;
    std::string last_template;
    for (const ordered& c : cases) {
      const std::string name = fs::path(c["template"].get<std::string>()).filename().string() ==
                                       "tokenizer_config.json"
                                   ? fs::path(c["template"].get<std::string>()).parent_path().filename().string()
                                   : fs::path(c["template"].get<std::string>()).filename().string();
      if (not_rendered.count(name)) continue;
      if (name != last_template) ++templates, last_template = name;
      std::string got, error, kind;
      try {
        got = jinja::template_program::parse(c["source"].get<std::string>()).render(c["variables"]);
      } catch (const jinja::template_error& e) {
        error = e.what();
        kind = kind_name(e.kind);
      }
      const bool expected_error = c.contains("error");
      if (expected_error && !error.empty() && kind == c["error_kind"].get<std::string>()) {
        ++refused_alike;
      } else if (!expected_error && error.empty() && got == c["output"].get<std::string>()) {
        ++same;
      } else if (differ_by_template[name]++ == 0) {
        MESSAGE(name, " / ", c["conversation"].get<std::string>(), ": ",
                expected_error ? "Jinja2 refused (" + c["error_kind"].get<std::string>() + ", " +
                                     c["error"].get<std::string>() + ")"
                               : "Jinja2 rendered",
                error.empty() ? "; ours rendered" : "; ours refused (" + kind + "): " + error, "\n--- ours:\n", got,
                "\n--- Jinja2:\n", expected_error ? "" : c["output"].get<std::string>());
      }
    }
    size_t differ = 0;
    for (const auto& [name, n] : differ_by_template) differ += size_t(n);
    MESSAGE(templates, " templates, ", same + refused_alike + differ, " renders: ", same, " the same byte for byte, ",
            refused_alike, " refused by both with the same kind of error, ", differ, " differ; left out: ",
            not_rendered.size());
    CHECK(differ == 0);
    CHECK(same >= min_same_renders);  // a comparison of nothing passes nothing
  }
}
