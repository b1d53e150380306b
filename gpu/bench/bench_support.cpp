// The seeded contents and small helpers of `illm bench engine` (bench_support.hpp).
#include "gpu/bench/bench_support.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/text.hpp"

namespace illm::gpu::bench_detail {

double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

void report(const bench_engine_options& options, std::string_view what) {
  if (options.progress) options.progress(what);
}

// ---- Seeded contents --------------------------------------------------------------------------------

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Fills out[0, n) with values in [-1, 1) drawn from `stream` (the same stream gives the same values).
void fill_seeded(uint64_t stream, float* out, size_t n) {
  const auto key = uint32_t(stream ^ (stream >> 32));
  for (size_t i = 0; i < n; ++i) {
    uint32_t x = key ^ (uint32_t(i) * 0x9e3779b9u);
    x = (x ^ (x >> 16)) * 0x7feb352du;
    x = (x ^ (x >> 15)) * 0x846ca68bu;
    x ^= x >> 16;
    out[i] = float(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
}

/// The stream of one (position, layer, K or V, kv head) run, so that every layout holds the same
/// values for the same logical element.
uint64_t kv_stream(uint64_t seed, int64_t pos, int layer, int kv, int head) {
  return mix64(seed ^ mix64(((uint64_t(pos) * 256 + uint64_t(layer)) * 4096 + uint64_t(head)) * 2 + uint64_t(kv)));
}

/// Writes seeded K and V into blocks laid out as `layout`, whose kv heads are the model's heads
/// [head0, head0 + layout.n_kv_heads).
void fill_blocks(cpu::thread_pool& threads, const kv_layout& layout, std::span<const block_fill> blocks, int head0,
                 uint64_t seed) {
  threads.parallel_for(int64_t(blocks.size()), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int layer = 0; layer < layout.n_layers; ++layer)
        for (int kv = 0; kv < 2; ++kv)
          for (int h = 0; h < layout.n_kv_heads; ++h)
            for (int t = 0; t < kv_block_tokens; ++t) {
              const size_t run = (kv == 0 ? layout.k_offset(layer) : layout.v_offset(layer)) +
                                 size_t(h) * layout.head_stride() + size_t(t) * layout.head_dim;
              fill_seeded(kv_stream(seed, blocks[b].pos0 + t, layer, kv, head0 + h), blocks[b].data + run,
                          size_t(layout.head_dim));
            }
  });
}

/// K and V bytes a query at `q_pos` reads from blocks starting at `block_pos`, counted per block.
uint64_t visible_kv_bytes(const kv_layout& layout, std::span<const int32_t> block_pos, int32_t q_pos) {
  uint64_t tokens = 0;
  for (int32_t p : block_pos) tokens += uint64_t(std::clamp(q_pos + 1 - p, 0, kv_block_tokens));
  return tokens * 2 * uint64_t(layout.n_kv_heads) * uint64_t(layout.head_dim) * dtype_bytes(layout.type);
}

/// Checks that an output holds numbers, not NaN or infinity.
status check_finite(std::span<const float> values, std::string_view what) {
  for (float v : values)
    if (!std::isfinite(v)) return {status_code::internal, text::format("{} produced a non-finite value", what)};
  return status::ok();
}

}  // namespace illm::gpu::bench_detail
