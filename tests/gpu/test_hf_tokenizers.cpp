// Hugging Face tokenizer.json files of real models (Llama 2, Llama 3, Llama 3.1, Qwen3, GPT-4o's o200k, which
// gpt-oss's is; deploy/fetch-tokenizers.sh)
// give the ids of Hugging Face's own JS implementation on a corpus that stresses them (tests/models/
// tokenizer_corpus.py: many scripts, combining marks, emoji sequences, whitespace runs, digits, code,
// special-token text): with and without the special tokens they add, and decode gives its text.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/formats/gguf_model.hpp"
#include "gpu/formats/hf_model.hpp"
#include "gpu/model_files.hpp"
#include "gpu/tokenizers/hf_tokenizer.hpp"
#include "gpu/tokenizers/unicode_text.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> vocabularies = {"llama2", "llama3", "llama3_1", "qwen3", "gpt4o"};

/// The corpus and the reference's answers for every vocabulary, made once per process in a folder removed at exit.
const json& tokenizer_answers() {
  static const json answers = [] {
    if (!fs::exists(test::hf_tokenizers_dir() / "js"))
      FAIL("the tokenizer files are needed: run deploy/fetch-tokenizers.sh");
    char pattern[] = "/tmp/illm-tokenizers-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    const fs::path dir = pattern;
    const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    std::string command = python + " " ILLM_SOURCE_DIR "/tests/models/tokenizer_corpus.py " + (dir / "corpus.json").string() +
                          " && node " ILLM_SOURCE_DIR "/tests/models/tokenizer_reference.mjs " +
                          (test::hf_tokenizers_dir() / "js" / "package").string() + " " + (dir / "corpus.json").string();
    for (const std::string& v : vocabularies) command += " " + (test::hf_tokenizers_dir() / v).string();
    command += " > " + (dir / "reference.json").string();
    INFO("the reference needs python3 and node (deploy/install-deps.sh installs them)");
    REQUIRE(std::system(command.c_str()) == 0);
    json out;
    std::ifstream(dir / "corpus.json") >> out["corpus"];
    std::ifstream(dir / "reference.json") >> out["answers"];
    std::error_code ec;
    fs::remove_all(dir, ec);
    return out;
  }();
  return answers;
}

std::string shown(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("tokenizer.json of Llama 2, 3, 3.1, Qwen3 and GPT-4o give the ids and text of Hugging Face's tokenizers") {
    const json& ref = tokenizer_answers();
    const auto& corpus = ref["corpus"];
    size_t compared = 0, differences = 0;
    for (const std::string& v : vocabularies) {
      auto tok = gpu::hf_tokenizer::load((test::hf_tokenizers_dir() / v).string());
      REQUIRE_MESSAGE(tok.is_ok(), tok.error().message());
      const json& answers = ref["answers"][(test::hf_tokenizers_dir() / v).string()];
      REQUIRE(answers.size() == corpus.size());
      size_t mine = 0;
      for (size_t i = 0; i < corpus.size(); ++i) {
        const std::string text = corpus[i].get<std::string>();
        const auto special = answers[i]["special"].get<std::vector<int32_t>>();
        const auto plain = answers[i]["plain"].get<std::vector<int32_t>>();
        const auto got_special = tok.value()->encode(text, true), got_plain = tok.value()->encode(text, false);
        const std::string decoded = tok.value()->decode_text(plain, false);
        // Streaming: token by token, the bytes add up to the text (where decode cleans up no spaces).
        if (v == "llama2" || v == "qwen3") {
          std::vector<int32_t> text_ids;
          for (int32_t id : plain)
            if (!tok.value()->is_special(id)) text_ids.push_back(id);
          CHECK_MESSAGE(gpu::valid_utf8(tok.value()->decode(text_ids, -1)) == tok.value()->decode_text(plain, true),
                        v, " text ", i);
        }
        for (bool same : {got_special == special, got_plain == plain, decoded == answers[i]["decoded"].get<std::string>()}) {
          ++compared;
          if (!same) ++mine;
        }
        if ((got_plain != plain || got_special != special || decoded != answers[i]["decoded"]) && mine <= 3)
          MESSAGE(v, " text ", i, " ", json(text).dump(), "\n  ours   ", shown(got_plain), "\n  theirs ", shown(plain),
                  "\n  decoded ", json(decoded).dump(), " vs ", answers[i]["decoded"].dump());
      }
      MESSAGE(v, ": ", 3 * corpus.size(), " comparisons (ids with and without specials, decode), ", mine, " differ");
      differences += mine;
    }
    MESSAGE(compared, " comparisons over ", corpus.size(), " texts, ", differences, " differences");
    CHECK(differences == 0);
  }

  TEST_CASE("GGUF's pre-tokenizer gpt-4o splits as o200k's tokenizer.json does") {
    // A GGUF vocabulary names its pre-tokenizer; the engine keeps the regex of each: gpt-oss's (gpt-4o) must be
    // the one o200k's tokenizer.json splits with (checked above against Hugging Face's tokenizers).
    json o200k;
    std::ifstream(test::hf_tokenizers_dir() / "gpt4o" / "tokenizer.json") >> o200k;
    const json& split = o200k["pre_tokenizer"]["pretokenizers"][0];
    REQUIRE(split["type"] == "Split");
    CHECK(gpu::gguf_pre_tokenizer_regex("gpt-4o") == split["pattern"]["Regex"].get<std::string>());
    CHECK_FALSE(gpu::gguf_pre_tokenizer_regex("no-such-vocabulary"));
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("a pre-tokenizer's regex that stops at its match limit fails the text, never splits it otherwise") {
    // (a+)+b backtracks exponentially on a run of a's without a b: PCRE2 stops at its match limit.
    const std::string pathological = "(a+)+b";
    auto regex = gpu::unicode_regex::compile(pathological);
    REQUIRE(regex.is_ok());
    const std::string text = std::string(40, 'a') + " b";  // the b is past a space: no match from the a's
    const auto found = regex.value().matches(text);
    REQUIRE_FALSE(found.is_ok());
    CHECK(found.error().message().find("cannot be split") != std::string::npos);
    CHECK(regex.value().matches("aab ab").value().size() == 2);
    const json j = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {" ", 2}, {"c", 3}}}, {"merges", json::array()}}},
                    {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", pathological}}}, {"behavior", "Isolated"},
                                       {"invert", false}}}};
    auto t = gpu::hf_tokenizer::from_json(j, "test");
    REQUIRE_MESSAGE(t.is_ok(), t.error().message());
    CHECK(t.value()->try_encode("ab c", false).value() == std::vector<int32_t>{0, 1, 2, 3});
    const auto refused = t.value()->try_encode(text, false);
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.error().message().find("match limit") != std::string::npos);
    CHECK(t.value()->encode(text, false).empty());  // no silent split on the unchecked path either
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("a model folder's JSON nested past 128 levels is refused as it is read, tokenizer.json and config.json") {
    char pattern[] = "/tmp/illm-deep-json-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    const fs::path dir = pattern;
    const std::string deep = R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": )" +
                             std::string(200, '[') + std::string(200, ']') + "}";
    std::ofstream(dir / "tokenizer.json") << deep;
    const auto t = gpu::hf_tokenizer::load((dir / "tokenizer.json").string());
    REQUIRE_FALSE(t.is_ok());
    CHECK(t.error().message().find("deeper than 128") != std::string::npos);
    std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "x": )" + std::string(130, '[') +
                                              std::string(130, ']') + "}";
    const auto config = gpu::read_hf_config(dir.string());
    REQUIRE_FALSE(config.is_ok());
    CHECK(config.error().message().find("deeper than 128") != std::string::npos);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}
