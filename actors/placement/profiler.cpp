#include "actors/placement/profiler.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <random>
#include <span>

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
  static gpu::result<bench_bed> make(const gpu::loaded_model& model, gpu::backend& device, gpu::dtype kv_type) {
    bench_bed b;
    auto eng = gpu::engine::create(model.weights, device, {max_batch_tokens, max_batch_seqs, kv_type});
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

  /// Times each probe `repeats` times, round after round through all of them (after one warm-up round),
  /// and returns the lower quartile of each one's runs. A slow spell of the machine lands on one run of
  /// many probes rather than on every run of a few; other work only ever adds time, and the quartile
  /// keeps a typical quick run where the minimum would keep a lucky one.
  gpu::result<std::vector<double>> time_rounds(const std::vector<probe>& probes, int repeats) {
    std::vector<std::vector<double>> times(probes.size());
    for (int r = 0; r <= repeats; ++r)
      for (size_t i = 0; i < probes.size(); ++i) {
        auto t = time_once(probes[i]);
        if (!t.is_ok()) return t.error();
        if (r > 0) times[i].push_back(t.value());
      }
    std::vector<double> quartiles;
    for (auto& runs : times) {
      const size_t k = (runs.size() - 1) / 4;
      std::nth_element(runs.begin(), runs.begin() + k, runs.end());
      quartiles.push_back(runs[k]);
    }
    return quartiles;
  }

  const gpu::model_config& config() const { return engine_->config(); }

 private:
  /// One step over the probe's sequences, laid out on the pool's blocks in order.
  gpu::result<double> time_once(const probe& p) {
    std::vector<gpu::block_table> tables(p.entries.size());
    std::vector<std::vector<int32_t>> tokens(p.entries.size());
    std::vector<gpu::batch_entry> batch;
    uint32_t next_block = 0;
    for (size_t i = 0; i < p.entries.size(); ++i) {
      const auto [n, pos0] = p.entries[i];
      for (uint32_t b = 0; b < gpu::blocks_for_tokens(int64_t(pos0) + n); ++b) tables[i].push_back({0, next_block++});
      if (next_block > pool_->total_blocks())
        return gpu::status{gpu::status_code::out_of_blocks, "profiling batch larger than its pool"};
      tokens[i].assign(size_t(n), 100);
      batch.push_back({i + 1, tokens[i].data(), n, pos0, &tables[i], p.sample_decodes && n == 1});
    }
    const gpu::kv_pools pools{{pool_.get()}, 0};
    const auto start = std::chrono::steady_clock::now();
    ILLM_RETURN_IF_ERROR(engine_->step(batch, pools, nullptr));
    ILLM_RETURN_IF_ERROR(engine_->device().synchronize());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

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

constexpr int fit_chunk = 128;
constexpr std::array<int, 4> fit_contexts{512, 2048, 4096, longest_context};
constexpr std::array<int, 4> fit_positions{0, 1024, 2048, 4096};
// Row counts on both sides of the multiples of 16 that small-batch kernels pad to, where the time steps.
constexpr std::array<int, 15> fit_dense_tokens{1, 2, 4, 8, 16, 17, 32, 33, 48, 49, 64, 65, 128, 256, 512};
constexpr std::array<int, 10> fit_sampled_rows{1, 16, 17, 32, 33, 48, 49, 64, 65, 128};

}  // namespace

step_work work_of(const probe& step) {
  step_work w;
  for (const auto& [n, pos0] : step.entries) {
    w.tokens += n;
    w.kv_tokens += pos0 + n;
    if (n > 1) w.prefill_pairs += causal_keys(n, pos0);
    if (n == 1 && step.sample_decodes) ++w.sampled;
  }
  return w;
}

double predict(const profile& p, const step_work& w) {
  return mixed_step_time(p, w.tokens, w.kv_tokens, w.prefill_pairs, w.sampled);
}

std::vector<probe> fit_probes() {
  std::vector<probe> probes;
  for (int context : fit_contexts) probes.push_back({{{1, context - 1}}, false});
  for (int pos0 : fit_positions) probes.push_back({{{fit_chunk, pos0}}, false});
  for (int n : fit_dense_tokens) probes.push_back({{{n, 0}}, false});
  for (int n : fit_sampled_rows) {
    const std::vector<std::pair<int, int>> decodes(size_t(n), {1, 0});
    probes.push_back({decodes, true});
    probes.push_back({decodes, false});
  }
  return probes;
}

gpu::result<profile> fit_profile(std::span<const double> t, const gpu::model_config& c, gpu::dtype kv_type) {
  const double layers = c.n_layers;
  profile p;
  p.n_layers = c.n_layers;
  // g: one decode query over growing contexts; time grows by L/g per KV token.
  std::vector<std::pair<double, double>> context_times;
  for (int context : fit_contexts) context_times.emplace_back(context, t[context_times.size()]);
  t = t.subspan(fit_contexts.size());
  const double slope = fit_slope(context_times);
  if (!(slope > 0)) return gpu::status{gpu::status_code::internal, "attention time did not grow with the context"};
  p.attention_tokens_per_s = layers / slope;
  // h: a prefill chunk at growing positions; beyond reading the context once (at g), each (query, key)
  // pair costs L/h.
  std::vector<std::pair<double, double>> pair_times;
  for (int pos0 : fit_positions)
    pair_times.emplace_back(causal_keys(fit_chunk, pos0), t[pair_times.size()] - (pos0 + fit_chunk) * slope);
  t = t.subspan(fit_positions.size());
  const double pair_slope = fit_slope(pair_times);
  if (!(pair_slope > 0)) return gpu::status{gpu::status_code::internal, "prefill time did not grow with the context"};
  p.prefill_pairs_per_s = layers / pair_slope;
  // dense(n): prefill chunks at position 0 without sampling, less their attention.
  for (int n : fit_dense_tokens) {
    const double attention_s = (n > 1 ? causal_keys(n, 0) * pair_slope : 0) + n * slope;
    p.dense_s.emplace_back(n, std::max(1e-9, (t[p.dense_s.size()] - attention_s) / layers));
  }
  t = t.subspan(fit_dense_tokens.size());
  // The classifier and sampling: n decode rows that sample against the same rows that do not; the mean
  // per row for profiles read as a line.
  double row_sum = 0;
  for (size_t i = 0; i < fit_sampled_rows.size(); ++i) {
    const double seconds = std::max(0.0, t[2 * i] - t[2 * i + 1]);
    p.sampled_s.emplace_back(fit_sampled_rows[i], seconds);
    row_sum += seconds / fit_sampled_rows[i];
  }
  p.sampled_row_s = row_sum / double(fit_sampled_rows.size());
  p.kv_bytes_per_token = uint64_t(2) * c.n_layers * c.kv_dim() * gpu::dtype_bytes(kv_type);
  p.kv_capacity_tokens = (uint64_t(8) << 30) / std::max<uint64_t>(1, p.kv_bytes_per_token);  // 8 GiB of KV
  return p;
}

namespace {

/// Random mixed batches, different from the fit's steps: decodes at random contexts, and in two
/// batches of three a prefill chunk. Their descriptions go to `points`, their steps are returned.
std::vector<probe> validation_probes(const profiler_options& options, std::vector<validation_point>& points) {
  std::mt19937_64 rng(options.seed * 7919 + 13);
  std::vector<probe> probes;
  for (int b = 0; b < options.validation_batches; ++b) {
    validation_point v;
    probe step{{}, true};
    v.decode_sequences = int(1 + rng() % 48);
    for (int i = 0; i < v.decode_sequences; ++i) step.entries.emplace_back(1, int(15 + rng() % 1500));
    if (rng() % 3 != 0) {
      v.prefill_tokens = int(16 + rng() % (max_batch_tokens - 64));
      step.entries.emplace_back(v.prefill_tokens, int(rng() % 1024));
    }
    v.work = work_of(step);
    points.push_back(v);
    probes.push_back(std::move(step));
  }
  return probes;
}

/// Fills each point's measured time from `t` and its prediction from `p`.
void compare(const profile& p, std::span<const double> t, std::vector<validation_point>& points) {
  for (size_t i = 0; i < points.size(); ++i) {
    validation_point& v = points[i];
    v.measured_s = t[i];
    v.predicted_s = predict(p, v.work);
  }
}

}  // namespace

gpu::result<profile> measure_profile(const gpu::loaded_model& model, gpu::backend& device,
                                     const profiler_options& options) {
  auto checked = measure_and_validate(model, device, options, false);
  if (!checked.is_ok()) return checked.error();
  return checked->measured;
}

gpu::result<std::vector<validation_point>> validate_profile(const profile& p, const gpu::loaded_model& model,
                                                            gpu::backend& device, const profiler_options& options) {
  auto made = bench_bed::make(model, device, options.kv_type);
  if (!made.is_ok()) return made.error();
  std::vector<validation_point> points;
  auto times = made->time_rounds(validation_probes(options, points), options.repeats);
  if (!times.is_ok()) return times.error();
  compare(p, times.value(), points);
  return points;
}

gpu::result<profile_check> measure_and_validate(const gpu::loaded_model& model, gpu::backend& device,
                                                const profiler_options& options, bool validate) {
  auto made = bench_bed::make(model, device, options.kv_type);
  if (!made.is_ok()) return made.error();
  profile_check out;
  std::vector<probe> probes = fit_probes();
  const size_t fit_count = probes.size();
  if (validate)
    for (probe& step : validation_probes(options, out.points)) probes.push_back(std::move(step));
  auto times = made->time_rounds(probes, options.repeats);
  if (!times.is_ok()) return times.error();
  const std::span<const double> t = times.value();
  auto fitted = fit_profile(t.first(fit_count), made->config(), options.kv_type);
  if (!fitted.is_ok()) return fitted.error();
  out.measured = fitted.value();
  out.measured.name = fmt::format("{} {} (measured)", device.description(), model.name);
  out.measured.model = model.name;
  compare(out.measured, t.subspan(fit_count), out.points);
  return out;
}

}  // namespace illm::actors::placement
