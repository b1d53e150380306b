#pragma once
// `illm bench engine`: decode and prefill throughput under continuous batching on a real model,
// MicroAttention's effective read bandwidth beside this machine's memory bandwidth, and DistAttention
// against the two ways of spreading a long context it replaces (split by heads, moving the KV).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/dtype.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// What `illm bench engine` runs with.
struct bench_engine_options {
  std::string model = "stories15M";  ///< model of the decode and prefill figures (name or path)
  std::optional<dtype> weight_type;  ///< the model's matrices converted to it at load (none: as stored)
  int threads = 2;                   ///< cpu backend threads; the memory sum runs on as many
  /// The model's figures and the memory bandwidth only (no MicroAttention or DistAttention figures).
  bool model_only = false;
  uint64_t seed = 1;                 ///< prompts, queries and KV contents
  /// Told what is measured next; may be empty.
  std::function<void(std::string_view)> progress;
};

/// Decode throughput at one batch size under continuous batching.
struct decode_figure {
  int batch = 0;        ///< sequences decoding together
  int steps = 0;        ///< timed steps
  uint64_t tokens = 0;  ///< tokens the timed steps decoded, counted from the batcher
  double seconds = 0;   ///< wall time of the timed steps
  /// Decoded tokens per second.
  double tokens_per_second() const { return seconds > 0 ? double(tokens) / seconds : 0.0; }
};

/// Prefill throughput of one prompt processed in one step.
struct prefill_figure {
  int tokens = 0;           ///< prompt tokens the step processed, counted from the batcher
  int runs = 0;             ///< fresh runs; the fastest is kept
  double best_seconds = 0;  ///< the fastest run's step
  /// Prompt tokens per second of the fastest run.
  double tokens_per_second() const { return best_seconds > 0 ? tokens / best_seconds : 0.0; }
};

/// Streaming read bandwidth of this machine's memory (a vectorised sum over a large buffer).
struct memory_figure {
  uint64_t buffer_bytes = 0;  ///< bytes read per pass
  int threads = 0;
  int passes = 0;
  double best_seconds = 0;  ///< the fastest pass
  /// Bytes read per second in the fastest pass.
  double bytes_per_second() const { return best_seconds > 0 ? double(buffer_bytes) / best_seconds : 0.0; }
};

/// MicroAttention's effective read bandwidth at one context length (one decode query per call).
struct attention_bandwidth_figure {
  int context_tokens = 0;
  int calls = 0;                ///< timed calls, consecutive ones over different blocks
  uint64_t bytes_per_call = 0;  ///< K and V bytes of the tokens the query sees, counted per block
  double seconds = 0;           ///< all timed calls
  double best_seconds = 0;      ///< the fastest call
  /// Mean wall time of one call.
  double seconds_per_call() const { return calls > 0 ? seconds / calls : 0.0; }
  /// K and V bytes read per second in the fastest call: the same statistic as the memory figure's
  /// (its best pass), so that their ratio compares like with like on a noisy machine.
  double bytes_per_second() const { return best_seconds > 0 ? double(bytes_per_call) / best_seconds : 0.0; }
};

/// One way of computing a decode step's attention over the pools.
struct attention_method_figure {
  int steps = 0;             ///< timed steps
  double seconds = 0;        ///< all timed steps
  uint64_t bytes_moved = 0;  ///< between pools during the timed steps, counted per message
  /// Mean wall time of one step (one layer).
  double seconds_per_step() const { return steps > 0 ? seconds / steps : 0.0; }
  /// Bytes moved between pools per step (one layer).
  uint64_t bytes_per_step() const { return steps > 0 ? bytes_moved / uint64_t(steps) : 0; }
};

/// DistAttention and its alternatives at one context length.
struct dist_attention_figure {
  int context_tokens = 0;
  attention_method_figure dist_attention;  ///< one MicroAttention partial per pool, merged at the owner
  attention_method_figure head_split;      ///< each pool holds every token of its share of the heads
  attention_method_figure move_kv;         ///< remote blocks copied to the owner, attended there
  double max_abs_difference = 0;           ///< largest gap of the alternatives' outputs to DistAttention's
  /// Bytes moved per step by moving the KV over those moved by DistAttention.
  double move_kv_over_dist_bytes() const {
    const uint64_t dist = dist_attention.bytes_per_step();
    return dist > 0 ? double(move_kv.bytes_per_step()) / double(dist) : 0.0;
  }
};

/// Everything `illm bench engine` measured.
struct bench_engine_result {
  std::string model;    ///< model of the decode and prefill figures
  std::string weights;  ///< its matrices' types ("q4_k 96, q6_k 17 matrices")
  uint64_t weight_bytes = 0;  ///< bytes of its weights: what a decode step reads
  std::string backend;  ///< backend every figure ran on
  int threads = 0;
  int decode_prompt_tokens = 0;       ///< prompt length of each decoding sequence (BOS, seeded ids)
  std::vector<decode_figure> decode;  ///< by batch size: 1, 8, 16, 32, 64, 128
  prefill_figure prefill;
  std::string attention_model;  ///< preset whose layer shape the attention figures use
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  memory_figure memory;
  std::vector<attention_bandwidth_figure> attention;  ///< by context: 1K, 4K, 16K, 64K
  int pools = 0;                                      ///< pools of the DistAttention comparison
  std::vector<dist_attention_figure> dist;            ///< by context: 4K, 16K, 64K
  double seconds = 0;                                 ///< the whole run
};

class engine;
class backend;

/// Decode throughput of `batch` sequences under continuous batching on `eng` (each a prompt of BOS and
/// seeded ids, greedy, never stopping), timed over a fixed number of steps once every sequence decodes.
result<decode_figure> measure_decode_throughput(engine& eng, backend& device, int batch, uint64_t seed);

/// Runs every measurement once on the cpu backend (under a minute on two cores, about 3.5 GiB at most).
result<bench_engine_result> run_bench_engine(const bench_engine_options& options);

}  // namespace illm::gpu
