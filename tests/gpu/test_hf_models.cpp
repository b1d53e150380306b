// Hugging Face folders of every supported architecture and dtype, and GGUF files (llama, qwen2, qwen3, the mixtures
// of experts, gpt-oss; F32, BF16, Q8_0, MXFP4), give the logits of a float64 numpy reference that follows transformers'
// modeling code
// (tests/models/tiny_checkpoints.py writes the tiny random checkpoints and the reference's greedy ids and logits,
// from the values each file holds): all 16 greedy ids equal, logits within 1e-3; over spread pools too. Bad
// folders and files (an unknown architecture or rope type, a shape that disagrees with config.json, a missing or
// extra tensor, a GGUF header that lies) are refused naming the file and the field.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/formats/gguf_model.hpp"
#include "gpu/formats/hf_model.hpp"
#include "gpu/text.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// A folder of tiny checkpoints written by the reference script for this process, removed at exit.
const fs::path& tiny_models() {
  static const fs::path dir = [] {
    char pattern[] = "/tmp/illm-tiny-hf-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    std::atexit([] { std::error_code ec; fs::remove_all(tiny_models(), ec); });
    // Debian's python3 has Debian's numpy (python3-numpy); another python3 first on PATH may lack it.
    const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const std::string command = python + " " + ILLM_SOURCE_DIR "/tests/models/tiny_checkpoints.py " + pattern +
                                " > " + pattern + "/log.txt 2>&1";
    INFO("the reference needs python3 and numpy (deploy/install-deps.sh installs them)");
    REQUIRE(std::system(command.c_str()) == 0);
    return fs::path(pattern);
  }();
  return dir;
}

json manifest() {
  std::ifstream in(tiny_models() / "manifest.json");
  return json::parse(in);
}

std::shared_ptr<const gpu::model_weights> load_gguf(const fs::path& path) {
  auto file = gpu::gguf_file::open(path.string());
  REQUIRE_MESSAGE(file.is_ok(), file.error().message());
  auto model = gpu::read_gguf_model(file.value());
  REQUIRE_MESSAGE(model.is_ok(), model.error().message());
  auto weights = gpu::load_gguf_weights(file.value(), model.value());
  REQUIRE_MESSAGE(weights.is_ok(), weights.error().message());
  return std::make_shared<const gpu::model_weights>(std::move(weights).value());
}

std::shared_ptr<const gpu::model_weights> load(const fs::path& folder) {
  if (folder.extension() == ".gguf") return load_gguf(folder);
  auto model = gpu::read_hf_config(folder.string());
  REQUIRE_MESSAGE(model.is_ok(), model.error().message());
  auto weights = gpu::load_hf_weights(folder.string(), model.value());
  REQUIRE_MESSAGE(weights.is_ok(), weights.error().message());
  return std::make_shared<const gpu::model_weights>(std::move(weights).value());
}

/// Greedy ids equal to the reference's and the logits of every step within 1e-3. Of a block type (Q8_0, gpt-oss's
/// MXFP4 experts) the reference
/// quantizes the activations as the engine does, in float64: a rounding tie that float32 and float64 break apart
/// moves every later logit (by up to 0.15 here), so there the bound is the NMSE of each step's logits, 1e-3; the
/// engine against its own reference backend (test_weight_types.cpp) is held to 1e-4 of every logit.
void check_against_reference(const json& entry, const test::greedy_options& options, const std::string& how) {
  const auto weights = load(tiny_models() / entry["path"].get<std::string>());
  const auto prompt = entry["prompt"].get<std::vector<int32_t>>();
  const auto expected = entry["ids"].get<std::vector<int32_t>>();
  test::greedy_options o = options;
  o.keep_logits = true;
  const auto run = test::run_greedy(weights, prompt, int(expected.size()), o);
  const std::string what = entry["name"].get<std::string>() + ", " + how;
  CHECK_MESSAGE(run.ids == expected, what);
  double worst = 0, worst_nmse = 0;
  for (size_t step = 0; step < run.logits.size(); ++step) {
    const auto ref = entry["logits"][step].get<std::vector<float>>();
    REQUIRE(ref.size() == run.logits[step].size());
    double error = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = double(ref[i]) - run.logits[step][i];
      worst = std::max(worst, std::abs(d));
      error += d * d;
      norm += double(ref[i]) * ref[i];
    }
    worst_nmse = std::max(worst_nmse, error / norm);
  }
  MESSAGE(what, ": ", run.ids.size(), " greedy ids, largest logit difference ", worst, ", NMSE ", worst_nmse,
          " (logit std ", entry["logit_std"].get<double>(), ")");
  // gpt-oss's MXFP4 experts are held closer: its rounding alone leaves NMSE 6e-5, where YaRN's ramp rounded to whole
  // pairs (as llama.cpp does; its config says not to) would give 9e-4.
  if (entry["dtype"] == "MXFP4") CHECK_MESSAGE(worst_nmse <= 2e-4, what);
  else if (entry["dtype"] == "Q8_0") CHECK_MESSAGE(worst_nmse <= 1e-3, what);
  else CHECK_MESSAGE(worst <= 1e-3, what);
  CHECK(entry["logit_std"].get<double>() >= 1.0);
}

/// A copy of one tiny model's folder to break.
fs::path copy_of(const std::string& name) {
  const fs::path to = tiny_models() / ("broken-" + name);
  fs::remove_all(to);
  fs::copy(tiny_models() / name, to);
  return to;
}

void edit_config(const fs::path& folder, const std::function<void(json&)>& edit) {
  json config;
  std::ifstream(folder / "config.json") >> config;
  edit(config);
  std::ofstream(folder / "config.json") << config.dump();
}

std::string load_error(const fs::path& folder) {
  auto model = gpu::read_hf_config(folder.string());
  if (!model.is_ok()) return model.error().message();
  auto weights = gpu::load_hf_weights(folder.string(), model.value());
  return weights.is_ok() ? "" : weights.error().message();
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("Hugging Face checkpoints of every architecture and dtype give the reference's ids and logits") {
    for (const json& entry : manifest()) check_against_reference(entry, {}, "one pool");
  }

  TEST_CASE("Hugging Face checkpoints spread over pools, prefilled in chunks, give the same ids") {
    test::greedy_options o;
    o.pools = 3;
    o.chunk = 5;
    for (const json& entry : manifest()) check_against_reference(entry, o, "3 pools, chunks of 5");
  }

  TEST_CASE("a Hugging Face config is read whole: end ids of both files, defaults, rope scaling, head width") {
    auto llama = gpu::read_hf_config((tiny_models() / "llama31-bf16").string());
    REQUIRE(llama.is_ok());
    CHECK(llama->eos_ids == std::vector<int32_t>{2, 3, 7});
    CHECK(llama->bos_id == 1);
    CHECK(llama->defaults.temperature == doctest::Approx(0.6));
    CHECK(llama->defaults.top_p == doctest::Approx(0.9));
    CHECK(llama->config.max_seq == 131072);
    CHECK(llama->config.rope_scaling.scaling == gpu::rope_scaling_kind::llama3);
    CHECK(llama->config.rope_scaling.factor == 8.0f);
    CHECK(llama->config.rope_theta == 500000.0f);
    auto qwen3 = gpu::read_hf_config((tiny_models() / "qwen3-bf16").string());
    REQUIRE(qwen3.is_ok());
    CHECK(qwen3->config.head_dim() == 32);
    CHECK(qwen3->config.q_dim() == 128);
    CHECK(qwen3->config.qk_norm);
    const fs::path mistral = copy_of("mistral-bf16");
    edit_config(mistral, [](json& c) { c["sliding_window"] = 512; });
    auto windowed = gpu::read_hf_config(mistral.string());
    REQUIRE(windowed.is_ok());
    CHECK(windowed->config.max_seq == 512);
    REQUIRE(windowed->notes.size() == 1);
    auto oss = gpu::read_hf_config((tiny_models() / "gpt-oss-mxfp4").string());
    REQUIRE(oss.is_ok());
    const gpu::model_config& c = oss->config;
    CHECK(c.sliding_window == 8);
    CHECK(c.attention().slides(0));
    CHECK_FALSE(c.attention().slides(1));
    CHECK(c.rope_scaling.scaling == gpu::rope_scaling_kind::yarn);
    CHECK_FALSE(c.rope_scaling.truncate);
    CHECK(c.rope().magnitude() == doctest::Approx(0.1 * std::log(32.0) + 1.0));
    CHECK((c.attention_sinks && c.o_bias && c.expert_bias && c.qkv_bias && c.norm_topk));
    CHECK(c.activation.limit == 7.0f);
    CHECK(c.n_experts == 8);
    CHECK(c.n_experts_used == 4);
  }

  TEST_CASE("bad Hugging Face folders are refused naming the file and the field") {
    const auto refused = [](const std::string& model, const std::function<void(const fs::path&)>& spoil,
                            const std::vector<std::string>& words) {
      const fs::path folder = copy_of(model);
      spoil(folder);
      const std::string error = load_error(folder);
      MESSAGE(error);
      for (const std::string& w : words) CHECK_MESSAGE(error.find(w) != std::string::npos, "'", w, "' in: ", error);
    };
    refused("llama31-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; }); },
            {"config.json", "architectures", "GPT2LMHeadModel", "not supported"});
    refused("llama31-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["rope_scaling"]["rope_type"] = "longrope"; }); },
            {"config.json", "rope_scaling.rope_type", "longrope"});
    refused("llama31-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["hidden_size"] = 128; }); },
            {"model.safetensors", "model.embed_tokens.weight", "[320, 64]", "[320, 128]"});
    refused("llama31-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["num_hidden_layers"] = 1; }); },
            {"model.layers.1.", "not part of a LlamaForCausalLM"});
    refused("llama31-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["num_hidden_layers"] = 3; }); },
            {"no tensor model.layers.2."});
    refused("llama31-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["num_attention_heads"] = "four"; }); },
            {"config.json", "num_attention_heads", "not a whole number"});
    refused("llama31-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["attention_bias"] = true; }); },
            {"attention_bias"});
    refused("llama31-bf16", [](const fs::path& f) { fs::remove(f / "config.json"); }, {"no such file"});
    refused("qwen2-bf16", [](const fs::path& f) { fs::remove(f / "model-00002-of-00002.safetensors"); },
            {"model-00002-of-00002.safetensors", "cannot open"});
    refused("llama31-bf16", [](const fs::path& f) { fs::resize_file(f / "model.safetensors", 5000); },
            {"model.safetensors", "past the data"});
    refused("mixtral-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["num_local_experts"] = 6; }); },
            {"model.layers.0.block_sparse_moe.gate.weight", "[8, 64]", "[6, 64]"});
    refused("qwen3moe-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["num_experts_per_tok"] = 9; }); },
            {"config.json", "num_experts_per_tok", "not a whole number in [1, 8]"});
    refused("qwen2moe-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["mlp_only_layers"] = {1}; }); },
            {"config.json", "mlp_only_layers", "dense layers"});
    refused("qwen3moe-bf16", [](const fs::path& f) { edit_config(f, [](json& c) { c["num_experts"] = 10; }); },
            {"[8, 64]", "[10, 64]"});
    // gpt-oss: an expert count its router disagrees with, experts not in MXFP4, sliding layers in no pattern, half of
    // an MXFP4 pair missing (renamed in the shard and its index alike).
    refused("gpt-oss-mxfp4", [](const fs::path& f) { edit_config(f, [](json& c) { c["num_local_experts"] = 6; }); },
            {"model.layers.0.mlp.router.weight", "[8, 64]", "[6, 64]"});
    refused("gpt-oss-mxfp4", [](const fs::path& f) { edit_config(f, [](json& c) { c.erase("quantization_config"); }); },
            {"config.json", "quantization_config", "MXFP4"});
    refused("gpt-oss-mxfp4",
            [](const fs::path& f) {
              edit_config(f, [](json& c) { c["layer_types"] = {"full_attention", "sliding_attention"}; });
            },
            {"config.json", "layer_types", "pattern"});
    refused("gpt-oss-mxfp4",
            [](const fs::path& f) {
              for (const char* file : {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                       "model-00002-of-00002.safetensors"}) {
                std::ifstream in(f / file, std::ios::binary);
                std::string bytes((std::istreambuf_iterator<char>(in)), {});
                in.close();
                for (size_t at = bytes.find("layers.1.mlp.experts.down_proj_scales"); at != std::string::npos;
                     at = bytes.find("layers.1.mlp.experts.down_proj_scales", at))
                  bytes[at + 36] = 'z';
                std::ofstream(f / file, std::ios::binary) << bytes;
              }
            },
            {"model.layers.1.mlp.experts.down_proj_blocks", "MXFP4 pair"});
  }

  TEST_CASE("bad GGUF files are refused naming the file and what is wrong") {
    std::string source = "qwen3-q8_0-gguf.gguf";
    const auto gguf_error = [&](const std::function<void(std::string&)>& spoil) {
      std::ifstream in(tiny_models() / source, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), {});
      spoil(bytes);
      const fs::path path = tiny_models() / "broken.gguf";
      std::ofstream(path, std::ios::binary) << bytes;
      auto file = gpu::gguf_file::open(path.string());
      if (!file.is_ok()) return file.error().message();
      auto model = gpu::read_gguf_model(file.value());
      if (!model.is_ok()) return model.error().message();
      auto weights = gpu::load_gguf_weights(file.value(), model.value());
      return weights.is_ok() ? std::string() : weights.error().message();
    };
    const auto refused = [&](const std::function<void(std::string&)>& spoil, const std::vector<std::string>& words) {
      const std::string error = gguf_error(spoil);
      MESSAGE(error);
      for (const std::string& w : words) CHECK_MESSAGE(error.find(w) != std::string::npos, "'", w, "' in: ", error);
    };
    const auto replace = [](std::string& s, const std::string& from, const std::string& to) {
      const size_t at = s.find(from);
      REQUIRE(at != std::string::npos);
      s.replace(at, from.size(), to);
    };
    CHECK(gguf_error([](std::string&) {}).empty());
    refused([](std::string& s) { s.resize(s.size() - 100); }, {"broken.gguf", "past the data"});
    refused([](std::string& s) { s.resize(200); }, {"broken.gguf", "past the end of the file"});
    refused([](std::string& s) { s[0] = 'X'; }, {"not a GGUF file"});
    refused([](std::string& s) { s[8] = char(0xff); s[12] = char(0x7f); }, {"tensors and"});  // a count of 2^63-odd
    refused([&](std::string& s) { replace(s, "qwen3", "gpt-j"); }, {"general.architecture", "gpt-j"});
    refused([&](std::string& s) { replace(s, "blk.1.ffn_up.weight", "blk.1.ffn_XX.weight"); },
            {"no tensor blk.1.ffn_up.weight"});
    // A mixture of experts: an expert count the tensors disagree with (the router's shape says so first), a count of
    // experts used above it, a stack of experts missing.
    source = "qwen3moe-bf16-gguf.gguf";
    CHECK(gguf_error([](std::string&) {}).empty());
    const auto set_count = [](std::string& s, const std::string& key, char value) {
      const size_t at = s.find(key);
      REQUIRE(at != std::string::npos);
      s[at + key.size() + 4] = value;  // after the key: the value's type (uint32), then the value
    };
    refused([&](std::string& s) { set_count(s, "qwen3moe.expert_count", 6); },
            {"blk.0.ffn_gate_inp.weight", "[8, 64]", "[6, 64]"});
    refused([&](std::string& s) { set_count(s, "qwen3moe.expert_used_count", 9); },
            {"qwen3moe.expert_used_count", "9 is not a whole number in [1, 8]"});
    refused([&](std::string& s) { replace(s, "blk.1.ffn_down_exps.weight", "blk.1.ffn_down_expX.weight"); },
            {"no tensor blk.1.ffn_down_exps.weight"});
    // gpt-oss: an expert count its router disagrees with, experts of a type the reader does not know (IQ4_NL), no
    // sliding window.
    source = "gpt-oss-mxfp4-gguf.gguf";
    CHECK(gguf_error([](std::string&) {}).empty());
    refused([&](std::string& s) { set_count(s, "gpt-oss.expert_count", 6); },
            {"blk.0.ffn_gate_inp.weight", "[8, 64]", "[6, 64]"});
    refused([&](std::string& s) {
              const std::string name = "blk.0.ffn_down_exps.weight";
              const size_t at = s.find(name);
              REQUIRE(at != std::string::npos);
              s[at + name.size() + 4 + 3 * 8] = 20;  // after the name: 3 dimensions, then the type (MXFP4 is 39)
            },
            {"blk.0.ffn_down_exps.weight", "20"});
    refused([&](std::string& s) { replace(s, "gpt-oss.attention.sliding_window", "gpt-oss.attention.sliding_windoX"); },
            {"gpt-oss.attention.sliding_window", "missing"});
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("stories15M as a Hugging Face folder and as a GGUF file gives the ids of its llama2.c file") {
    const auto& original = test::real_model();
    const fs::path out = tiny_models() / "stories15M";
    const fs::path files = fs::path(gpu::models_dir()) / "stories15M";
    const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const std::string command = python + " " ILLM_SOURCE_DIR "/tests/models/convert_llama2c.py " +
                                (files / "stories15M.bin").string() + " " + (files / "tokenizer.bin").string() + " " +
                                out.string();
    REQUIRE(std::system(command.c_str()) == 0);
    const std::string text = "Once upon a time, there was a little girl named Lily. She loved to play outside!";
    const auto expected_prompt = original.vocab->encode(text, true);
    const auto expected = test::run_greedy(original.weights, expected_prompt, 24, {});
    for (const fs::path& path : {out / "hf", out / "model.gguf"}) {
      auto converted = gpu::load_model(path.string());
      REQUIRE_MESSAGE(converted.is_ok(), converted.error().message());
      const auto prompt = converted->vocab->encode(text, true);
      CHECK_MESSAGE(prompt == expected_prompt, path, ": ", gpu::text::join(prompt, " "), " vs ",
                    gpu::text::join(expected_prompt, " "));
      const auto run = test::run_greedy(converted->weights, expected_prompt, 24, {});
      CHECK_MESSAGE(run.ids == expected.ids, path);
      CHECK_MESSAGE(converted->vocab->decode(run.ids, expected_prompt.back()) ==
                        original.vocab->decode(expected.ids, expected_prompt.back()),
                    path, ": ", converted->vocab->decode(run.ids, expected_prompt.back()), " vs ",
                    original.vocab->decode(expected.ids, expected_prompt.back()));
      MESSAGE(path.filename(), ": prompt ", expected_prompt.size(), " ids and 24 greedy ids as the llama2.c file's");
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("GGUF files give llama.cpp's greedy ids and log-probabilities (an outside oracle)") {
    // tests/data/llama_cpp_tiny.json: llama.cpp's llama-server on the same tiny GGUF files (llama_cpp_oracle.py).
    std::ifstream in(std::string(ILLM_TEST_DATA_DIR) + "/llama_cpp_tiny.json");
    REQUIRE(in.good());
    const json oracle = json::parse(in);
    REQUIRE(oracle.size() >= 5);
    for (const auto& [name, expected] : oracle.items()) {
      const auto weights = load(tiny_models() / (name + ".gguf"));
      const auto prompt = expected["prompt"].get<std::vector<int32_t>>();
      const auto ids = expected["ids"].get<std::vector<int32_t>>();
      // The engine goes on with llama.cpp's ids, so that each step's choice is compared in llama.cpp's context.
      test::greedy_options o;
      o.keep_logits = true;
      o.forced = ids;
      const auto run = test::run_greedy(weights, prompt, int(ids.size()), o);
      // llama.cpp rounds the activations of 16-bit products to 16 bits, and so do both engines those of Q8_0 ones
      // to 8 bits per block of 32, in their own orders of summation: log-probabilities move by up to a few hundredths
      // (bf16) and a tenth (q8_0). A step is decided when llama.cpp's top two lie further apart than that: there
      // the engine must choose llama.cpp's token.
      // gpt-oss's file rounds in every way above at once (bf16 attention and router, 8-bit activations of the MXFP4
      // experts, sinks and sliding layers on top): its log-probabilities move by up to 0.23 (0.04 on average, as
      // the q8_0 files'), whether the engine rounds YaRN's ramp ends to whole pairs as llama.cpp does or not as
      // gpt-oss's config says; decided steps as q8_0's, the tolerance 0.3.
      const bool q8 = name.find("q8_0") != std::string::npos, half = name.find("bf16") != std::string::npos;
      const bool oss = name.find("gpt-oss") != std::string::npos;
      const double margin = q8 || oss ? 0.2 : half ? 0.08 : 0.02, tolerance = oss ? 0.3 : margin;
      size_t decided = 0, agreed = 0;
      double worst = 0, sum = 0;
      size_t n = 0;
      for (size_t step = 0; step < ids.size(); ++step) {
        const json& top = expected["top_logprobs"][step];
        if (top[0][1].get<double>() - top[1][1].get<double>() >= margin) {
          ++decided;
          agreed += run.ids[step] == ids[step];
        }
        const auto& logits = run.logits[step];
        const double best = *std::max_element(logits.begin(), logits.end());
        double total = 0;
        for (float l : logits) total += std::exp(double(l) - best);
        for (const json& t : top) {  // the log-probabilities of llama.cpp's top tokens, in the same context
          const double diff = std::abs(double(logits[size_t(t[0].get<int>())]) - best - std::log(total) - t[1].get<double>());
          worst = std::max(worst, diff);
          sum += diff;
          ++n;
        }
      }
      MESSAGE(name, ": ", agreed, " of ", decided, " steps decided by a margin of ", margin,
              " choose llama.cpp's token; top log-probabilities differ by ", sum / double(n), " on average, ", worst,
              " at most");
      CHECK_MESSAGE(decided >= 14, name, ": too few decided steps to check (", decided, ")");
      CHECK_MESSAGE(agreed == decided, name);
      CHECK_MESSAGE(worst <= tolerance, name);
    }
  }
}
