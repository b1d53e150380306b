#include "tests/gpu/support.hpp"

#include <fstream>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/generate.hpp"
#include "gpu/pool_router.hpp"
#include "gpu/sampler.hpp"

namespace illm::test {

const gpu::loaded_model& real_model() {
  static const auto loaded = gpu::load_model("stories15M");
  if (!loaded.is_ok()) FAIL("stories15M is needed: run deploy/fetch-model.sh (", loaded.error().message(), ")");
  return loaded.value();
}

const nlohmann::json& golden() {
  static const nlohmann::json data = [] {
    std::ifstream in(std::string(ILLM_TEST_DATA_DIR) + "/golden/stories15M-greedy.json");
    return nlohmann::json::parse(in);
  }();
  return data;
}

std::filesystem::path hf_tokenizers_dir() { return std::filesystem::path(gpu::models_dir()) / "hf-tokenizers"; }

gpu::backend& cpu_device() {
  static gpu::cpu::cpu_backend device(2);
  return device;
}

greedy_run run_greedy(std::shared_ptr<const gpu::model_weights> weights, const std::vector<int32_t>& prompt,
                      int n_new, const greedy_options& options) {
  gpu::backend& device = options.device ? *options.device : cpu_device();
  const gpu::model_config& c = weights->config();
  gpu::engine_options engine_options{options.chunk, 1, options.kv_type};
  engine_options.overlap_min_tokens = options.overlap_min_tokens;
  auto made = options.placed ? gpu::engine::create(options.placed, device, engine_options)
                             : gpu::engine::create(weights, device, engine_options);
  REQUIRE(made.is_ok());
  gpu::engine& eng = *made.value();
  const uint32_t blocks = gpu::blocks_for_tokens(int64_t(prompt.size()) + n_new);
  std::vector<gpu::kv_pool> pools;
  gpu::kv_pools view;
  for (int p = 0; p < options.pools; ++p) pools.push_back(std::move(gpu::kv_pool::create(device, eng.pool_layout(), blocks).value()));
  for (auto& p : pools) view.by_id.push_back(&p);
  gpu::spread_block_source source(view.by_id, options.seed);
  gpu::pool_router inner(device, view, c.attention());
  std::unique_ptr<gpu::attention_router> decorated = options.decorate ? options.decorate(inner) : nullptr;
  gpu::attention_router* router = decorated ? decorated.get() : &inner;

  gpu::sequence seq;
  seq.id = 1;
  seq.tokens = prompt;
  greedy_run out;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  while (int(out.ids.size()) < n_new) {
    const int pending = int(seq.tokens.size()) - seq.n_cached;
    const int n = std::min(pending, options.chunk);
    while (seq.table.size() < gpu::blocks_for_tokens(seq.n_cached + n))
      seq.table.push_back(source.allocate(seq, uint32_t(seq.table.size())).value());
    const bool last = n == pending;
    const gpu::batch_entry entry{seq.id, seq.tokens.data() + seq.n_cached, n, seq.n_cached, &seq.table, last};
    const gpu::status s = eng.step({&entry, 1}, view, router);
    REQUIRE_MESSAGE(s.is_ok(), s.message());
    seq.n_cached += n;
    if (!last) continue;
    REQUIRE(eng.copy_logits(0, logits.data()).is_ok());
    const int32_t next = gpu::argmax(logits.data(), c.vocab_size);
    out.ids.push_back(next);
    if (options.keep_logits) out.logits.push_back(logits);
    const size_t step = out.ids.size() - 1;
    seq.tokens.push_back(step < options.forced.size() ? options.forced[step] : next);
  }
  for (const auto& ref : seq.table) REQUIRE(pools[ref.pool].release(ref.block).is_ok());
  for (auto& p : pools) {
    REQUIRE(p.check().is_ok());
    REQUIRE(p.used_blocks() == 0);
  }
  return out;
}

}  // namespace illm::test
