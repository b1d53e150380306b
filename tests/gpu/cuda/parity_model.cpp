// The whole model on the cuda backend against the cpu backend: the same greedy tokens and close logits
// for a synthetic llama shape with GQA (one pool and several, whole and chunked prefill, continuous
// batching) and for stories15M where its files are; 16-bit KV and weights stay close to fp32.
#include <algorithm>
#include <memory>
#include <tuple>

#include "gpu/batcher.hpp"
#include "gpu/engine.hpp"
#include "gpu/generate.hpp"
#include "gpu/model_files.hpp"
#include "gpu/pool_router.hpp"
#include "gpu/sampler.hpp"
#include "tests/gpu/cuda/runner.hpp"

using namespace illm;
using gpu::dtype;
using test::nmse;

namespace {

/// Generated ids and the logits of every step.
struct greedy_run {
  std::vector<int32_t> ids;
  std::vector<std::vector<float>> logits;
};

/// How a greedy run is set up.
struct run_options {
  int pools = 1;    ///< KV pools the blocks are spread over (the others answer through a pool_router)
  int chunk = 512;  ///< prefill tokens per step
  dtype kv_type = dtype::f32;
  dtype weight_type = dtype::f32;
  int overlap_min_tokens = 512;  ///< steps this long with remote blocks run as two lanes
};

/// Runs `prompt` greedily for n_new tokens (no stop at EOS), step by step on `dev`.
greedy_run run_greedy(gpu::backend& dev, std::shared_ptr<const gpu::model_weights> weights,
                      const std::vector<int32_t>& prompt, int n_new, const run_options& o) {
  const gpu::model_config& c = weights->config();
  if (o.weight_type != dtype::f32) {
    auto converted = gpu::convert_weights(*weights, o.weight_type);
    ILLM_REQUIRE(converted.is_ok(), "{}", converted.error().message());
    weights = std::make_shared<const gpu::model_weights>(std::move(converted).value());
  }
  auto made = gpu::engine::create(weights, dev, {o.chunk, 1, o.kv_type, o.overlap_min_tokens});
  ILLM_REQUIRE(made.is_ok(), "engine on {}: {}", dev.name(), made.error().message());
  gpu::engine& eng = *made.value();
  const uint32_t blocks = gpu::blocks_for_tokens(int64_t(prompt.size()) + n_new);
  std::vector<gpu::kv_pool> pools;
  gpu::kv_pools view;
  for (int p = 0; p < o.pools; ++p) {
    auto pool = gpu::kv_pool::create(dev, eng.pool_layout(), blocks);
    ILLM_REQUIRE(pool.is_ok(), "{}", pool.error().message());
    pools.push_back(std::move(pool).value());
  }
  for (auto& p : pools) view.by_id.push_back(&p);
  gpu::spread_block_source source(view.by_id, 7);
  gpu::pool_router router(dev, view, c.attention());
  gpu::sequence seq;
  seq.id = 1;
  seq.tokens = prompt;
  greedy_run out;
  std::vector<float> logits(size_t(c.vocab_size));
  while (int(out.ids.size()) < n_new) {
    const int pending = int(seq.tokens.size()) - seq.n_cached, n = std::min(pending, o.chunk);
    while (seq.table.size() < gpu::blocks_for_tokens(seq.n_cached + n)) {
      auto ref = source.allocate(seq, uint32_t(seq.table.size()));
      ILLM_REQUIRE(ref.is_ok(), "{}", ref.error().message());
      seq.table.push_back(ref.value());
    }
    const bool last = n == pending;
    const gpu::batch_entry entry{seq.id, seq.tokens.data() + seq.n_cached, n, seq.n_cached, &seq.table, last};
    ILLM_REQUIRE_OK(eng.step({&entry, 1}, view, &router));
    seq.n_cached += n;
    if (!last) continue;
    ILLM_REQUIRE_OK(eng.copy_logits(0, logits.data()));
    out.ids.push_back(gpu::argmax(logits.data(), c.vocab_size));
    out.logits.push_back(logits);
    seq.tokens.push_back(out.ids.back());
  }
  for (const auto& ref : seq.table) ILLM_REQUIRE_OK(pools[ref.pool].release(ref.block));
  return out;
}

std::shared_ptr<const gpu::model_weights> synthetic_gqa() {
  static auto w = std::make_shared<const gpu::model_weights>(
      gpu::synthetic_weights(gpu::preset_config("tiny-gqa").value(), 5).value());
  return w;
}

/// tiny-gqa with every variant of the family: heads wider than dim / n_heads, q/k/v biases, query and key
/// head norms, Llama 3.1's RoPE scaling.
std::shared_ptr<const gpu::model_weights> synthetic_variants() {
  static auto w = [] {
    gpu::model_config c = gpu::preset_config("tiny-gqa").value();
    c.head_size = 24;
    c.qkv_bias = true;
    c.qk_norm = true;
    c.rope_scaling = {0.0f, gpu::rope_scaling_kind::llama3, 8.0f, 1.0f, 4.0f, 64};
    return std::make_shared<const gpu::model_weights>(gpu::synthetic_weights(c, 6).value());
  }();
  return w;
}

/// tiny-gqa as a mixture of experts: 6 experts of width 64 in each layer, 2 a token, and a shared expert of 96.
std::shared_ptr<const gpu::model_weights> synthetic_experts() {
  static auto w = [] {
    gpu::model_config c = gpu::preset_config("tiny-gqa").value();
    c.hidden_dim = 64;
    c.n_experts = 6;
    c.n_experts_used = 2;
    c.shared_hidden_dim = 96;
    return std::make_shared<const gpu::model_weights>(gpu::synthetic_weights(c, 8).value());
  }();
  return w;
}

/// tiny-gqa as gpt-oss: experts with biases behind a router with one, every other layer sliding over 8 positions,
/// sink logits, YaRN, biases on q, k, v and the output, the clamped gate.
std::shared_ptr<const gpu::model_weights> synthetic_gpt_oss() {
  static auto w = [] {
    gpu::model_config c = gpu::preset_config("tiny-gqa").value();
    c.hidden_dim = 64;
    c.n_experts = 6;
    c.n_experts_used = 2;
    c.qkv_bias = c.o_bias = c.expert_bias = c.attention_sinks = true;
    c.sliding_window = 8;
    c.sliding_period = 2;
    c.activation = {1.702f, 7.0f, 1.0f};
    c.rope_scaling.scaling = gpu::rope_scaling_kind::yarn;
    c.rope_scaling.factor = 32.0f;
    c.rope_scaling.original_positions = 64;
    c.rope_scaling.truncate = false;
    return std::make_shared<const gpu::model_weights>(gpu::synthetic_weights(c, 9).value());
  }();
  return w;
}

const std::vector<int32_t> gqa_prompt = {1,  17, 300, 42, 999, 5,  77, 123, 456, 789, 11, 12, 13, 14, 15, 16, 17, 18,
                                         19, 20, 21,  22, 23,  24, 25, 26,  27,  28,  29, 30, 31, 32, 33, 34, 35};

/// Greedy ids equal, and every step's logits within `tolerance` (NMSE) of the cpu's.
void check_same_run(const greedy_run& got, const greedy_run& ref, double tolerance, const std::string& what) {
  ILLM_CHECK(got.ids == ref.ids, "{}: ids {} vs the cpu's {}", what, gpu::text::join(got.ids, " "),
             gpu::text::join(ref.ids, " "));
  double worst = 0;
  for (size_t i = 0; i < std::min(got.logits.size(), ref.logits.size()); ++i)
    worst = std::max(worst, nmse(got.logits[i], ref.logits[i]));
  ILLM_CHECK(worst <= tolerance, "{}: logits nmse up to {}", what, worst);
}

ILLM_CASE("model", "a synthetic GQA model gives the cpu's greedy ids over pools and chunks") {
  const auto ref = run_greedy(test::fast_cpu(), synthetic_gqa(), gqa_prompt, 40, {});
  for (auto [pools, chunk, overlap] : {std::tuple{1, 512, 512}, std::tuple{3, 9, 512}, std::tuple{2, 1, 512},
                                       std::tuple{3, 9, 2}}) {
    run_options o;
    o.pools = pools;
    o.chunk = chunk;
    o.overlap_min_tokens = overlap;  // 2: every chunk of two tokens or more runs as two lanes
    check_same_run(run_greedy(test::device(), synthetic_gqa(), gqa_prompt, 40, o), ref, 1e-8,
                   gpu::text::format("{} pools, chunks of {}, two lanes from {} tokens", pools, chunk, overlap));
  }
}

/// The device's greedy ids of `weights` those of the cpu, and its logits within 1e-8 (NMSE), over one pool and
/// three, prefilled whole and in chunks of 7.
void check_over_pools(const std::shared_ptr<const gpu::model_weights>& weights) {
  const auto ref = run_greedy(test::fast_cpu(), weights, gqa_prompt, 24, {});
  for (auto [pools, chunk] : {std::pair{1, 512}, std::pair{3, 7}}) {
    run_options o;
    o.pools = pools;
    o.chunk = chunk;
    check_same_run(run_greedy(test::device(), weights, gqa_prompt, 24, o), ref, 1e-8,
                   gpu::text::format("{} pools, chunks of {}", pools, chunk));
  }
}

ILLM_CASE("model", "wide heads, biases, head norms and scaled RoPE give the cpu's greedy ids over pools") {
  check_over_pools(synthetic_variants());
}

ILLM_CASE("model", "a mixture of experts gives the cpu's greedy ids over pools and chunks") {
  check_over_pools(synthetic_experts());
}

ILLM_CASE("model", "gpt-oss's layers (sliding windows, sinks, YaRN, biases, the clamped gate) give the cpu's ids over pools") {
  check_over_pools(synthetic_gpt_oss());
}

ILLM_CASE("model", "16-bit KV and weights stay close to the fp32 model") {
  const auto ref = run_greedy(test::fast_cpu(), synthetic_gqa(), gqa_prompt, 16, {});
  struct variant {
    dtype kv, weights;
    double tolerance;  // NMSE of the prefill's logits
  };
  for (const variant& v : {variant{dtype::f16, dtype::f32, 1e-5}, variant{dtype::f16, dtype::f16, 1e-4},
                           variant{dtype::bf16, dtype::bf16, 1e-3}}) {
    run_options o;
    o.kv_type = v.kv;
    o.weight_type = v.weights;
    const auto got = run_greedy(test::device(), synthetic_gqa(), gqa_prompt, 16, o);
    const double first = nmse(got.logits[0], ref.logits[0]);
    size_t agree = 0;
    while (agree < got.ids.size() && got.ids[agree] == ref.ids[agree]) ++agree;
    std::printf("    %s KV, %s weights: prefill logits nmse %.3g, first %zu of %zu ids as fp32\n",
                gpu::to_string(v.kv), gpu::to_string(v.weights), first, agree, got.ids.size());
    ILLM_CHECK(first <= v.tolerance, "{} KV, {} weights: prefill logits nmse {}", gpu::to_string(v.kv),
               gpu::to_string(v.weights), first);
  }
}

ILLM_CASE("model", "continuous batching on the device gives each sequence its ids alone") {
  auto eng = gpu::engine::create(synthetic_gqa(), test::device(), {64, 8}).value();
  auto pool = gpu::kv_pool::create(test::device(), eng->pool_layout(), 64).value();
  gpu::kv_pools view{{&pool}, 0};
  gpu::spread_block_source source({&pool}, 1);
  gpu::batcher runner(*eng, source, {64, 8, {}});
  std::vector<std::shared_ptr<gpu::sequence>> seqs;
  for (int i = 0; i < 4; ++i) {
    auto s = std::make_shared<gpu::sequence>();
    s->id = uint64_t(i) + 1;
    s->tokens.assign(gqa_prompt.begin() + i * 5, gqa_prompt.end() - i * 3);
    s->n_prompt = int(s->tokens.size());
    s->max_new_tokens = 12;
    s->ignore_eos = true;
    seqs.push_back(s);
  }
  size_t added = 0;
  for (int step = 0; !runner.idle() || added < seqs.size(); ++step) {
    while (added < seqs.size() && added < 2 + size_t(step / 2)) runner.add(seqs[added++]);
    ILLM_REQUIRE_OK(runner.step(view, nullptr));
  }
  for (const auto& s : seqs) {
    const std::vector<int32_t> prompt(s->tokens.begin(), s->tokens.begin() + s->n_prompt);
    const std::vector<int32_t> got(s->tokens.begin() + s->n_prompt, s->tokens.end());
    const auto alone = run_greedy(test::fast_cpu(), synthetic_gqa(), prompt, 12, {});
    ILLM_CHECK(got == alone.ids, "sequence {}: {} vs {}", s->id, gpu::text::join(got, " "),
               gpu::text::join(alone.ids, " "));
  }
  ILLM_CHECK(pool.used_blocks() == 0, "{} blocks left in use", pool.used_blocks());
}

ILLM_CASE("model", "stories15M gives the cpu's greedy ids") {
  const auto model = gpu::load_model("stories15M");
  if (!model.is_ok()) test::skip("stories15M not found (deploy/fetch-model.sh fetches it): " + model.error().message());
  const auto prompt = model->vocab->encode("Once upon a time", true);
  const int n_new = test::emulated() ? 12 : 48;
  const auto ref = run_greedy(test::fast_cpu(), model->weights, prompt, n_new, {});
  check_same_run(run_greedy(test::device(), model->weights, prompt, n_new, {}), ref, 1e-8, "stories15M, one pool");
  run_options o;
  o.pools = 3;
  o.chunk = 2;
  check_same_run(run_greedy(test::device(), model->weights, prompt, n_new, o), ref, 1e-8,
                 "stories15M, three pools, chunks of 2");
}

}  // namespace
