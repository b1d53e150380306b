#include "gpu/generate.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "gpu/pool_router.hpp"
#include "gpu/sampler.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

spread_block_source::spread_block_source(std::vector<kv_pool*> pools, uint64_t seed)
    : pools_(std::move(pools)), seed_(seed), peak_used_(pools_.size(), 0) {}

uint32_t spread_block_source::preferred_pool(uint64_t seq_id, uint32_t index) const {
  const uint32_t k = uint32_t(pools_.size());
  std::vector<uint32_t> order(k);
  std::iota(order.begin(), order.end(), 0u);
  uint64_t rng = seed_ ^ (seq_id * 0x9e3779b97f4a7c15ull) ^ (uint64_t(index / k) << 32);
  for (uint32_t i = k; i > 1; --i) std::swap(order[i - 1], order[uint32_t(next_uniform(rng) * float(i)) % i]);
  return order[index % k];
}

result<block_ref> spread_block_source::allocate(const sequence& seq, uint32_t index) {
  const uint32_t first = preferred_pool(seq.id, index);
  for (uint32_t i = 0; i < pools_.size(); ++i) {
    const uint32_t p = (first + i) % uint32_t(pools_.size());
    auto block = pools_[p]->allocate({seq.id, 0});
    if (block.is_ok()) {
      peak_used_[p] = std::max(peak_used_[p], pools_[p]->used_blocks());
      return block_ref{p, block.value()};
    }
  }
  return status{status_code::out_of_blocks, "every KV pool is full"};
}

status spread_block_source::release(const block_ref& ref) {
  if (ref.pool >= pools_.size()) return {status_code::invalid_argument, text::format("no pool {}", ref.pool)};
  return pools_[ref.pool]->release(ref.block);
}

result<generate_result> generate(const loaded_model& model, backend& device, const generate_options& options) {
  const model_config& c = model.weights->config();
  if (options.prompt_ids.empty()) return status{status_code::invalid_argument, "empty prompt"};
  if (options.kv_pools < 1 || options.kv_pools > 1024)
    return status{status_code::invalid_argument, text::format("--kv-pools {} is outside 1..1024", options.kv_pools)};
  if (options.max_tokens < 0) return status{status_code::invalid_argument, "max tokens must be >= 0"};
  const int64_t total_tokens = int64_t(options.prompt_ids.size()) + options.max_tokens;
  const uint32_t per_pool = options.blocks_per_pool
                                ? options.blocks_per_pool
                                : (blocks_for_tokens(total_tokens) + uint32_t(options.kv_pools) - 1) / options.kv_pools;

  auto made = engine::create(model.weights, device, {options.max_batch_tokens, 1, options.kv_type});
  if (!made.is_ok()) return made.error();
  engine& eng = *made.value();
  std::vector<kv_pool> pools;
  kv_pools view;
  for (int p = 0; p < options.kv_pools; ++p) {
    auto pool = kv_pool::create(device, eng.pool_layout(), per_pool);
    if (!pool.is_ok()) return pool.error();
    pools.push_back(std::move(pool).value());
  }
  for (auto& p : pools) view.by_id.push_back(&p);
  spread_block_source source(view.by_id, options.seed);
  pool_router router(device, view, c.attention());
  batcher runner(eng, source, {options.max_batch_tokens, 1});

  auto seq = std::make_shared<sequence>();
  seq->id = 1;
  seq->tokens = options.prompt_ids;
  seq->n_prompt = int(options.prompt_ids.size());
  seq->sampling = options.sampling;
  seq->rng = options.seed;
  seq->max_new_tokens = options.max_tokens;
  seq->ignore_eos = options.ignore_eos;
  seq->stop_ids = options.stop_ids;
  runner.add(seq);

  generate_result out;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto first_token = start;
  while (!runner.idle()) {
    ILLM_RETURN_IF_ERROR(runner.step(view, &router));
    if (out.prefill_s == 0 && (seq->n_generated() > 0 || seq->finished())) {
      first_token = clock::now();
      out.prefill_s = std::chrono::duration<double>(first_token - start).count();
    }
  }
  out.decode_s = std::chrono::duration<double>(clock::now() - first_token).count();
  if (seq->finish == finish_reason::error) return status{status_code::out_of_blocks, seq->error};
  out.finish = seq->finish;
  out.token_ids.assign(seq->tokens.begin() + seq->n_prompt, seq->tokens.end());
  out.partials_per_layer = seq->partials_per_layer;
  out.blocks_per_pool = source.peak_used();
  out.query_bytes = router.query_bytes();
  out.partial_bytes = router.partial_bytes();
  for (auto& p : pools) ILLM_RETURN_IF_ERROR(p.check());
  return out;
}

}  // namespace illm::gpu
