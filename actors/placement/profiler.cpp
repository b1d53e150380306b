#include "actors/placement/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "gpu/engine.hpp"
#include "gpu/kv_pool.hpp"

namespace illm::actors::placement {

namespace {

constexpr int max_batch_tokens = 512;
constexpr int max_batch_seqs = 256;
constexpr int longest_context = 8192;

/// Sequences laid out on a pool to time steps: each sequence has blocks for its context.
class bench_bed {
 public:
  static gpu::result<bench_bed> make(const gpu::loaded_model& model, gpu::backend& device) {
    bench_bed b;
    auto eng = gpu::engine::create(model.weights, device, {max_batch_tokens, max_batch_seqs});
    if (!eng.is_ok()) return eng.error();
    b.engine_ = std::move(eng).value();
    // Room for the longest context plus a full decode batch at moderate contexts.
    const uint32_t blocks = gpu::blocks_for_tokens(longest_context) + max_batch_seqs * 8 + 64;
    auto pool = gpu::kv_pool::create(device, b.engine_->pool_layout(), blocks);
    if (!pool.is_ok()) return pool.error();
    b.pool_ = std::make_unique<gpu::kv_pool>(std::move(pool).value());
    // Zeroed KV: timing on garbage could hit slow paths for NaNs.
    std::vector<char> zeros(b.pool_->layout().block_bytes(), 0);
    for (uint32_t i = 0; i < blocks; ++i)
      if (gpu::status s = device.upload(b.pool_->block_data(i), zeros.data(), zeros.size()); !s.is_ok()) return s;
    return b;
  }

  /// The median time of a step over sequences (tokens, position) from a pool, `sample` per entry.
  gpu::result<double> time_step(const std::vector<std::pair<int, int>>& entries, bool sample_decodes, int repeats) {
    std::vector<gpu::block_table> tables(entries.size());
    std::vector<std::vector<int32_t>> tokens(entries.size());
    std::vector<gpu::batch_entry> batch;
    uint32_t next_block = 0;
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto [n, pos0] = entries[i];
      for (uint32_t b = 0; b < gpu::blocks_for_tokens(int64_t(pos0) + n); ++b) tables[i].push_back({0, next_block++});
      if (next_block > pool_->total_blocks())
        return gpu::status{gpu::status_code::out_of_blocks, "profiling batch larger than its pool"};
      tokens[i].assign(size_t(n), 100);
      batch.push_back({i + 1, tokens[i].data(), n, pos0, &tables[i], sample_decodes && n == 1});
    }
    const gpu::kv_pools pools{{pool_.get()}, 0};
    std::vector<double> times;
    for (int r = 0; r <= repeats; ++r) {  // the first run warms up
      const auto start = std::chrono::steady_clock::now();
      ILLM_RETURN_IF_ERROR(engine_->step(batch, pools, nullptr));
      ILLM_RETURN_IF_ERROR(engine_->device().synchronize());
      if (r > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
  }

  const gpu::model_config& config() const { return engine_->config(); }

 private:
  std::unique_ptr<gpu::engine> engine_;
  std::unique_ptr<gpu::kv_pool> pool_;
};

double causal_keys(double n, double pos0) { return n * pos0 + n * (n + 1) / 2; }

/// Least-squares slope of y over x.
double fit_slope(const std::vector<std::pair<double, double>>& points) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double n = double(points.size());
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

}  // namespace

gpu::result<profile> measure_profile(const gpu::loaded_model& model, gpu::backend& device,
                                     const profiler_options& options) {
  auto made = bench_bed::make(model, device);
  if (!made.is_ok()) return made.error();
  bench_bed& bed = made.value();
  const gpu::model_config& c = bed.config();
  const double layers = c.n_layers;
  profile p;
  p.name = fmt::format("{} {} (measured)", device.description(), model.name);
  p.model = model.name;
  p.n_layers = c.n_layers;
  // g: one decode query over growing contexts; time grows by L/g per KV token.
  std::vector<std::pair<double, double>> context_times;
  for (int context : {512, 2048, 4096, longest_context}) {
    auto t = bed.time_step({{1, context - 1}}, false, options.repeats);
    if (!t.is_ok()) return t.error();
    context_times.emplace_back(context, t.value());
  }
  const double slope = fit_slope(context_times);
  if (!(slope > 0)) return gpu::status{gpu::status_code::internal, "attention time did not grow with the context"};
  p.attention_tokens_per_s = layers / slope;
  // h: a prefill chunk at growing positions; beyond reading the context once (at g), each (query, key)
  // pair costs L/h.
  constexpr int chunk = 128;
  std::vector<std::pair<double, double>> pair_times;
  for (int pos0 : {0, 1024, 2048, 4096}) {
    auto t = bed.time_step({{chunk, pos0}}, false, options.repeats);
    if (!t.is_ok()) return t.error();
    pair_times.emplace_back(causal_keys(chunk, pos0), t.value() - (pos0 + chunk) * slope);
  }
  const double pair_slope = fit_slope(pair_times);
  if (!(pair_slope > 0)) return gpu::status{gpu::status_code::internal, "prefill time did not grow with the context"};
  p.prefill_pairs_per_s = layers / pair_slope;
  // dense(n): prefill chunks at position 0 without sampling, less their attention.
  for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}) {
    auto t = bed.time_step({{n, 0}}, false, options.repeats);
    if (!t.is_ok()) return t.error();
    p.dense_s.emplace_back(n, std::max(1e-9, (t.value() - causal_keys(n, 0) * pair_slope - n * slope) / layers));
  }
  // The classifier and sampling: n decode rows that sample against a prefill chunk of n tokens.
  double row_sum = 0;
  int row_points = 0;
  for (int n : {16, 64, 128}) {
    std::vector<std::pair<int, int>> decodes(size_t(n), {1, 0});
    auto with_rows = bed.time_step(decodes, true, options.repeats);
    auto without = bed.time_step(decodes, false, options.repeats);
    if (!with_rows.is_ok()) return with_rows.error();
    if (!without.is_ok()) return without.error();
    row_sum += std::max(0.0, with_rows.value() - without.value()) / n;
    ++row_points;
  }
  p.sampled_row_s = row_sum / row_points;
  p.kv_bytes_per_token = uint64_t(2) * c.n_layers * c.kv_dim() * gpu::dtype_bytes(gpu::dtype::f32);
  p.kv_capacity_tokens = (uint64_t(8) << 30) / std::max<uint64_t>(1, p.kv_bytes_per_token);  // 8 GiB of KV
  return p;
}

gpu::result<std::vector<validation_point>> validate_profile(const profile& p, const gpu::loaded_model& model,
                                                            gpu::backend& device, const profiler_options& options) {
  auto made = bench_bed::make(model, device);
  if (!made.is_ok()) return made.error();
  bench_bed& bed = made.value();
  std::mt19937_64 rng(options.seed * 7919 + 13);  // different batches from the fit
  std::vector<validation_point> out;
  for (int b = 0; b < options.validation_batches; ++b) {
    validation_point v;
    std::vector<std::pair<int, int>> entries;
    v.decode_sequences = int(1 + rng() % 48);
    for (int i = 0; i < v.decode_sequences; ++i) {
      const int context = int(16 + rng() % 1500);
      entries.emplace_back(1, context - 1);
      v.kv_tokens += context;
    }
    if (rng() % 3 != 0) {  // two batches in three carry a prefill chunk
      v.prefill_tokens = int(16 + rng() % (max_batch_tokens - 64));
      const int pos0 = int(rng() % 1024);
      entries.emplace_back(v.prefill_tokens, pos0);
      v.prefill_pairs = causal_keys(v.prefill_tokens, pos0);
      v.kv_tokens += pos0 + v.prefill_tokens;  // the chunk reads its context once
    }
    auto t = bed.time_step(entries, true, options.repeats);
    if (!t.is_ok()) return t.error();
    v.measured_s = t.value();
    v.predicted_s =
        mixed_step_time(p, v.decode_sequences + v.prefill_tokens, v.kv_tokens, v.prefill_pairs, v.decode_sequences);
    out.push_back(v);
  }
  return out;
}

}  // namespace illm::actors::placement
