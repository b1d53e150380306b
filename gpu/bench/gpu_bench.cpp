// illm-gpu-bench's measurements. Each part sets up its own device memory, fills it (seeded), warms up,
// then times its calls with CUDA events on the backend's stream.
#include "gpu/bench/gpu_bench.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

#include "gpu/bench/bench_engine.hpp"
#include "gpu/cuda/cuda_check.hpp"
#include "gpu/cuda/read_bandwidth.cuh"
#include "gpu/engine.hpp"
#include "gpu/half.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/model_config.hpp"
#include "gpu/text.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

using bench_clock = std::chrono::steady_clock;

constexpr int dist_pool_count = 4;
constexpr int head_dim = 128;

double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

void report(const gpu_bench_options& o, std::string_view what) {
  if (o.progress) o.progress(what);
}

/// CUDA events around groups of calls on the backend's stream.
class call_timer {
 public:
  explicit call_timer(cuda_backend& dev) : dev_(dev) {
    if (cudaEventCreate(&start_) != cudaSuccess || cudaEventCreate(&end_) != cudaSuccess) cudaGetLastError();
  }
  ~call_timer() {
    if (start_) cudaEventDestroy(start_);
    if (end_) cudaEventDestroy(end_);
  }
  call_timer(const call_timer&) = delete;
  call_timer& operator=(const call_timer&) = delete;

  /// `samples` timings of `per_sample` back-to-back calls fn(i) (i counts every call), after `warmup`
  /// untimed calls; a call's time is its sample's over per_sample.
  result<timed_figure> run(uint64_t bytes, int warmup, int samples, int per_sample,
                           const std::function<status(int)>& fn) {
    int i = 0;
    for (; i < warmup; ++i) ILLM_RETURN_IF_ERROR(fn(i));
    ILLM_RETURN_IF_ERROR(dev_.synchronize());
    timed_figure out{bytes, samples * per_sample, INFINITY, 0};
    for (int s = 0; s < samples; ++s) {
      ILLM_RETURN_IF_ERROR(check(cudaEventRecord(start_, dev_.stream()), "cudaEventRecord"));
      for (int k = 0; k < per_sample; ++k) ILLM_RETURN_IF_ERROR(fn(i++));
      ILLM_RETURN_IF_ERROR(check(cudaEventRecord(end_, dev_.stream()), "cudaEventRecord"));
      ILLM_RETURN_IF_ERROR(check(cudaEventSynchronize(end_), "cudaEventSynchronize"));
      float ms = 0;
      ILLM_RETURN_IF_ERROR(check(cudaEventElapsedTime(&ms, start_, end_), "cudaEventElapsedTime"));
      const double per_call = double(ms) / 1e3 / per_sample;
      out.best_seconds = std::min(out.best_seconds, per_call);
      out.mean_seconds += per_call / samples;
    }
    return out;
  }

 private:
  cuda_backend& dev_;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A value in [-1, 1) for one logical KV element, the same whichever pool or layout holds it.
float kv_value(uint64_t seed, int64_t pos, int kv, int head, int d) {
  const uint64_t h = mix64(seed ^ mix64(((uint64_t(pos) * 2 + uint64_t(kv)) * 4096 + uint64_t(head)) * 512 + d));
  return float(h >> 40) / float(1 << 23) - 1.0f;
}

/// Device memory of `floats` floats holding `host`.
result<device_ptr> device_floats(backend& dev, const std::vector<float>& host) {
  device_ptr p = make_device_buffer(dev, host.size() * sizeof(float));
  if (!p) return status{status_code::out_of_memory, "bench buffer"};
  ILLM_RETURN_IF_ERROR(dev.upload(p.get(), host.data(), host.size() * sizeof(float)));
  return p;
}

template <class T>
result<device_ptr> device_words(backend& dev, const std::vector<T>& host) {
  static_assert(sizeof(T) == 4);
  device_ptr p = make_device_buffer(dev, std::max<size_t>(1, host.size()) * 4);
  if (!p) return status{status_code::out_of_memory, "bench buffer"};
  ILLM_RETURN_IF_ERROR(dev.upload(p.get(), host.data(), host.size() * 4));
  return p;
}

std::vector<float> seeded_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// ---- a. Memory ------------------------------------------------------------------------------------------

status measure_memory(cuda_backend& dev, const gpu_bench_options& o, gpu_bench_result& out) {
  size_t free_bytes = 0, total_bytes = 0;
  ILLM_RETURN_IF_ERROR(check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  const uint64_t bytes = o.quick ? (uint64_t(64) << 20) : std::min<uint64_t>(uint64_t(4) << 30, free_bytes / 4) & ~15ull;
  device_ptr buffer = make_device_buffer(dev, bytes), sink = make_device_buffer(dev, 16);
  if (!buffer || !sink) return {status_code::out_of_memory, "memory bandwidth buffer"};
  ILLM_RETURN_IF_ERROR(check(cudaMemsetAsync(buffer.get(), 1, bytes, dev.stream()), "cudaMemset"));
  call_timer timer(dev);
  report(o, "memory read bandwidth");
  auto read = timer.run(bytes, 2, o.quick ? 2 : 10, 1, [&](int) {
    return check(read_bandwidth(buffer.get(), bytes, dev.info().sm_count, static_cast<uint4*>(sink.get()),
                                dev.stream()),
                 "read kernel");
  });
  if (!read.is_ok()) return read.error();
  out.read = read.value();
  report(o, "memory copy bandwidth");
  const uint64_t half = bytes / 2;
  char* base = static_cast<char*>(buffer.get());
  auto copy = timer.run(2 * half, 2, o.quick ? 2 : 10, 1, [&](int) { return dev.copy(base + half, base, half); });
  if (!copy.is_ok()) return copy.error();
  out.copy = copy.value();
  return status::ok();
}

// ---- b. Decode MicroAttention bandwidth -----------------------------------------------------------------

status measure_shape(cuda_backend& dev, const gpu_bench_options& o, const std::string& preset,
                     std::vector<int> contexts, gpu_bench_result& out) {
  auto config = preset_config(preset);
  if (!config.is_ok()) return config.error();
  const attention_shape shape = config->attention();
  const kv_layout layout{1, shape.n_kv_heads, shape.head_dim, dtype::f16};
  size_t free_bytes = 0, total_bytes = 0;
  ILLM_RETURN_IF_ERROR(check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
  while (!contexts.empty() &&
         uint64_t(blocks_for_tokens(contexts.back())) * layout.block_bytes() > free_bytes * 3 / 4) {
    out.notes.push_back(text::format("{} at {} tokens left out: its KV does not fit in free device memory", preset,
                                     contexts.back()));
    contexts.pop_back();
  }
  if (contexts.empty()) return status::ok();
  const uint32_t n_blocks = blocks_for_tokens(contexts.back());
  auto pool = kv_pool::create(dev, layout, n_blocks);
  if (!pool.is_ok()) return pool.error();
  ILLM_RETURN_IF_ERROR(fill_pool(dev, pool.value(), o.seed));
  // Blocks in a seeded order, as a paged pool hands them out; consecutive calls read disjoint sets
  // when the pool has room, so that the L2 cache does not serve a call from the previous one.
  std::vector<uint32_t> order(n_blocks);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(o.seed));
  auto q = device_floats(dev, seeded_floats(size_t(shape.n_heads) * shape.head_dim, o.seed + 1));
  device_ptr m = make_device_buffer(dev, sizeof(float) * shape.n_heads), e = make_device_buffer(dev, sizeof(float) * shape.n_heads),
             ma = make_device_buffer(dev, sizeof(float) * shape.n_heads * shape.head_dim);
  if (!q.is_ok() || !m || !e || !ma) return {status_code::out_of_memory, "attention bench buffers"};
  call_timer timer(dev);
  for (int context : contexts) {
    report(o, text::format("decode MicroAttention, {} at {} tokens", preset, context));
    const uint32_t nb = blocks_for_tokens(context);
    const uint32_t sets = std::clamp<uint32_t>(n_blocks / nb, 1, 8);
    std::vector<uint32_t> ids(size_t(sets) * nb);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = order[i % order.size()];
    std::vector<int32_t> block_pos(nb), q_pos = {context - 1};
    for (uint32_t b = 0; b < nb; ++b) block_pos[b] = int32_t(b) * kv_block_tokens;
    auto d_ids = device_words(dev, ids);
    auto d_pos = device_words(dev, block_pos);
    auto d_q_pos = device_words(dev, q_pos);
    if (!d_ids.is_ok() || !d_pos.is_ok() || !d_q_pos.is_ok()) return {status_code::out_of_memory, "block lists"};
    const uint64_t bytes = uint64_t(context) * 2 * shape.n_kv_heads * shape.head_dim * 2;
    // About 8 GB read per figure; samples of back-to-back calls reading ~4 GB (~1 ms), so that the host's
    // preparation of a call overlaps the previous call's kernels, as in the engine's steps.
    const int per_sample = o.quick ? 1 : int(std::clamp<uint64_t>((uint64_t(4) << 30) / bytes, 1, 64));
    const int samples = o.quick ? 2 : int(std::clamp<uint64_t>((uint64_t(8) << 30) / (bytes * per_sample), 5, 50));
    const auto* all_ids = static_cast<const uint32_t*>(d_ids->get());
    auto figure = timer.run(bytes, 2, samples, per_sample, [&](int i) {
      return dev.micro_attention(shape, static_cast<const float*>(q->get()), size_t(shape.n_heads) * shape.head_dim,
                                 static_cast<const int32_t*>(d_q_pos->get()), 1, pool->layer_view(0),
                                 all_ids + size_t(i % int(sets)) * nb, static_cast<const int32_t*>(d_pos->get()),
                                 int(nb), static_cast<float*>(m.get()), static_cast<float*>(e.get()),
                                 static_cast<float*>(ma.get()));
    });
    if (!figure.is_ok()) return figure.error();
    out.attention.push_back({preset, shape.n_heads, shape.n_kv_heads, shape.head_dim, context, figure.value()});
  }
  return status::ok();
}

// ---- c. DistAttention and its alternatives ------------------------------------------------------------

/// Host image of `n` blocks of `layout` whose kv heads are the model's [head0, head0 + n_kv_heads): block i
/// of the image holds logical block logical[i].
std::vector<uint16_t> kv_image(const kv_layout& layout, const std::vector<uint32_t>& logical, int head0,
                               uint64_t seed) {
  std::vector<uint16_t> image(layout.block_elements() * logical.size());
  for (size_t i = 0; i < logical.size(); ++i)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < layout.n_kv_heads; ++h)
        for (int t = 0; t < kv_block_tokens; ++t)
          for (int d = 0; d < layout.head_dim; ++d) {
            const size_t at = i * layout.block_elements() + (kv == 0 ? layout.k_offset(0) : layout.v_offset(0)) +
                              size_t(h) * layout.head_stride() + size_t(t) * layout.head_dim + d;
            image[at] = float_to_f16(kv_value(seed, int64_t(logical[i]) * kv_block_tokens + t, kv, head0 + h, d));
          }
  return image;
}

/// The pools of one comparison and the device memory of its step.
class dist_bench {
 public:
  dist_bench(cuda_backend& dev, const attention_shape& shape, uint64_t seed) : dev_(dev), shape_(shape), seed_(seed) {}

  status measure(int context, int steps, dist_point& out) {
    out.context = context;
    n_ = blocks_for_tokens(context);
    ILLM_RETURN_IF_ERROR(prepare_common(context));
    ILLM_RETURN_IF_ERROR(prepare_spread());
    ILLM_RETURN_IF_ERROR(prepare_heads());
    call_timer timer(dev_);
    std::vector<float> dist_out, heads_out, move_out;
    auto dist = timer.run(0, 2, steps, 1, [&](int) { return dist_step(); });
    if (!dist.is_ok()) return dist.error();
    ILLM_RETURN_IF_ERROR(read_output(dist_out));
    auto heads = timer.run(0, 2, steps, 1, [&](int) { return heads_step(); });
    if (!heads.is_ok()) return heads.error();
    ILLM_RETURN_IF_ERROR(read_output(heads_out));
    auto move = timer.run(0, 2, steps, 1, [&](int) { return move_step(); });
    if (!move.is_ok()) return move.error();
    ILLM_RETURN_IF_ERROR(read_output(move_out));
    const uint64_t q_bytes = uint64_t(shape_.n_heads) * shape_.head_dim * 4 + 4;
    const uint64_t partial_bytes = uint64_t(shape_.n_heads) * (2 + shape_.head_dim) * 4;
    const int part_heads = shape_.n_heads / dist_pool_count, part_kv = shape_.n_kv_heads / dist_pool_count;
    const uint64_t head_bytes = uint64_t(part_heads) * shape_.head_dim * 4 * 2 + 4 +
                                uint64_t(part_kv) * shape_.head_dim * 2 * 2;  // query + output + new K, V
    out.dist_attention = {dist->mean_seconds, (dist_pool_count - 1) * (q_bytes + partial_bytes)};
    out.head_split = {heads->mean_seconds, (dist_pool_count - 1) * head_bytes};
    out.move_kv = {move->mean_seconds, uint64_t(moves_) * layout_.block_bytes()};
    for (size_t i = 0; i < dist_out.size(); ++i)
      out.max_abs_difference = std::max({out.max_abs_difference, double(std::abs(dist_out[i] - heads_out[i])),
                                         double(std::abs(dist_out[i] - move_out[i]))});
    if (!(out.max_abs_difference <= 1e-3))
      return {status_code::internal,
              text::format("at {} tokens the three methods disagree by {}", context, out.max_abs_difference)};
    return status::ok();
  }

 private:
  status prepare_common(int context) {
    layout_ = {1, shape_.n_kv_heads, shape_.head_dim, dtype::f16};
    auto q = device_floats(dev_, seeded_floats(size_t(shape_.n_heads) * shape_.head_dim, seed_ + 7));
    auto q_pos = device_words(dev_, std::vector<int32_t>{context - 1});
    if (!q.is_ok() || !q_pos.is_ok()) return {status_code::out_of_memory, "dist bench query"};
    q_ = std::move(q).value();
    q_pos_ = std::move(q_pos).value();
    const size_t rows = size_t(shape_.n_heads);
    parts_ = make_device_buffer(dev_, sizeof(float) * dist_pool_count * rows * (2 + shape_.head_dim));
    out_ = make_device_buffer(dev_, sizeof(float) * rows * shape_.head_dim);
    if (!parts_ || !out_) return {status_code::out_of_memory, "dist bench partials"};
    return status::ok();
  }

  /// The request's blocks spread over the pools by a seeded shuffle; the owner (pool 0) has room for a
  /// copy of every block (moving the KV brings them all there).
  status prepare_spread() {
    spread_.clear();
    std::vector<std::vector<uint32_t>> logical(dist_pool_count);
    std::mt19937_64 rng(seed_);
    for (uint32_t b = 0; b < n_; ++b) logical[b == n_ - 1 ? 0 : rng() % dist_pool_count].push_back(b);
    moves_ = 0;
    std::vector<uint32_t> owner_ids(n_), owner_pos(n_);
    for (int p = 0; p < dist_pool_count; ++p) {
      spread_pool sp;
      const uint32_t capacity = p == 0 ? n_ : std::max<uint32_t>(1, uint32_t(logical[size_t(p)].size()));
      auto pool = kv_pool::create(dev_, layout_, capacity);
      if (!pool.is_ok()) return pool.error();
      sp.pool = std::make_unique<kv_pool>(std::move(pool).value());
      const auto image = kv_image(layout_, logical[size_t(p)], 0, seed_);
      ILLM_RETURN_IF_ERROR(dev_.upload(sp.pool->base(), image.data(), image.size() * 2));
      std::vector<uint32_t> ids(logical[size_t(p)].size());
      std::vector<int32_t> pos(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = uint32_t(i);
        pos[i] = int32_t(logical[size_t(p)][i]) * kv_block_tokens;
      }
      sp.count = int(ids.size());
      auto d_ids = device_words(dev_, ids);
      auto d_pos = device_words(dev_, pos);
      if (!d_ids.is_ok() || !d_pos.is_ok()) return {status_code::out_of_memory, "dist bench ids"};
      sp.ids = std::move(d_ids).value();
      sp.pos = std::move(d_pos).value();
      if (p > 0) {
        // Remote blocks land in the owner's free blocks (after its own), in this pool's order.
        for (size_t i = 0; i < ids.size(); ++i) {
          sp.copy_src.push_back(uint32_t(i));
          sp.copy_dst.push_back(uint32_t(logical[0].size()) + moves_ + uint32_t(i));
        }
        moves_ += uint32_t(ids.size());
      }
      spread_.push_back(std::move(sp));
    }
    // The owner's list after the moves: its own blocks, then the copies, with their positions.
    std::vector<uint32_t> ids;
    std::vector<int32_t> pos;
    for (int p = 0; p < dist_pool_count; ++p)
      for (size_t i = 0; i < logical[size_t(p)].size(); ++i) {
        ids.push_back(uint32_t(ids.size()));
        pos.push_back(int32_t(logical[size_t(p)][i]) * kv_block_tokens);
      }
    auto d_ids = device_words(dev_, ids);
    auto d_pos = device_words(dev_, pos);
    if (!d_ids.is_ok() || !d_pos.is_ok()) return {status_code::out_of_memory, "dist bench ids"};
    moved_ids_ = std::move(d_ids).value();
    moved_pos_ = std::move(d_pos).value();
    return status::ok();
  }

  /// Pool g holds every block of kv heads [g * kv / 4, (g + 1) * kv / 4).
  status prepare_heads() {
    heads_.clear();
    const int part_kv = shape_.n_kv_heads / dist_pool_count;
    const kv_layout part{1, part_kv, shape_.head_dim, dtype::f16};
    std::vector<uint32_t> logical(n_);
    std::iota(logical.begin(), logical.end(), 0u);
    std::vector<int32_t> pos(n_);
    for (uint32_t b = 0; b < n_; ++b) pos[b] = int32_t(b) * kv_block_tokens;
    auto d_ids = device_words(dev_, logical);
    auto d_pos = device_words(dev_, pos);
    if (!d_ids.is_ok() || !d_pos.is_ok()) return {status_code::out_of_memory, "head split ids"};
    head_ids_ = std::move(d_ids).value();
    head_pos_ = std::move(d_pos).value();
    for (int g = 0; g < dist_pool_count; ++g) {
      auto pool = kv_pool::create(dev_, part, n_);
      if (!pool.is_ok()) return pool.error();
      heads_.push_back(std::make_unique<kv_pool>(std::move(pool).value()));
      const auto image = kv_image(part, logical, g * part_kv, seed_);
      ILLM_RETURN_IF_ERROR(dev_.upload(heads_.back()->base(), image.data(), image.size() * 2));
    }
    return status::ok();
  }

  float* part(int p, int kind) const {  // kind 0: m, 1: e, 2: ma of partial p
    const size_t rows = size_t(shape_.n_heads);
    float* base = static_cast<float*>(parts_.get());
    if (kind < 2) return base + size_t(kind) * dist_pool_count * rows + size_t(p) * rows;
    return base + 2 * dist_pool_count * rows + size_t(p) * rows * shape_.head_dim;
  }

  status dist_step() {
    for (int p = 0; p < dist_pool_count; ++p) {
      const spread_pool& sp = spread_[size_t(p)];
      ILLM_RETURN_IF_ERROR(dev_.micro_attention(shape_, q(), size_t(shape_.n_heads) * shape_.head_dim, q_pos(), 1,
                                                sp.pool->layer_view(0), words<uint32_t>(sp.ids),
                                                words<int32_t>(sp.pos), sp.count, part(p, 0), part(p, 1),
                                                part(p, 2)));
    }
    return dev_.merge(part(0, 0), part(0, 1), part(0, 2), dist_pool_count, 1, shape_.n_heads, shape_.head_dim, out(),
                      size_t(shape_.n_heads) * shape_.head_dim, nullptr);
  }

  status heads_step() {
    const attention_shape part_shape{shape_.n_heads / dist_pool_count, shape_.n_kv_heads / dist_pool_count,
                                     shape_.head_dim};
    const size_t q_cols = size_t(part_shape.n_heads) * shape_.head_dim;
    for (int g = 0; g < dist_pool_count; ++g) {
      // Partial g of the spread's partial buffer is free here: use its m, e, ma for the group's heads.
      ILLM_RETURN_IF_ERROR(dev_.micro_attention(part_shape, q() + g * q_cols, size_t(shape_.n_heads) * shape_.head_dim,
                                                q_pos(), 1, heads_[size_t(g)]->layer_view(0),
                                                words<uint32_t>(head_ids_), words<int32_t>(head_pos_), int(n_),
                                                part(g, 0), part(g, 1), part(g, 2)));
      ILLM_RETURN_IF_ERROR(dev_.merge(part(g, 0), part(g, 1), part(g, 2), 1, 1, part_shape.n_heads, shape_.head_dim,
                                      out() + g * q_cols, size_t(shape_.n_heads) * shape_.head_dim, nullptr));
    }
    return status::ok();
  }

  status move_step() {
    const kv_pool& owner = *spread_[0].pool;
    for (int p = 1; p < dist_pool_count; ++p) {
      const spread_pool& sp = spread_[size_t(p)];
      ILLM_RETURN_IF_ERROR(dev_.copy_blocks(owner.base(), sp.copy_dst.data(), sp.pool->base(), sp.copy_src.data(),
                                            int(sp.copy_src.size()), layout_.block_bytes()));
    }
    ILLM_RETURN_IF_ERROR(dev_.micro_attention(shape_, q(), size_t(shape_.n_heads) * shape_.head_dim, q_pos(), 1,
                                              owner.layer_view(0), words<uint32_t>(moved_ids_),
                                              words<int32_t>(moved_pos_), int(n_), part(0, 0), part(0, 1), part(0, 2)));
    return dev_.merge(part(0, 0), part(0, 1), part(0, 2), 1, 1, shape_.n_heads, shape_.head_dim, out(),
                      size_t(shape_.n_heads) * shape_.head_dim, nullptr);
  }

  status read_output(std::vector<float>& host) {
    host.resize(size_t(shape_.n_heads) * shape_.head_dim);
    return dev_.download(host.data(), out_.get(), host.size() * sizeof(float));
  }

  const float* q() const { return static_cast<const float*>(q_.get()); }
  const int32_t* q_pos() const { return static_cast<const int32_t*>(q_pos_.get()); }
  float* out() const { return static_cast<float*>(out_.get()); }
  template <class T>
  static const T* words(const device_ptr& p) {
    return static_cast<const T*>(p.get());
  }

  struct spread_pool {
    std::unique_ptr<kv_pool> pool;
    device_ptr ids, pos;
    int count = 0;
    std::vector<uint32_t> copy_src, copy_dst;  // moving the KV: this pool's blocks to the owner's
  };

  cuda_backend& dev_;
  attention_shape shape_;
  uint64_t seed_;
  kv_layout layout_;
  uint32_t n_ = 0, moves_ = 0;
  device_ptr q_, q_pos_, parts_, out_, moved_ids_, moved_pos_, head_ids_, head_pos_;
  std::vector<spread_pool> spread_;
  std::vector<std::unique_ptr<kv_pool>> heads_;
};

status measure_dist(cuda_backend& dev, const gpu_bench_options& o, gpu_bench_result& out) {
  const std::string preset = o.quick ? "llama3-8b" : "llama2-7b";
  auto config = preset_config(preset);
  if (!config.is_ok()) return config.error();
  out.dist_shape = preset;
  out.pools = dist_pool_count;
  const attention_shape shape = config->attention();
  if (shape.n_kv_heads % dist_pool_count != 0)
    return {status_code::invalid_argument, text::format("{} kv heads do not split over {} pools", shape.n_kv_heads,
                                                        dist_pool_count)};
  for (int context : o.quick ? std::vector<int>{300} : std::vector<int>{4096, 16384, 65536}) {
    report(o, text::format("DistAttention and its alternatives at {} tokens", context));
    dist_bench bench(dev, shape, o.seed);
    dist_point point;
    ILLM_RETURN_IF_ERROR(bench.measure(context, o.quick ? 2 : 20, point));
    out.dist.push_back(point);
  }
  return status::ok();
}

// ---- d. Decode throughput ----------------------------------------------------------------------------

/// The model of parts d and e: llama2-7b (its first o.layers layers) with synthetic fp16 weights and fp16 KV.
result<std::unique_ptr<engine>> decode_engine(cuda_backend& dev, const gpu_bench_options& o, gpu_bench_result& out) {
  auto config = preset_config(o.quick ? "tiny-gqa" : "llama2-7b");
  if (!config.is_ok()) return config.error();
  const int full_layers = config->n_layers;
  if (!o.quick) config->n_layers = std::clamp(o.layers, 1, full_layers);
  out.decode_model = text::format("{} ({} of {} layers), synthetic fp16 weights, fp16 KV",
                                  o.quick ? "tiny-gqa" : "llama2-7b", config->n_layers, full_layers);
  report(o, "synthetic weights for " + out.decode_model);
  const auto t0 = bench_clock::now();
  auto weights = synthetic_weights(config.value(), o.seed);
  if (!weights.is_ok()) return weights.error();
  auto halves = convert_weights(weights.value(), dtype::f16);
  if (!halves.is_ok()) return halves.error();
  weights = status{status_code::invalid_argument, "converted to f16"};  // the fp32 copy's memory back first
  auto shared = std::make_shared<const model_weights>(std::move(halves).value());
  auto eng = engine::create(shared, dev, {512, 256, dtype::f16});
  out.weights_seconds = seconds_since(t0);
  return eng;
}

status measure_decode(cuda_backend& dev, engine& eng, const gpu_bench_options& o, gpu_bench_result& out) {
  for (int batch : o.quick ? std::vector<int>{1, 4} : std::vector<int>{1, 8, 32, 64, 128, 256}) {
    report(o, text::format("decode at batch {}", batch));
    auto figure = measure_decode_throughput(eng, dev, batch, o.seed);
    if (!figure.is_ok()) return figure.error();
    out.decode.push_back({batch, figure->tokens, figure->seconds});
  }
  return status::ok();
}

}  // namespace

status fill_pool(cuda_backend& dev, const kv_pool& pool, uint64_t seed) {
  const size_t bytes = size_t(pool.total_blocks()) * pool.layout().block_bytes();
  const size_t chunk = std::min(bytes, size_t(64) << 20);
  std::vector<float> values = seeded_floats(chunk / 2, seed);
  std::vector<uint16_t> halves(values.size());
  convert_floats(values.data(), values.size(), dtype::f16, halves.data());
  char* base = static_cast<char*>(pool.base());
  ILLM_RETURN_IF_ERROR(dev.upload(base, halves.data(), chunk));
  for (size_t at = chunk; at < bytes; at += chunk) ILLM_RETURN_IF_ERROR(dev.copy(base + at, base, std::min(chunk, bytes - at)));
  return dev.synchronize();
}

result<gpu_bench_result> run_gpu_bench(const gpu_bench_options& o) {
  const auto t0 = bench_clock::now();
  auto made = cuda_backend::create({o.device, false});
  if (!made.is_ok()) return made.error();
  cuda_backend& dev = *made.value();
  gpu_bench_result out;
  out.device = dev.info();
#if ILLM_CUDA_EMULATION
  out.emulated = true;
#endif
  ILLM_RETURN_IF_ERROR(measure_memory(dev, o, out));
  const std::vector<int> contexts =
      o.quick ? std::vector<int>{256, 1024} : std::vector<int>{4096, 16384, 65536, 262144, 1048576};
  for (const char* preset : {"llama2-7b", "llama3-8b"})
    ILLM_RETURN_IF_ERROR(measure_shape(dev, o, preset, contexts, out));
  ILLM_RETURN_IF_ERROR(measure_dist(dev, o, out));
  auto eng = decode_engine(dev, o, out);
  if (!eng.is_ok()) return eng.error();
  ILLM_RETURN_IF_ERROR(measure_decode(dev, *eng.value(), o, out));
  ILLM_RETURN_IF_ERROR(measure_runtime(dev, *eng.value(), o, out));
  out.seconds = seconds_since(t0);
  return out;
}


}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
