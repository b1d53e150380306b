#pragma once
// The cluster simulator: the real gManager, rManagers and instances (batching, admission, loans,
// moves, leases, the placement policy) run on CAF's test coordinator, whose clock is virtual; workers
// take the step time the performance model predicts instead of computing, and pools have no memory
// behind them. A trace's requests arrive at their (scaled) times; the report gives throughput, requests
// completed and refused, and TTFT / TPOT percentiles. Policies: infinite (greedy placement and loans),
// passive (loans only when a pool is full), static-multi (no lending; a request longer than one
// instance can hold is refused), static-single (one instance over all GPUs, tensor parallel).

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "actors/settings/settings.hpp"
#include "actors/frontend/trace_replay.hpp"
#include "actors/placement/greedy_policy.hpp"
#include "actors/placement/perf_model.hpp"
#include "actors/logic/room_prefill.hpp"
#include "actors/sim/hosted_timing.hpp"
#include "gpu/engine.hpp"

namespace illm::actors::sim {

/// The policies the simulator compares.
std::vector<std::string> policy_names();

/// How the simulated front end picks an instance for a new request.
enum class routing {
  least_requests,       ///< fewest unfinished requests (what a front end knows)
  least_prompt_tokens,  ///< fewest unfinished prompt tokens (what a front end knows)
  least_tokens,         ///< fewest unfinished prompt + output tokens (an oracle: outputs are unknown on arrival)
  round_robin,
  /// least cost, as NVIDIA Dynamo's KV router weighs it: prefix_weight x the prompt tokens not cached there, plus
  /// the unfinished prompt tokens it has (with --prefix-cache local: where a request's prefix is cached)
  prefix_aware,
};
/// Names of the routings, in enum order.
std::vector<std::string> routing_names();

/// sim_options::mixed_step_tokens: the knee of the profile the instances run on.
constexpr int auto_mixed_step_tokens = -1;

/// One simulation's setting.
struct sim_options {
  std::string gpu = "a100-80g";
  std::string model = "llama2-13b";
  int instances = 32;  ///< instances (GPUs, or TP groups when the model needs several)
  /// GPUs of one instance, tensor parallel (0: as few as the weights need). Batches grow with them: an
  /// instance of k times those GPUs steps k times max_batch_tokens and max_batch_seqs.
  int gpus_per_instance = 0;
  std::string policy = "infinite";
  double rate_scale = 0;  ///< arrivals this many times faster; 0: all at once (saturating)
  size_t limit = 0;       ///< first N requests (0: all)
  routing router = routing::least_requests;
  double prefix_weight = 1;  ///< routing::prefix_aware's weight of the tokens to prefill against the load
  /// Requests an instance may have that have not started (no first token yet); the front end holds the
  /// rest in one queue, first come first served (0: send each on arrival).
  int max_unstarted = 2;
  /// How the instances batch (batch_settings_table() says what each means), per GPU of an instance: steps of
  /// 2048 tokens and 256 sequences; mixed_step_tokens auto_mixed_step_tokens is each policy's profile's knee
  /// (placement::dense_knee_tokens, where a step stops paying more for the weights than for its tokens).
  batch_settings batch{2048, 256, auto_mixed_step_tokens, gpu::engine_options{}.overlap_min_tokens,
                       default_room_prefill_min_chunks};
  /// Younger, no larger rooms that fit go before a long request waiting for its room for this long (the
  /// gManager's option; 0: never).
  std::chrono::milliseconds room_pass_limit = default_room_pass_limit;
  /// The rManagers' and the gManager's periods, in simulated time (slower than a real cluster's: a
  /// simulated step is tens of milliseconds of a GPU's time). The pool size comes from the profile.
  /// No replicas unless asked for (replica_min_tokens 0), and remote prefix runs read in place (the simulated
  /// plane does not time copies). With instance.prefix_cache "local", prompts are made of
  /// the trace's hash ids (equal where the trace says they are), or of each request's own tokens when it has none.
  instance_settings instance{
      .heartbeat_ms = 200, .lease_ms = 10000, .replica_min_tokens = 0, .prefix_copy = prefix_copy_never};
  gmanager_settings gmanager{.policy_period_ms = 500, .heartbeat_timeout_ms = 10000, .dead_after_ms = 60000};
  std::chrono::seconds stall_limit{600};  ///< end the run when no instance has stepped for this long
  placement::greedy_options greedy;
  std::optional<placement::profile> profile;  ///< instead of the GPU's roofline
  /// Pools this many times the profile's KV capacity, for every policy (what if: more memory per GPU, a
  /// smaller KV format).
  double kv_scale = 1;
  /// Queries, partials and moved blocks cross the links between instances at the profile's bandwidths
  /// (false: they take no time, what if).
  bool timed_links = true;
  double timeline_period_s = 0;  ///< a timeline row per this many simulated seconds (0: no timeline)
  hosted_timing hosted = hosted_timing::interleaved;  ///< how a holder's GPU fits the attention it hosts
  bool decode_first = true;  ///< holders attend decode tokens before the prefill queries queued on them
  /// Instance failures: at these simulated seconds from the first arrival, an instance chosen by fail_seed dies
  /// (its instance, rManager and worker, as a process killed), and its requests go on elsewhere (a takeover).
  std::vector<double> fail_at_s;
  /// Besides those: failures at random (Poisson) times, this many per instance per simulated hour (0: none).
  double fail_rate_per_hour = 0;
  uint64_t fail_seed = 1;
  /// Whether any failure is injected.
  bool injects_failures() const { return !fail_at_s.empty() || fail_rate_per_hour > 0; }
};

/// One period of a run: who stepped, where the GPUs' time went, and the KV memory and requests at its end.
struct timeline_row {
  double end_s = 0;            ///< simulated seconds from the first arrival to the period's end
  int stepping = 0;            ///< instances that started steps of their own in the period
  double busy_fraction = 0;    ///< the time of their own steps started in the period over it, mean per instance
  double hosted_fraction = 0;  ///< attention computed for other instances' requests over the period, mean
  double kv_used_fraction = 0;      ///< at the period's end: KV blocks in use over all blocks
  double kv_promised_fraction = 0;  ///< at the period's end: free blocks promised (to growth, to rooms)
  size_t started = 0;   ///< requests whose first token came by the period's end
  size_t finished = 0;  ///< requests that ended by the period's end
};

/// Percentiles of a latency.
struct percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

/// What one simulation gives.
struct sim_report {
  std::string policy;
  std::string profile_name;
  int instances = 0;
  uint64_t kv_tokens_per_instance = 0;
  double rate_scale = 0;
  size_t requests = 0, completed = 0, refused = 0, failed = 0;
  uint64_t output_tokens = 0;
  uint64_t prompt_tokens = 0;          ///< of the completed requests
  uint64_t prefix_hit_tokens = 0;      ///< ... found in a prefix cache (their KV not computed)
  /// The prompt tokens one LRU cache of 16-token blocks as large as the cluster's whole KV memory would find, on
  /// the same arrivals (every request's full prompt blocks, in arrival order): what any cache could hope for.
  uint64_t prefix_ceiling_tokens = 0;
  /// The same for a cache as large as the KV memory the running requests leave on average (1 - kv_used_fraction -
  /// kv_promised_fraction of it): the bound for a cache that shares the serving memory.
  uint64_t prefix_ceiling_idle_tokens = 0;
  /// Prompt tokens the engines computed (recomputation included): tokens run through the model less one per
  /// output token after each request's first.
  uint64_t prefill_tokens = 0;
  double makespan_s = 0;  ///< first arrival to last completion, simulated
  /// The completed requests' dense layers (at the best batch allowed) and attention, spread evenly over the
  /// instances: with everything arriving at once, no schedule has a shorter makespan.
  double work_bound_s = 0;
  double throughput_tok_s = 0;
  percentiles ttft_s, tpot_s;
  double median_normalized_latency_s = 0;  ///< e2e latency / output tokens
  double request_rate = 0;                 ///< requests per simulated second offered
  size_t moves = 0, moves_failed = 0;
  uint64_t preemptions = 0;         ///< sequences preempted (their KV recomputed later)
  uint64_t batch_tokens = 0;        ///< tokens run through the model, recomputation included
  double mean_step_tokens = 0;      ///< batch tokens per step, over all instances
  double mean_step_sampled = 0;     ///< sampled rows (decoding requests) per step
  int mixed_step_tokens = 0;        ///< the tokens a step with decode tokens prefilled up to (0: no such limit)
  double busy_fraction = 0;         ///< instances' step time over makespan, mean
  double computing_fraction = 0;    ///< of which computing (not waiting for holders), mean
  double hosted_fraction = 0;       ///< attention computed for other instances' requests over makespan, mean
  double kv_used_fraction = 0;      ///< KV blocks in use over all blocks, mean over the run
  double kv_promised_fraction = 0;  ///< free KV blocks promised (to running requests' growth, to rooms), mean
  double wall_s = 0;                ///< real time the simulation took
  size_t failures = 0;                 ///< instances that died (sim_options::fail_at_s, fail_rate_per_hour)
  uint64_t recovered_by_replica = 0;   ///< requests that went on with copies of lost blocks promoted
  uint64_t recovered_by_takeover = 0;  ///< ... with the primaries that survived their owner adopted (no copy)
  uint64_t recovered_by_recompute = 0; ///< requests that lost KV and computed it again
  uint64_t positions_recomputed = 0;   ///< KV positions computed again because their blocks were lost
  /// Per request of the trace, in order: simulated seconds from the first arrival to its end; -1 when it
  /// did not complete.
  std::vector<double> finished_s;
  std::vector<timeline_row> timeline;  ///< with sim_options::timeline_period_s: the run, period by period
};

/// Whether `options` can be simulated (a known policy; a GPU and model with a profile, enough GPUs per
/// instance), with a message saying what is wrong.
gpu::status check_options(const sim_options& options);

/// Runs one policy over a trace.
gpu::result<sim_report> simulate(const std::vector<frontend::trace_row>& trace, const sim_options& options);

}  // namespace illm::actors::sim
