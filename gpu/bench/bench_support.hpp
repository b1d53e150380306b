#pragma once
// What the parts of `illm bench engine` share (internal to gpu/bench/): the clock, progress reports, and KV
// contents filled from seeds, so that every layout holds the same values for the same logical element.

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gpu/bench/bench_engine.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/model_config.hpp"

namespace illm::gpu::bench_detail {

using bench_clock = std::chrono::steady_clock;

/// Pools of the DistAttention comparison.
constexpr int dist_pool_count = 4;

/// Seconds since `t0`.
double seconds_since(bench_clock::time_point t0);
/// Tells the caller's progress callback what is measured next.
void report(const bench_engine_options& options, std::string_view what);
/// A 64-bit mix (splitmix64's finaliser).
uint64_t mix64(uint64_t x);
/// Fills out[0, n) with values in [-1, 1) drawn from `stream` (the same stream gives the same values).
void fill_seeded(uint64_t stream, float* out, size_t n);
/// The stream of one (position, layer, K or V, kv head) run.
uint64_t kv_stream(uint64_t seed, int64_t pos, int layer, int kv, int head);

/// One block to fill: its data and the position of its first token.
struct block_fill {
  float* data = nullptr;
  int64_t pos0 = 0;
};

/// Writes seeded K and V into blocks laid out as `layout`, whose kv heads are the model's heads
/// [head0, head0 + layout.n_kv_heads).
void fill_blocks(cpu::thread_pool& threads, const kv_layout& layout, std::span<const block_fill> blocks, int head0,
                 uint64_t seed);
/// K and V bytes a query at `q_pos` reads from blocks starting at `block_pos`, counted per block.
uint64_t visible_kv_bytes(const kv_layout& layout, std::span<const int32_t> block_pos, int32_t q_pos);
/// Checks that an output holds numbers, not NaN or infinity.
status check_finite(std::span<const float> values, std::string_view what);

/// DistAttention over dist_pool_count pools against splitting by heads and against moving the KV, at 4K,
/// 16K and 64K tokens of a layer of `shape` (dist_attention_bench.cpp).
result<std::vector<dist_attention_figure>> measure_dist_attention(cpu::cpu_backend& device,
                                                                  const attention_shape& shape, uint64_t seed,
                                                                  const bench_engine_options& options);

}  // namespace illm::gpu::bench_detail
