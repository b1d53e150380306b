// illm perplexity: the logits of every token of a chunk are those of steps that end at each token, a batcher's prompt
// log probabilities (an echo's) are one pass's, and stories15M's perplexity on tests/data/simple_stories.txt is
// llama-perplexity's on the same model converted to GGUF, F32 and quantized by llama-quantize to Q8_0, Q6_K, Q5_0 and
// Q4_K_M (tests/data/llama_cpp_perplexity.json, written by deploy/perplexity-vs-llama.sh; the quantized files made
// again from tests/data/stories15M_quantized.json, tensor for tensor llama-quantize's).
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpu/backend_registry.hpp"
#include "gpu/engine.hpp"
#include "gpu/generate.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/batcher.hpp"
#include "gpu/perplexity.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

std::string stories() {
  std::ifstream in(std::string(ILLM_TEST_DATA_DIR) + "/simple_stories.txt");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The logits of every token of `ids`, from one step of `eng` over them (its every-token rows) into blocks of `pool`,
/// which are released after.
std::vector<std::vector<float>> one_pass_logits(gpu::engine& eng, gpu::kv_pool& pool, const std::vector<int32_t>& ids,
                                                int vocab) {
  gpu::block_table table;
  for (uint32_t b = 0; b < gpu::blocks_for_tokens(int64_t(ids.size())); ++b)
    table.push_back({0, pool.allocate({1, 0}).value()});
  gpu::batch_entry entry{1, ids.data(), int(ids.size()), 0, &table, false};
  entry.every_token = true;
  gpu::kv_pools view{{&pool}, 0};
  REQUIRE(eng.step({&entry, 1}, view, nullptr).is_ok());
  std::vector<std::vector<float>> rows(ids.size(), std::vector<float>(size_t(vocab)));
  for (size_t j = 0; j < ids.size(); ++j) REQUIRE(eng.copy_logits(int(j), rows[j].data()).is_ok());
  for (const auto& ref : table) REQUIRE(pool.release(ref.block).is_ok());
  return rows;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a chunk's every-token logits are the logits of the steps that end at each of its tokens") {
    const auto& model = test::real_model();
    const std::vector<int32_t> chunk = model.vocab->encode("Once upon a time, there was a little dog named Max.", true);
    gpu::engine_options eo{64, 1};
    eo.max_scored_tokens = 64;
    auto eng = gpu::engine::create(model.weights, test::cpu_device(), eo).value();
    auto pool = gpu::kv_pool::create(test::cpu_device(), eng->pool_layout(), 8).value();
    const auto every = one_pass_logits(*eng, pool, chunk, model.weights->config().vocab_size);
    for (size_t j : {size_t(0), size_t(5), chunk.size() - 1}) {
      test::greedy_options o;
      o.keep_logits = true;
      const auto step = test::run_greedy(model.weights, std::vector<int32_t>(chunk.begin(), chunk.begin() + long(j) + 1), 1, o);
      double worst = 0;
      for (size_t i = 0; i < every[j].size(); ++i) worst = std::max(worst, double(std::abs(every[j][i] - step.logits[0][i])));
      CHECK_MESSAGE(worst <= 1e-4, "token ", j, ": ", worst);
    }
    // Without rows for scores the engine refuses the entry.
    gpu::block_table table{{0, pool.allocate({1, 0}).value()}};
    gpu::batch_entry entry{1, chunk.data(), 4, 0, &table, false};
    entry.every_token = true;
    gpu::kv_pools view{{&pool}, 0};
    auto plain = gpu::engine::create(model.weights, test::cpu_device(), {64, 1}).value();
    CHECK_FALSE(plain->step({&entry, 1}, view, nullptr).is_ok());
    REQUIRE(pool.release(table[0].block).is_ok());
  }

  TEST_CASE("a batcher's prompt log probabilities, chunk by chunk beside another sequence, are one pass's") {
    const auto& model = test::real_model();
    const int vocab = model.weights->config().vocab_size;
    const auto prompt = test::golden()["cases"].back()["prompt_token_ids"].get<std::vector<int32_t>>();
    // The reference: every token's logits from one pass over the whole prompt.
    gpu::engine_options whole{1024, 1};
    whole.max_scored_tokens = 1024;
    auto one = gpu::engine::create(model.weights, test::cpu_device(), whole).value();
    auto pool = gpu::kv_pool::create(test::cpu_device(), one->pool_layout(), 64).value();
    const auto rows = one_pass_logits(*one, pool, prompt, vocab);
    std::vector<double> reference(prompt.size());
    std::vector<double> logprobs;
    for (size_t p = 1; p < prompt.size(); ++p) {
      gpu::log_softmax(rows[p - 1].data(), vocab, logprobs);
      reference[p] = logprobs[size_t(prompt[p])];
    }
    gpu::kv_pools view{{&pool}, 0};
    // A batcher of 64-token steps that score at most 20 prompt tokens each, a plain sequence beside it.
    gpu::engine_options small{64, 4};
    small.max_scored_tokens = 20;
    auto eng = gpu::engine::create(model.weights, test::cpu_device(), small).value();
    gpu::spread_block_source source({&pool}, 1);
    gpu::batcher runner(*eng, source, {64, 4});
    std::vector<std::shared_ptr<gpu::sequence>> seqs;
    for (int i = 0; i < 2; ++i) {
      auto s = std::make_shared<gpu::sequence>();
      s->id = uint64_t(i + 1);
      s->tokens = prompt;
      s->n_prompt = int(prompt.size());
      s->max_new_tokens = 2;
      s->ignore_eos = true;
      s->prompt_logprobs = i == 0 ? 2 : -1;
      runner.add(s);
      seqs.push_back(s);
    }
    while (!runner.idle()) REQUIRE(runner.step(view, nullptr).is_ok());
    const gpu::sequence& scored = *seqs[0];
    REQUIRE(scored.prompt_scores.size() == prompt.size());
    double worst = 0;
    for (size_t p = 1; p < prompt.size(); ++p) {
      worst = std::max(worst, std::abs(scored.prompt_scores[p].logprob - reference[p]));
      REQUIRE(scored.prompt_scores[p].top_ids.size() == 2);
      CHECK(scored.prompt_scores[p].top_logprobs[0] >= scored.prompt_scores[p].logprob - 1e-6);
    }
    MESSAGE("prompt log probabilities of ", prompt.size() - 1, " tokens against one pass: worst difference ", worst);
    CHECK(worst <= 1e-4);
    CHECK(seqs[1]->prompt_scores.empty());
    CHECK(std::vector<int32_t>(scored.tokens.begin() + scored.n_prompt, scored.tokens.end()) ==
          std::vector<int32_t>(seqs[1]->tokens.begin() + seqs[1]->n_prompt, seqs[1]->tokens.end()));
    CHECK(pool.used_blocks() == 0);
  }

  TEST_CASE("stories15M's perplexity on the stories is llama-perplexity's") {
    std::ifstream in(std::string(ILLM_TEST_DATA_DIR) + "/llama_cpp_perplexity.json");
    REQUIRE(in.good());
    const auto reference = nlohmann::json::parse(in);
    const auto& f32 = reference["files"]["F32"];
    gpu::perplexity_options o;
    o.n_ctx = reference["n_ctx"].get<int>();
    auto measured = gpu::perplexity(test::real_model(), test::cpu_device(), stories(), o);
    REQUIRE(measured.is_ok());
    MESSAGE("perplexity ", measured->perplexity, " over ", measured->chunks, " chunks; llama-perplexity ",
            f32["llama_perplexity"].get<double>());
    CHECK(measured->chunks == f32["chunks"].get<int>());
    CHECK(std::abs(measured->perplexity / f32["llama_perplexity"].get<double>() - 1) <= 1e-3);
    o.n_ctx = 100000;
    CHECK_FALSE(gpu::perplexity(test::real_model(), test::cpu_device(), stories(), o).is_ok());
  }

  TEST_CASE("stories15M quantized by llama-quantize: each file's perplexity is llama-perplexity's") {
    namespace fs = std::filesystem;
    std::ifstream in(std::string(ILLM_TEST_DATA_DIR) + "/llama_cpp_perplexity.json");
    REQUIRE(in.good());
    const auto reference = nlohmann::json::parse(in);
    char pattern[] = "/tmp/illm-quantized-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    const fs::path dir = pattern, files = fs::path(gpu::models_dir()) / "stories15M";
    const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const std::string data = ILLM_TEST_DATA_DIR;
    const std::string command = python + " " ILLM_SOURCE_DIR "/tests/models/quantized_stories.py rebuild " +
                                (files / "stories15M.bin").string() + " " + (files / "tokenizer.bin").string() + " " +
                                data + "/stories15M_quantized.json " + data + "/stories15M_kquants.bin " + dir.string() +
                                " > /dev/null";
    INFO("quantized_stories.py needs Debian's python3-numpy (deploy/install-deps.sh installs it)");
    REQUIRE(std::system(command.c_str()) == 0);
    gpu::perplexity_options o;
    o.n_ctx = reference["n_ctx"].get<int>();
    size_t checked = 0;
    for (const auto& [name, figures] : reference["files"].items()) {
      if (name == "F32") continue;
      auto model = gpu::load_model((dir / (name + ".gguf")).string());
      REQUIRE_MESSAGE(model.is_ok(), model.error().message());
      auto measured = gpu::perplexity(model.value(), test::cpu_device(), stories(), o);
      REQUIRE(measured.is_ok());
      const double theirs = figures["llama_perplexity"].get<double>(), ratio = measured->perplexity / theirs - 1;
      // Each engine rounds the activations of a quantized product to 8 bits: a difference of an ulp upstream moves a
      // level, so their figures part by a tenth of a percent or more on these 1280 tokens (docs/models.md).
      const double tolerance = figures["tolerance"].get<double>();
      MESSAGE(name, ": perplexity ", measured->perplexity, ", llama-perplexity ", theirs, " (", 100 * ratio,
              "%, within ", 100 * tolerance, "%)");
      CHECK(std::abs(ratio) <= tolerance);
      ++checked;
    }
    CHECK(checked == 4);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}
