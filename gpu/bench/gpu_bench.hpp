#pragma once
// illm-gpu-bench: what the cuda backend achieves on this GPU, measured side by side in one run:
//  a. the device memory's streaming read bandwidth (a read kernel) and copy bandwidth (cudaMemcpy
//     device to device), the yardsticks;
//  b. decode MicroAttention's effective KV read bandwidth at 4K..1M tokens of context on llama2-7b and
//     llama3-8b layer shapes with fp16 KV, as a fraction of the read bandwidth;
//  c. DistAttention (one partial per pool, merged) against splitting by heads and against moving the
//     KV to the query's owner, over 4 pools on this one GPU: time per decode step and bytes a network
//     would carry per step;
//  d. decode throughput (tokens/s) at batch 1..256 under continuous batching on a llama2-7b shape with
//     synthetic fp16 weights and fp16 KV;
//  e. the runtime's data path over 4 device pools on this GPU (gpu_runtime.cpp): one long request's KV moved
//     device to device from one pool into four and checked on arrival, then its prefill and decode through
//     the engine and a pool_router, against the same request in the one pool (the same ids).
// Timings are CUDA events around each call; figures keep the best call and the mean.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/cuda/abi.hpp"
#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/status.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// What illm-gpu-bench runs with.
struct gpu_bench_options {
  int device = 0;
  int layers = 32;     ///< layers of the llama2-7b decode model (fewer start faster; the output says)
  bool quick = false;  ///< small shapes and contexts: a smoke test whose numbers mean nothing
  uint64_t seed = 1;
  std::function<void(std::string_view)> progress;  ///< told what is measured next; may be empty
};

/// A timed operation: bytes it moves per call, best and mean seconds per call.
struct timed_figure {
  uint64_t bytes = 0;
  int calls = 0;
  double best_seconds = 0, mean_seconds = 0;
  double best_gbps() const { return best_seconds > 0 ? double(bytes) / best_seconds / 1e9 : 0.0; }
  double mean_gbps() const { return mean_seconds > 0 ? double(bytes) / mean_seconds / 1e9 : 0.0; }
};

/// Decode MicroAttention at one context on one shape (one query token, fp16 KV).
struct attention_point {
  std::string shape;  ///< preset name
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int context = 0;
  timed_figure kv;  ///< bytes: the K and V the query reads
};

/// One way of computing a decode step's attention over 4 pools, at one context.
struct method_figure {
  double seconds_per_step = 0;  ///< mean over the timed steps
  uint64_t bytes_per_step = 0;  ///< what crosses between pools (a network, across machines)
};

/// DistAttention and its alternatives at one context.
struct dist_point {
  int context = 0;
  method_figure dist_attention, head_split, move_kv;
  double max_abs_difference = 0;  ///< largest gap of the alternatives' outputs to DistAttention's
};

/// Decode throughput at one batch size.
struct throughput_point {
  int batch = 0;
  uint64_t tokens = 0;
  double seconds = 0;
  double tokens_per_second() const { return seconds > 0 ? double(tokens) / seconds : 0.0; }
};

/// One request's run in part e: the prefill of its prompt's tail, then greedy decode steps.
struct runtime_run {
  double prefill_seconds = 0;
  double decode_seconds = 0;  ///< all decode steps, each waited for (its logits read back)
  int decode_steps = 0;
  std::vector<int32_t> ids;   ///< the token after the prefill, then one per decode step
  uint64_t remote_bytes = 0;  ///< queries out and partials back between pools, over the decode steps
  uint64_t remote_jobs = 0;   ///< remote MicroAttention jobs over the decode steps
  std::vector<std::vector<float>> logits;  ///< of the prefill and of the last decode step
  double tokens_per_second() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0.0; }
};

/// Part e: one request over device pools, and the same request in one pool.
struct runtime_figure {
  bool measured = false;
  std::string model;
  int context = 0;    ///< the request's prompt: seeded KV positions, then the tail the engine prefills
  int prefilled = 0;  ///< the tail
  int pools = 0;
  uint64_t moved_blocks = 0, moved_bytes = 0;
  double move_seconds = 0;  ///< every move, device to device, waited for
  int checked_blocks = 0;   ///< blocks whose checksum was compared at both ends of their move
  bool moves_intact = false;
  runtime_run one_pool, spread;
  double logits_nmse = 0;  ///< the larger of the two compared steps' (spread against one pool)
  bool ids_equal() const { return !one_pool.ids.empty() && one_pool.ids == spread.ids; }
  bool passed() const { return moves_intact && ids_equal(); }
};

/// Everything illm-gpu-bench measured.
struct gpu_bench_result {
  device_info device;
  bool emulated = false;  ///< the CPU emulation of CUDA (tests): the numbers mean nothing
  timed_figure read, copy;  ///< memory yardsticks; copy bytes count the read and the write
  std::vector<attention_point> attention;
  std::string dist_shape;
  int pools = 0;
  std::vector<dist_point> dist;
  std::string decode_model;  ///< e.g. "llama2-7b (32 of 32 layers), synthetic fp16 weights, fp16 KV"
  double weights_seconds = 0;  ///< generating the synthetic weights and placing them on the device
  std::vector<throughput_point> decode;
  runtime_figure runtime;
  std::vector<std::string> notes;  ///< what was left out and why (e.g. a context that did not fit)
  double seconds = 0;
};

/// Runs every measurement (a few minutes on an H200; seconds with quick).
result<gpu_bench_result> run_gpu_bench(const gpu_bench_options& options);

/// Fills every block of a pool with seeded fp16 values: a 64 MiB pattern uploaded once, then copied on the
/// device over the rest of the arena.
status fill_pool(cuda_backend& dev, const kv_pool& pool, uint64_t seed);

/// Part e on `eng` (a model with fp16 KV on `dev`): fills out.runtime, or leaves it unmeasured with a note
/// when the device lacks the memory.
status measure_runtime(cuda_backend& dev, engine& eng, const gpu_bench_options& options, gpu_bench_result& out);

/// The result as aligned tables, and as one JSON object (for deploy/gpu-sdpa-bench.py).
std::string to_text(const gpu_bench_result& r);
std::string to_json(const gpu_bench_result& r);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
