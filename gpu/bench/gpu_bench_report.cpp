// illm-gpu-bench's reports: the measurements as a table for people and as one JSON object.
#include <algorithm>
#include <sstream>
#include <string_view>

#include "gpu/bench/gpu_bench.hpp"
#include "gpu/text.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

std::string fixed(double v, int decimals) { return text::format("{:." + std::to_string(decimals) + "f}", v); }

/// The worst fraction of the read bandwidth over the attention points at >= 64K tokens; -1 when none.
double worst_long_context_fraction(const gpu_bench_result& r) {
  double worst = -1;
  for (const attention_point& a : r.attention)
    if (a.context >= 65536) {
      const double f = a.kv.best_gbps() / r.read.best_gbps();
      worst = worst < 0 ? f : std::min(worst, f);
    }
  return worst;
}

/// Part e as a table: the moves, then each run's prefill, decode and traffic, then whether the ids agree.
std::string runtime_text(const gpu_bench_result& r) {
  const runtime_figure& f = r.runtime;
  if (!f.measured) return "";
  std::ostringstream o;
  o << text::format("\nruntime over {} device pools on this GPU, {}: one request of {} tokens ({} with seeded KV, the "
                    "last {} prefilled by the engine), then {} greedy decode steps\n",
                    f.pools, f.model, f.context, f.context - f.prefilled, f.prefilled, f.one_pool.decode_steps);
  o << text::format("  moves: {} blocks ({:.2f} GiB) from the one pool into the {}, device to device, in {:.4f} s "
                    "({:.0f} GB/s); {} blocks checked at both ends: {}\n",
                    f.moved_blocks, double(f.moved_bytes) / (1u << 30), f.pools, f.move_seconds,
                    f.move_seconds > 0 ? double(f.moved_bytes) / f.move_seconds / 1e9 : 0.0, f.checked_blocks,
                    f.moves_intact ? "intact" : "CHANGED");
  o << "             prefill s  decode tok/s  bytes/step between pools  remote jobs/step\n";
  for (const auto& [name, run] : {std::pair{"one pool", &f.one_pool}, std::pair{"4 pools", &f.spread}}) {
    const double steps = std::max(1, run->decode_steps);
    o << "  " << name << std::string(9 - std::string_view(name).size(), ' ') << pad(fixed(run->prefill_seconds, 3), 11)
      << pad(fixed(run->tokens_per_second(), 1), 14) << pad(fixed(double(run->remote_bytes) / steps, 0), 26)
      << pad(fixed(double(run->remote_jobs) / steps, 0), 18) << "\n";
  }
  o << text::format("  ids over 4 pools equal to one pool's: {} ({} ids; logits nmse {:.2e})\n",
                    f.ids_equal() ? "yes" : "NO", f.one_pool.ids.size(), f.logits_nmse);
  return o.str();
}

}  // namespace

std::string to_text(const gpu_bench_result& r) {
  std::ostringstream o;
  o << text::format("illm-gpu-bench on {} (compute capability {}.{}, {} SMs, {:.1f} GiB), {:.1f} s{}\n\n",
                    r.device.name, r.device.major, r.device.minor, r.device.sm_count,
                    double(r.device.total_bytes) / (1u << 30), r.seconds,
                    r.emulated ? " - CPU EMULATION: the numbers mean nothing" : "");
  o << text::format("memory: read {:.0f} GB/s (best of {} passes over {:.2f} GiB), copy {:.0f} GB/s (read + write)\n\n",
                    r.read.best_gbps(), r.read.calls, double(r.read.bytes) / (1u << 30), r.copy.best_gbps());
  o << "decode MicroAttention, one query token, fp16 KV (bandwidth = K and V bytes read / time):\n";
  o << "  shape       heads  kv  context     KV MiB     best us     mean us  best GB/s  mean GB/s  of read\n";
  for (const attention_point& a : r.attention)
    o << "  " << a.shape << std::string(a.shape.size() < 10 ? 10 - a.shape.size() : 0, ' ') << pad(std::to_string(a.n_heads), 7)
      << pad(std::to_string(a.n_kv_heads), 4) << pad(std::to_string(a.context), 9)
      << pad(fixed(double(a.kv.bytes) / (1 << 20), 1), 11) << pad(fixed(a.kv.best_seconds * 1e6, 1), 12)
      << pad(fixed(a.kv.mean_seconds * 1e6, 1), 12) << pad(fixed(a.kv.best_gbps(), 0), 11)
      << pad(fixed(a.kv.mean_gbps(), 0), 11) << pad(fixed(100 * a.kv.best_gbps() / r.read.best_gbps(), 1) + "%", 9)
      << "\n";
  o << text::format("\nDistAttention vs alternatives ({} layer, {} pools on this GPU; bytes: what would cross between "
                    "machines per step):\n",
                    r.dist_shape, r.pools);
  o << "  context   dist us  dist bytes   heads us  heads bytes   move-KV us   move-KV bytes  max diff\n";
  for (const dist_point& d : r.dist)
    o << pad(std::to_string(d.context), 9) << pad(fixed(d.dist_attention.seconds_per_step * 1e6, 1), 10)
      << pad(std::to_string(d.dist_attention.bytes_per_step), 12) << pad(fixed(d.head_split.seconds_per_step * 1e6, 1), 11)
      << pad(std::to_string(d.head_split.bytes_per_step), 13) << pad(fixed(d.move_kv.seconds_per_step * 1e6, 1), 13)
      << pad(std::to_string(d.move_kv.bytes_per_step), 16) << pad(text::format("{:.1e}", d.max_abs_difference), 10)
      << "\n";
  o << text::format("\ndecode throughput under continuous batching, {} (weights ready in {:.1f} s):\n", r.decode_model,
                    r.weights_seconds);
  o << "  batch   tokens   seconds      tok/s\n";
  for (const throughput_point& t : r.decode)
    o << pad(std::to_string(t.batch), 7) << pad(std::to_string(t.tokens), 9) << pad(fixed(t.seconds, 3), 10)
      << pad(fixed(t.tokens_per_second(), 1), 11) << "\n";
  o << runtime_text(r);
  for (const std::string& note : r.notes) o << "note: " << note << "\n";
  const double worst = worst_long_context_fraction(r);
  if (worst < 0)
    o << "\nacceptance: no context of 64K tokens or more was measured\n";
  else
    o << text::format("\nacceptance: decode MicroAttention at >= 64K tokens reads KV at >= 90% of the read bandwidth: "
                      "{} (worst {:.1f}%)\n",
                      worst >= 0.9 ? "yes" : "NO", 100 * worst);
  return o.str();
}

std::string to_json(const gpu_bench_result& r) {
  // Literal braces are doubled: text::format reads single ones as fields.
  std::ostringstream o;
  o << text::format("{{\"device\": \"{}\", \"emulated\": {}, \"read_gbps\": {:.3f}, \"copy_gbps\": {:.3f}, "
                    "\"attention\": [",
                    r.device.name, r.emulated, r.read.best_gbps(), r.copy.best_gbps());
  for (size_t i = 0; i < r.attention.size(); ++i) {
    const attention_point& a = r.attention[i];
    o << (i ? ", " : "")
      << text::format("{{\"shape\": \"{}\", \"n_heads\": {}, \"n_kv_heads\": {}, \"head_dim\": {}, "
                      "\"context\": {}, \"kv_bytes\": {}, \"best_us\": {:.3f}, \"mean_us\": {:.3f}, "
                      "\"best_gbps\": {:.3f}}}",
                      a.shape, a.n_heads, a.n_kv_heads, a.head_dim, a.context, a.kv.bytes, a.kv.best_seconds * 1e6,
                      a.kv.mean_seconds * 1e6, a.kv.best_gbps());
  }
  o << "], \"dist\": [";
  for (size_t i = 0; i < r.dist.size(); ++i) {
    const dist_point& d = r.dist[i];
    o << (i ? ", " : "")
      << text::format("{{\"context\": {}, \"dist_us\": {:.3f}, \"dist_bytes\": {}, \"heads_us\": {:.3f}, "
                      "\"heads_bytes\": {}, \"move_us\": {:.3f}, \"move_bytes\": {}}}",
                      d.context, d.dist_attention.seconds_per_step * 1e6, d.dist_attention.bytes_per_step,
                      d.head_split.seconds_per_step * 1e6, d.head_split.bytes_per_step,
                      d.move_kv.seconds_per_step * 1e6, d.move_kv.bytes_per_step);
  }
  o << text::format("], \"decode_model\": \"{}\", \"decode\": [", r.decode_model);
  for (size_t i = 0; i < r.decode.size(); ++i)
    o << (i ? ", " : "")
      << text::format("{{\"batch\": {}, \"tokens_per_second\": {:.3f}}}", r.decode[i].batch,
                      r.decode[i].tokens_per_second());
  const runtime_figure& f = r.runtime;
  o << text::format("], \"runtime\": {{\"measured\": {}, \"context\": {}, \"pools\": {}, \"moved_bytes\": {}, "
                    "\"move_seconds\": {:.6f}, \"moves_intact\": {}, \"ids_equal\": {}, "
                    "\"one_pool_tokens_per_second\": {:.3f}, \"spread_tokens_per_second\": {:.3f}, "
                    "\"spread_bytes_per_step\": {}}}",
                    f.measured, f.context, f.pools, f.moved_bytes, f.move_seconds, f.moves_intact, f.ids_equal(),
                    f.one_pool.tokens_per_second(), f.spread.tokens_per_second(),
                    f.spread.remote_bytes / uint64_t(std::max(1, f.spread.decode_steps)));
  o << text::format(", \"seconds\": {:.3f}}}\n", r.seconds);
  return o.str();
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
