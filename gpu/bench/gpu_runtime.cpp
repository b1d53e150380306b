// illm-gpu-bench's part e: the runtime's data path on device pools. One request of a long context (64K
// tokens on a GPU) whose KV is seeded into one pool up to its last chunk is moved, device to device, into
// four pools of this GPU (a quarter each), and a sample of its blocks is checked at both ends. Then the
// engine prefills the prompt's last chunk and decodes greedily twice: once in the one pool, once over the
// four, the pool that owns the request attending its quarter and a pool_router the other three (queries
// staged out through the host and partials back, as an attention server receives and answers them). The
// two runs must give the same ids; the report gives each run's decode tok/s and the bytes a network would
// carry per step between the pools.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include <cuda_runtime.h>

#include "gpu/bench/bench_support.hpp"
#include "gpu/bench/gpu_bench.hpp"
#include "gpu/cuda/cuda_check.hpp"
#include "gpu/pool_router.hpp"
#include "gpu/sampler.hpp"
#include "gpu/text.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

using bench_detail::bench_clock;
using bench_detail::seconds_since;

constexpr int runtime_pools = 4;
constexpr uint64_t request_id = 1;
constexpr uint32_t owner_instance = 0;

/// The request's shape: a prompt whose first `seeded` positions have seeded KV, then `tail` tokens the
/// engine prefills, then `steps` decode steps.
struct request_shape {
  int seeded = 0, tail = 0, steps = 0;
  uint32_t seeded_blocks() const { return uint32_t(seeded / kv_block_tokens); }
  /// Blocks the tail and the decode steps add, with one to spare.
  uint32_t tail_blocks() const { return blocks_for_tokens(tail + steps) + 1; }
  /// Seeded blocks per pool when spread over the pools (the last pool may hold fewer).
  uint32_t quarter() const { return (seeded_blocks() + runtime_pools - 1) / runtime_pools; }
  /// Bytes of both layouts (the one pool and the four) for blocks of `block_bytes`.
  uint64_t bytes(uint64_t block_bytes) const {
    return (uint64_t(seeded_blocks()) * 2 + uint64_t(tail_blocks()) * 2 + runtime_pools) * block_bytes;
  }
};

/// The largest request of at most `context` tokens (halving) whose pools fit in 90% of free device memory.
result<request_shape> fit_request(int context, int tail, int steps, uint64_t block_bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  ILLM_RETURN_IF_ERROR(check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  for (; context > 2 * tail; context /= 2) {
    const request_shape shape{context - tail, tail, steps};
    if (shape.bytes(block_bytes) <= uint64_t(double(free_bytes) * 0.9)) return shape;
  }
  return status{status_code::out_of_memory, "no request with a seeded context fits in device memory"};
}

/// Appends `n` blocks of pool `pool_id` to `table`.
status extend_table(kv_pool& pool, uint32_t pool_id, uint32_t n, block_table& table) {
  for (uint32_t i = 0; i < n; ++i) {
    auto block = pool.allocate({request_id, owner_instance});
    if (!block.is_ok()) return block.error();
    table.push_back({pool_id, block.value()});
  }
  return status::ok();
}

/// One step of the request: `n` tokens from pos0, logits of the last kept in `logits`.
status request_step(engine& eng, const kv_pools& view, attention_router* router, block_table& table,
                    const int32_t* tokens, int n, int32_t pos0, std::vector<float>& logits) {
  const uint32_t needed = blocks_for_tokens(int64_t(pos0) + n);
  if (table.size() < needed)
    ILLM_RETURN_IF_ERROR(extend_table(*view.by_id[view.local], view.local, needed - uint32_t(table.size()), table));
  const batch_entry entry{request_id, tokens, n, pos0, &table, true};
  ILLM_RETURN_IF_ERROR(eng.step({&entry, 1}, view, router));
  logits.resize(size_t(eng.config().vocab_size));
  return eng.copy_logits(0, logits.data());
}

/// Prefills `tail` after the seeded blocks of `table`, then decodes greedily, in `view` (the request's new
/// blocks go to its local pool).
result<runtime_run> run_request(engine& eng, const kv_pools& view, pool_router* router, block_table table,
                                const std::vector<int32_t>& tail, const request_shape& shape) {
  runtime_run out;
  std::vector<float> logits;
  auto t0 = bench_clock::now();
  ILLM_RETURN_IF_ERROR(request_step(eng, view, router, table, tail.data(), shape.tail, shape.seeded, logits));
  out.prefill_seconds = seconds_since(t0);
  out.ids.push_back(argmax(logits.data(), eng.config().vocab_size));
  out.logits.push_back(logits);
  const uint64_t bytes0 = router ? router->query_bytes() + router->partial_bytes() : 0;
  const uint64_t jobs0 = router ? router->jobs() : 0;
  int32_t pos = shape.seeded + shape.tail;
  t0 = bench_clock::now();
  for (int s = 0; s < shape.steps; ++s, ++pos) {
    const int32_t token = out.ids.back();
    ILLM_RETURN_IF_ERROR(request_step(eng, view, router, table, &token, 1, pos, logits));
    out.ids.push_back(argmax(logits.data(), eng.config().vocab_size));
  }
  out.decode_seconds = seconds_since(t0);
  out.decode_steps = shape.steps;
  out.logits.push_back(logits);
  if (router) {
    out.remote_bytes = router->query_bytes() + router->partial_bytes() - bytes0;
    out.remote_jobs = router->jobs() - jobs0;
  }
  for (const block_ref& ref : table) ILLM_RETURN_IF_ERROR(view.by_id[ref.pool]->release(ref.block));
  return out;
}

/// Entries i0, i0 + stride, ... below i1, and i1 - 1: the blocks of a move whose checksums are compared.
std::vector<uint32_t> sample_of(uint32_t i0, uint32_t i1, uint32_t stride) {
  std::vector<uint32_t> picks;
  for (uint32_t i = i0; i < i1; i += stride) picks.push_back(i);
  if (i1 > i0 && picks.back() != i1 - 1) picks.push_back(i1 - 1);
  return picks;
}

/// Moves the seeded blocks of `one` (all in `source`) into `pools`, a quarter each, device to device; the
/// spread table is returned, and the moves' figures go to `out`.
result<block_table> spread_blocks(cuda_backend& dev, const kv_pool& source, const block_table& one,
                                  std::vector<std::unique_ptr<kv_pool>>& pools, const request_shape& shape,
                                  runtime_figure& out) {
  block_table spread;
  const uint64_t block_bytes = source.layout().block_bytes();
  const auto t0 = bench_clock::now();
  for (uint32_t p = 0; p < runtime_pools; ++p) {
    const uint32_t i0 = std::min(shape.seeded_blocks(), p * shape.quarter());
    const uint32_t i1 = std::min(shape.seeded_blocks(), i0 + shape.quarter());
    std::vector<uint32_t> src, dst;
    ILLM_RETURN_IF_ERROR(extend_table(*pools[p], p, i1 - i0, spread));
    for (uint32_t i = i0; i < i1; ++i) {
      src.push_back(one[i].block);
      dst.push_back(spread[i].block);
    }
    ILLM_RETURN_IF_ERROR(dev.copy_blocks(pools[p]->base(), dst.data(), source.base(), src.data(), int(src.size()),
                                         block_bytes));
    out.moved_blocks += src.size();
  }
  ILLM_RETURN_IF_ERROR(dev.synchronize());
  out.move_seconds = seconds_since(t0);
  out.moved_bytes = out.moved_blocks * block_bytes;
  out.moves_intact = true;
  for (uint32_t p = 0; p < runtime_pools; ++p) {
    const uint32_t i0 = std::min(shape.seeded_blocks(), p * shape.quarter());
    const uint32_t i1 = std::min(shape.seeded_blocks(), i0 + shape.quarter());
    std::vector<uint32_t> src, dst;
    for (uint32_t i : sample_of(i0, i1, std::max(1u, shape.quarter() / 16))) {
      src.push_back(one[i].block);
      dst.push_back(spread[i].block);
    }
    auto before = source.checksum(src);
    auto after = pools[p]->checksum(dst);
    if (!before.is_ok()) return before.error();
    if (!after.is_ok()) return after.error();
    out.moves_intact = out.moves_intact && before.value() == after.value();
    out.checked_blocks += int(src.size());
  }
  return spread;
}

/// sum (a - b)^2 / sum b^2.
double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace

status measure_runtime(cuda_backend& dev, engine& eng, const gpu_bench_options& o, gpu_bench_result& out) {
  runtime_figure& f = out.runtime;
  const kv_layout layout = eng.pool_layout();
  const int tail = std::min(o.quick ? 32 : 512, eng.options().max_batch_tokens);
  auto fitted = fit_request(o.quick ? 320 : 65536, tail, o.quick ? 4 : 32, layout.block_bytes());
  if (!fitted.is_ok()) {
    out.notes.push_back("runtime over device pools: " + fitted.error().message());
    return status::ok();
  }
  const request_shape shape = fitted.value();
  f.model = out.decode_model;
  f.context = shape.seeded + shape.tail;
  f.prefilled = shape.tail;
  f.pools = runtime_pools;
  if (o.progress) o.progress(text::format("runtime: a request of {} tokens over {} device pools", f.context, f.pools));

  auto one = kv_pool::create(dev, layout, shape.seeded_blocks() + shape.tail_blocks());
  if (!one.is_ok()) return one.error();
  kv_pool& source = one.value();
  ILLM_RETURN_IF_ERROR(fill_pool(dev, source, o.seed ^ 0xe));
  block_table one_table;
  ILLM_RETURN_IF_ERROR(extend_table(source, 0, shape.seeded_blocks(), one_table));

  std::vector<std::unique_ptr<kv_pool>> pools;
  kv_pools spread_view;
  for (uint32_t p = 0; p < runtime_pools; ++p) {
    auto pool = kv_pool::create(dev, layout, shape.quarter() + (p == owner_instance ? shape.tail_blocks() : 0));
    if (!pool.is_ok()) return pool.error();
    pools.push_back(std::make_unique<kv_pool>(std::move(pool).value()));
    spread_view.by_id.push_back(pools.back().get());
  }
  spread_view.local = owner_instance;
  auto spread_table = spread_blocks(dev, source, one_table, pools, shape, f);
  if (!spread_table.is_ok()) return spread_table.error();

  std::mt19937 rng(uint32_t(o.seed));
  std::uniform_int_distribution<int32_t> token(3, eng.config().vocab_size - 1);
  std::vector<int32_t> tail_tokens(size_t(shape.tail));
  for (int32_t& t : tail_tokens) t = token(rng);

  const kv_pools one_view{{&source}, 0};
  auto alone = run_request(eng, one_view, nullptr, one_table, tail_tokens, shape);
  if (!alone.is_ok()) return alone.error();
  f.one_pool = std::move(alone).value();
  const model_config& c = eng.config();
  pool_router router(dev, spread_view, c.attention());
  auto spread = run_request(eng, spread_view, &router, spread_table.value(), tail_tokens, shape);
  if (!spread.is_ok()) return spread.error();
  f.spread = std::move(spread).value();
  for (size_t i = 0; i < std::min(f.one_pool.logits.size(), f.spread.logits.size()); ++i)
    f.logits_nmse = std::max(f.logits_nmse, nmse(f.spread.logits[i], f.one_pool.logits[i]));
  std::vector<const kv_pool*> every_pool{&source};
  for (const auto& pool : pools) every_pool.push_back(pool.get());
  for (const kv_pool* pool : every_pool) {
    ILLM_RETURN_IF_ERROR(pool->check());
    if (pool->used_blocks() != 0)
      return {status_code::internal, text::format("{} blocks left in use after the runs", pool->used_blocks())};
  }
  f.measured = true;
  return status::ok();
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
