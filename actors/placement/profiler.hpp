#pragma once
// `illm profile`: measures the performance model's numbers on a real backend (plain C++, no CAF) and
// checks them on mixed batches that were not used to fit them. Steps run through the real engine on
// blocks of a real pool; each time is the lower quartile of runs taken round after round over all the steps.
//   g:        one decode query at growing contexts (the slope of time over KV tokens read);
//   h:        a prefill chunk at growing positions (the slope over (query, key) pairs);
//   dense(n): prefill chunks of n tokens at position 0 (no sampling), less their attention, per layer;
//   sampled(n): n decode rows that sample against the same rows that do not (classifier and sampling).
// Small-batch kernels pad rows to a multiple of 16, so dense(n) and sampled(n) are measured on both sides
// of those steps and read as tables.

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/placement/perf_model.hpp"
#include "gpu/backend.hpp"
#include "gpu/model_files.hpp"

namespace illm::actors::placement {

/// How to measure.
struct profiler_options {
  int repeats = 5;        ///< runs per step (the lower quartile is kept)
  int validation_batches = 24;
  uint64_t seed = 1;
  gpu::dtype kv_type = gpu::dtype::f32;  ///< the KV pools' element type (kv_bytes_per_token follows it)
};

/// A step the profiler times: its sequences as (tokens, position of the first), and whether decode rows
/// (sequences of one token) sample.
struct probe {
  std::vector<std::pair<int, int>> entries;
  bool sample_decodes = false;
};

/// What a step asks of the model's terms: a one-token sequence is a decode that reads its context's KV;
/// a longer one is a prefill chunk that reads its context once and attends (query, key) pairs causally.
struct step_work {
  double tokens = 0;         ///< β
  double kv_tokens = 0;      ///< read by decodes, and once by each prefill chunk
  double prefill_pairs = 0;  ///< causal (query, key) pairs of the prefill chunks
  double sampled = 0;        ///< decode rows that sample
};
step_work work_of(const probe& step);

/// The step time `p` predicts for `work`.
double predict(const profile& p, const step_work& work);

/// The steps a fit times, in the order fit_profile reads their times.
std::vector<probe> fit_probes();

/// The profile (all but its name and model) fitted to the times of fit_probes(), in that order.
gpu::result<profile> fit_profile(std::span<const double> times, const gpu::model_config& c,
                                 gpu::dtype kv_type = gpu::dtype::f32);

/// One batch: what the model predicts and what was measured.
struct validation_point {
  int decode_sequences = 0;
  int prefill_tokens = 0;
  step_work work;  ///< what the batch asks of the model's terms
  double predicted_s = 0, measured_s = 0;
  double error() const { return measured_s > 0 ? (predicted_s - measured_s) / measured_s : 0; }
};

/// Measures a profile of `model` on `device`.
gpu::result<profile> measure_profile(const gpu::loaded_model& model, gpu::backend& device,
                                     const profiler_options& options);

/// Runs random mixed batches (decodes at random contexts and a prefill chunk) and compares.
gpu::result<std::vector<validation_point>> validate_profile(const profile& p, const gpu::loaded_model& model,
                                                            gpu::backend& device, const profiler_options& options);

/// A profile measured and, when asked, checked on held-back batches timed in the same rounds.
struct profile_check {
  profile measured;
  std::vector<validation_point> points;  ///< empty unless validated
};

/// Measures a profile and (with `validate`) checks it, the fit's steps and the held-back batches timed
/// round after round together, so that the machine's load at any moment weighs on both alike.
gpu::result<profile_check> measure_and_validate(const gpu::loaded_model& model, gpu::backend& device,
                                                const profiler_options& options, bool validate);

}  // namespace illm::actors::placement
