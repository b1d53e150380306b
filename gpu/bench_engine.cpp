// `illm bench engine` measured: each part sets up its own memory, fills it with seeded values, warms
// up, then times a fixed amount of work and counts the tokens and bytes it handled.
#include "gpu/bench_engine.hpp"
#include "gpu/decode_rig.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>

#include "gpu/batcher.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/simd.hpp"
#include "gpu/generate.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/model_config.hpp"
#include "gpu/model_files.hpp"
#include "gpu/pool_router.hpp"
#include "gpu/sampler.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

using bench_clock = std::chrono::steady_clock;

constexpr int decode_batches[] = {1, 8, 32, 128};
constexpr int decode_prompt_tokens = 8;
constexpr int decode_warmup_steps = 4;
constexpr int prefill_tokens = 512;
constexpr int prefill_runs = 3;
constexpr int bandwidth_contexts[] = {1024, 4096, 16384, 65536};
constexpr int dist_contexts[] = {4096, 16384, 65536};
constexpr int dist_pool_count = 4;
constexpr const char* attention_preset = "llama2-7b";
constexpr uint64_t memory_buffer_bytes = uint64_t(1) << 30;
constexpr int memory_passes = 5;
/// KV bytes the timed MicroAttention calls of one context read in all (sets the call count).
constexpr uint64_t bandwidth_bytes_per_context = uint64_t(4) << 30;
/// KV bytes the timed steps of one DistAttention context attend in all (sets the step count).
constexpr uint64_t dist_bytes_per_context = uint64_t(2) << 30;

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

/// One block to fill: its data and the position of its first token.
struct block_fill {
  float* data = nullptr;
  int64_t pos0 = 0;
};

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

// ---- a. Decode and prefill -------------------------------------------------------------------------


int timed_decode_steps(int batch) {
  return batch <= 8 ? 64 : batch <= 32 ? 48 : 32;
}

/// True when every sequence has its whole prompt cached and one token pending: the next step decodes.
bool all_decoding(const std::vector<std::shared_ptr<sequence>>& seqs) {
  return std::all_of(seqs.begin(), seqs.end(), [](const auto& s) {
    return s->n_cached >= s->n_prompt && int(s->tokens.size()) - s->n_cached == 1;
  });
}

result<decode_figure> measure_decode(engine& eng, backend& device, int batch, uint64_t seed) {
  const int steps = timed_decode_steps(batch);
  const int tokens_per_seq = decode_prompt_tokens + 64 + decode_warmup_steps + steps;
  auto pool = kv_pool::create(device, eng.pool_layout(), uint32_t(batch) * blocks_for_tokens(tokens_per_seq));
  if (!pool.is_ok()) return pool.error();
  kv_pools view{{&pool.value()}, 0};
  spread_block_source source(view.by_id, seed);
  batcher runner(eng, source, {eng.options().max_batch_tokens, batch});
  uint64_t rng = seed;
  std::vector<std::shared_ptr<sequence>> seqs;
  for (int i = 0; i < batch; ++i) {
    seqs.push_back(
        bench_sequence(uint64_t(i) + 1, seeded_prompt(decode_prompt_tokens, eng.config().vocab_size, rng), 1 << 30));
    runner.add(seqs.back());
  }
  for (int i = 0; !all_decoding(seqs); ++i) {
    if (i > 64) return status{status_code::internal, text::format("batch {} never reached pure decode", batch)};
    ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
  }
  for (int i = 0; i < decode_warmup_steps; ++i) ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
  decode_figure out{batch, steps, 0, 0};
  const auto t0 = bench_clock::now();
  for (int i = 0; i < steps; ++i) {
    ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
    out.tokens += uint64_t(runner.last_step_decodes());
  }
  out.seconds = seconds_since(t0);
  for (const auto& s : seqs)
    if (s->finished() || s->preemptions > 0)
      return status{status_code::internal, text::format("batch {}: sequence {} stopped or was preempted", batch, s->id)};
  return out;
}

result<prefill_figure> measure_prefill(engine& eng, backend& device, uint64_t seed) {
  auto pool = kv_pool::create(device, eng.pool_layout(), blocks_for_tokens(prefill_tokens + 1));
  if (!pool.is_ok()) return pool.error();
  kv_pools view{{&pool.value()}, 0};
  spread_block_source source(view.by_id, seed);
  prefill_figure out{prefill_tokens, prefill_runs, 0};
  uint64_t rng = seed;
  for (int run = 0; run < prefill_runs; ++run) {
    // A fresh sequence on a fresh batcher: its KV starts empty; one new token retires it.
    batcher runner(eng, source, {prefill_tokens, 1});
    auto seq = bench_sequence(uint64_t(run) + 1, seeded_prompt(prefill_tokens, eng.config().vocab_size, rng), 1);
    runner.add(seq);
    const auto t0 = bench_clock::now();
    ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
    const double seconds = seconds_since(t0);
    if (runner.last_step_tokens() != prefill_tokens || !runner.idle())
      return status{status_code::internal, text::format("the prefill step processed {} of {} tokens",
                                                       runner.last_step_tokens(), prefill_tokens)};
    out.best_seconds = run == 0 ? seconds : std::min(out.best_seconds, seconds);
  }
  ILLM_RETURN_IF_ERROR(pool->check());
  return out;
}

// ---- b. MicroAttention bandwidth ---------------------------------------------------------------------

/// Sum of p[0, n), n a multiple of 64, through 4 independent 16-lane accumulators (bound by memory,
/// not by add latency).
float streaming_sum(const float* p, size_t n) {
  cpu::f32x16 a0{}, a1{}, a2{}, a3{};
  for (size_t i = 0; i < n; i += 4 * cpu::lanes) {
    a0 += cpu::load16(p + i);
    a1 += cpu::load16(p + i + cpu::lanes);
    a2 += cpu::load16(p + i + 2 * cpu::lanes);
    a3 += cpu::load16(p + i + 3 * cpu::lanes);
  }
  return cpu::reduce_add((a0 + a1) + (a2 + a3));
}

result<memory_figure> measure_memory(cpu::cpu_backend& device, uint64_t seed) {
  device_ptr buffer = make_device_buffer(device, memory_buffer_bytes);
  if (!buffer) return status{status_code::out_of_memory, "cannot allocate the memory bandwidth buffer"};
  auto* data = static_cast<float*>(buffer.get());
  // Chunks of 4 MiB: filled, then summed by whichever thread is free, into one padded sum per thread.
  const size_t n = memory_buffer_bytes / sizeof(float), chunk = size_t(1) << 20, stride = 16;
  device.pool().parallel_for(int64_t(n / chunk), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fill_seeded(mix64(seed + uint64_t(c)), data + size_t(c) * chunk, chunk);
  });
  memory_figure out{memory_buffer_bytes, device.threads(), memory_passes, 0};
  std::vector<float> sums(size_t(device.threads()) * stride);
  volatile float sink = 0;
  for (int pass = 0; pass < memory_passes; ++pass) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    const auto t0 = bench_clock::now();
    device.pool().parallel_for_dynamic(int64_t(n / chunk), [&](int64_t c, int thread) {
      sums[size_t(thread) * stride] += streaming_sum(data + size_t(c) * chunk, chunk);
    });
    const double seconds = seconds_since(t0);
    out.best_seconds = pass == 0 ? seconds : std::min(out.best_seconds, seconds);
    for (float s : sums) sink = sink + s;  // the sums are used: the reads cannot be skipped
  }
  return out;
}

/// Takes every block of `pool` as one request's, in order, and fills them; returns their ids.
result<std::vector<uint32_t>> fill_whole_pool(cpu::cpu_backend& device, kv_pool& pool, uint64_t seed) {
  std::vector<uint32_t> ids;
  std::vector<block_fill> fills;
  for (uint32_t i = 0; i < pool.total_blocks(); ++i) {
    auto block = pool.allocate({1, 0});
    if (!block.is_ok()) return block.error();
    ids.push_back(block.value());
    fills.push_back({static_cast<float*>(pool.block_data(block.value())), int64_t(i) * kv_block_tokens});
  }
  fill_blocks(device.pool(), pool.layout(), fills, 0, seed);
  return ids;
}

/// MicroAttention over contiguous windows of one large pool: consecutive calls read different blocks,
/// so short contexts do not hit the caches.
result<std::vector<attention_bandwidth_figure>> measure_attention_bandwidth(cpu::cpu_backend& device,
                                                                            const attention_shape& shape,
                                                                            uint64_t seed) {
  const kv_layout layout{1, shape.n_kv_heads, shape.head_dim, dtype::f32};
  const uint32_t total =
      blocks_for_tokens(*std::max_element(std::begin(bandwidth_contexts), std::end(bandwidth_contexts)));
  auto pool = kv_pool::create(device, layout, total);
  if (!pool.is_ok()) return pool.error();
  auto filled = fill_whole_pool(device, pool.value(), seed);
  if (!filled.is_ok()) return filled.error();
  const std::vector<uint32_t>& ids = filled.value();
  const size_t rows = size_t(shape.n_heads);
  std::vector<float> q(rows * shape.head_dim), m(rows), e(rows), ma(rows * shape.head_dim);
  fill_seeded(mix64(seed ^ 0x51), q.data(), q.size());
  std::vector<attention_bandwidth_figure> out;
  uint64_t window = 0;  // runs on across contexts
  for (int context : bandwidth_contexts) {
    const uint32_t n = blocks_for_tokens(context), windows = std::max(1u, total / n);
    const int32_t q_pos = context - 1;
    std::vector<int32_t> block_pos(n);
    for (uint32_t i = 0; i < n; ++i) block_pos[i] = int32_t(i) * kv_block_tokens;
    std::vector<uint32_t> blocks(size_t(windows) * n);
    for (uint32_t w = 0; w < windows; ++w)
      for (uint32_t i = 0; i < n; ++i) blocks[size_t(w) * n + i] = ids[(size_t(w) * n + i) % total];
    attention_bandwidth_figure f{context, 0, visible_kv_bytes(layout, block_pos, q_pos), 0};
    f.calls = int(std::clamp<uint64_t>(bandwidth_bytes_per_context / f.bytes_per_call, 3, 128));
    auto call = [&] {
      const uint32_t* window_blocks = blocks.data() + size_t(window++ % windows) * n;
      return device.micro_attention(shape, q.data(), q.size(), &q_pos, 1, pool->layer_view(0), window_blocks,
                                    block_pos.data(), int(n), m.data(), e.data(), ma.data());
    };
    ILLM_RETURN_IF_ERROR(call());  // warm-up
    for (int i = 0; i < f.calls; ++i) {
      const auto t0 = bench_clock::now();
      ILLM_RETURN_IF_ERROR(call());
      const double seconds = seconds_since(t0);
      f.seconds += seconds;
      f.best_seconds = i == 0 ? seconds : std::min(f.best_seconds, seconds);
    }
    ILLM_RETURN_IF_ERROR(check_finite(ma, "MicroAttention"));
    out.push_back(f);
  }
  return out;
}

// ---- c. DistAttention against splitting by heads and moving the KV ------------------------------------

/// The new token of a decode step: its query, key and value, all heads, and its position.
struct decode_token {
  std::vector<float> q, k, v;
  int32_t pos = 0;
};

decode_token seeded_token(const attention_shape& shape, int32_t pos, uint64_t seed) {
  decode_token t;
  t.q.resize(size_t(shape.n_heads) * shape.head_dim);
  t.k.resize(size_t(shape.n_kv_heads) * shape.head_dim);
  t.v.resize(t.k.size());
  t.pos = pos;
  fill_seeded(mix64(seed ^ 0x71), t.q.data(), t.q.size());
  fill_seeded(mix64(seed ^ 0x72), t.k.data(), t.k.size());
  fill_seeded(mix64(seed ^ 0x73), t.v.data(), t.v.size());
  return t;
}

/// Steps timed per method at a context: about dist_bytes_per_context of fp32 KV attended in all.
int dist_steps(const attention_shape& shape, int context) {
  const uint64_t bytes = uint64_t(context) * 2 * uint64_t(shape.n_kv_heads) * uint64_t(shape.head_dim) * 4;
  return int(std::clamp<uint64_t>(dist_bytes_per_context / bytes, 3, 16));
}

/// Times `steps` calls of `step` after one warm-up call; step adds the bytes it moves to `bytes`.
template <class Step>
result<attention_method_figure> time_steps(int steps, Step&& step) {
  uint64_t bytes = 0;
  ILLM_RETURN_IF_ERROR(step(bytes));
  attention_method_figure out{steps, 0, 0};
  const auto t0 = bench_clock::now();
  for (int i = 0; i < steps; ++i) ILLM_RETURN_IF_ERROR(step(out.bytes_moved));
  out.seconds = seconds_since(t0);
  return out;
}

/// Partials of one query over several pools, stacked as backend::merge reads them.
struct partials {
  std::vector<float> m, e, ma;
  size_t rows = 0;
  int head_dim = 0;
  partials(int parts, size_t n_rows, int hd)
      : m(size_t(parts) * n_rows), e(m.size()), ma(m.size() * size_t(hd)), rows(n_rows), head_dim(hd) {}
  float* m_of(size_t p) { return m.data() + p * rows; }
  float* e_of(size_t p) { return e.data() + p * rows; }
  float* ma_of(size_t p) { return ma.data() + p * rows * size_t(head_dim); }
};

/// The outputs the three methods computed at one context, to check that they agree.
struct dist_outputs {
  std::vector<float> dist, heads, move;
};

/// A request id whose newest block the spread puts in pool 0 (the owner writes new tokens locally).
uint64_t owner_local_request(const spread_block_source& source, uint32_t n_blocks) {
  uint64_t id = 1;
  while (source.preferred_pool(id, n_blocks - 1) != 0) ++id;
  return id;
}

/// DistAttention and moving the KV, on one set of pools: the request's blocks spread over them, the
/// owner (pool 0) sized to take in copies of every remote block.
class spread_bench {
 public:
  spread_bench(cpu::cpu_backend& device, const attention_shape& shape, uint64_t seed)
      : device_(device), shape_(shape), seed_(seed), layout_{1, shape.n_kv_heads, shape.head_dim, dtype::f32} {}

  status create_pools(uint32_t max_blocks) {
    for (int p = 0; p < dist_pool_count; ++p) {
      auto pool = kv_pool::create(device_, layout_, p == 0 ? max_blocks : max_blocks / dist_pool_count);
      if (!pool.is_ok()) return pool.error();
      pools_.push_back(std::make_unique<kv_pool>(std::move(pool).value()));
      view_.by_id.push_back(pools_.back().get());
    }
    return status::ok();
  }

  /// Measures both methods at `context`, leaving the pools empty again.
  status measure(int context, dist_attention_figure& figure, dist_outputs& outputs) {
    spread_block_source source(view_.by_id, seed_);
    sequence seq;
    ILLM_RETURN_IF_ERROR(spread_request(source, blocks_for_tokens(context), seq));
    const decode_token token = seeded_token(shape_, int32_t(context - 1), seed_);
    const int steps = dist_steps(shape_, context);
    auto dist = time_dist(seq, token, steps, outputs.dist);
    if (!dist.is_ok()) return dist.error();
    figure.dist_attention = dist.value();
    auto move = time_move(seq, token, steps, outputs.move);
    if (!move.is_ok()) return move.error();
    figure.move_kv = move.value();
    for (const block_ref& ref : seq.table) ILLM_RETURN_IF_ERROR(source.release(ref));
    for (const auto& pool : pools_) {
      ILLM_RETURN_IF_ERROR(pool->check());
      if (pool->used_blocks() != 0) return {status_code::internal, "a benchmark pool kept blocks"};
    }
    return status::ok();
  }

 private:
  /// Gives `seq` n blocks spread over the pools, its newest in the owner's, and fills them.
  status spread_request(spread_block_source& source, uint32_t n, sequence& seq) {
    seq.id = owner_local_request(source, n);
    std::vector<block_fill> fills;
    for (uint32_t i = 0; i < n; ++i) {
      auto ref = source.allocate(seq, i);
      if (!ref.is_ok()) return ref.error();
      seq.table.push_back(ref.value());
      fills.push_back(
          {static_cast<float*>(view_.by_id[ref->pool]->block_data(ref->block)), int64_t(i) * kv_block_tokens});
    }
    fill_blocks(device_.pool(), layout_, fills, 0, seed_);
    return status::ok();
  }

  /// Writes the new token's K and V into the owner's pool (its newest block is local).
  status store_token(const sequence& seq, const decode_token& token) {
    const block_ref& ref = seq.table[size_t(token.pos / kv_block_tokens)];
    if (ref.pool != 0) return {status_code::internal, "the newest block is not in the owner's pool"};
    const uint32_t slot = ref.block * kv_block_tokens + uint32_t(token.pos % kv_block_tokens);
    return device_.store_kv(token.k.data(), token.v.data(), token.k.size(), 1, shape_.n_kv_heads, shape_.head_dim,
                            view_.by_id[0]->layer_view(0), &slot);
  }

  /// One partial per pool (the owner's computed here, the others' through a pool_router), merged.
  result<attention_method_figure> time_dist(const sequence& seq, const decode_token& token, int steps,
                                            std::vector<float>& out) {
    std::vector<std::vector<uint32_t>> blocks(pools_.size());
    std::vector<std::vector<int32_t>> block_pos(pools_.size());
    for (size_t i = 0; i < seq.table.size(); ++i) {
      blocks[seq.table[i].pool].push_back(seq.table[i].block);
      block_pos[seq.table[i].pool].push_back(int32_t(i) * kv_block_tokens);
    }
    const size_t rows = size_t(shape_.n_heads);
    partials parts(int(pools_.size()), rows, shape_.head_dim);
    std::vector<remote_attention_job> jobs;
    for (uint32_t p = 1; p < pools_.size(); ++p)
      jobs.push_back({seq.id, 0, p, blocks[p], block_pos[p], token.q.data(), token.q.size(), &token.pos, 1,
                      parts.m_of(p), parts.e_of(p), parts.ma_of(p)});
    pool_router router(device_, view_, shape_);
    out.assign(rows * shape_.head_dim, 0.0f);
    return time_steps(steps, [&](uint64_t& bytes) -> status {
      ILLM_RETURN_IF_ERROR(store_token(seq, token));
      const uint64_t before = router.query_bytes() + router.partial_bytes();
      ILLM_RETURN_IF_ERROR(router.begin(0, jobs));
      ILLM_RETURN_IF_ERROR(device_.micro_attention(
          shape_, token.q.data(), token.q.size(), &token.pos, 1, view_.by_id[0]->layer_view(0), blocks[0].data(),
          block_pos[0].data(), int(blocks[0].size()), parts.m_of(0), parts.e_of(0), parts.ma_of(0)));
      ILLM_RETURN_IF_ERROR(router.finish(0));
      bytes += router.query_bytes() + router.partial_bytes() - before;
      return device_.merge(parts.m.data(), parts.e.data(), parts.ma.data(), int(pools_.size()), 1, shape_.n_heads,
                           shape_.head_dim, out.data(), out.size());
    });
  }

  /// Every remote block copied whole into the owner's pool each step, then one MicroAttention there.
  result<attention_method_figure> time_move(const sequence& seq, const decode_token& token, int steps,
                                            std::vector<float>& out) {
    kv_pool& owner = *view_.by_id[0];
    std::vector<uint32_t> blocks, copies;  // owner's blocks in logical order; copy destinations
    std::vector<std::pair<void*, const void*>> moves;
    std::vector<int32_t> block_pos;
    for (size_t i = 0; i < seq.table.size(); ++i) {
      const block_ref& ref = seq.table[i];
      block_pos.push_back(int32_t(i) * kv_block_tokens);
      if (ref.pool == 0) {
        blocks.push_back(ref.block);
        continue;
      }
      auto dst = owner.allocate({seq.id, 0});
      if (!dst.is_ok()) return dst.error();
      blocks.push_back(dst.value());
      copies.push_back(dst.value());
      moves.push_back({owner.block_data(dst.value()), view_.by_id[ref.pool]->block_data(ref.block)});
    }
    const size_t rows = size_t(shape_.n_heads), block_bytes = layout_.block_bytes();
    partials parts(1, rows, shape_.head_dim);
    out.assign(rows * shape_.head_dim, 0.0f);
    auto timed = time_steps(steps, [&](uint64_t& bytes) -> status {
      ILLM_RETURN_IF_ERROR(store_token(seq, token));
      for (const auto& [dst, src] : moves) {
        ILLM_RETURN_IF_ERROR(device_.copy(dst, src, block_bytes));
        bytes += block_bytes;
      }
      ILLM_RETURN_IF_ERROR(device_.micro_attention(shape_, token.q.data(), token.q.size(), &token.pos, 1,
                                                   owner.layer_view(0), blocks.data(), block_pos.data(),
                                                   int(blocks.size()), parts.m_of(0), parts.e_of(0), parts.ma_of(0)));
      return device_.merge(parts.m.data(), parts.e.data(), parts.ma.data(), 1, 1, shape_.n_heads, shape_.head_dim,
                           out.data(), out.size());
    });
    for (uint32_t b : copies) ILLM_RETURN_IF_ERROR(owner.release(b));
    return timed;
  }

  cpu::cpu_backend& device_;
  attention_shape shape_;
  uint64_t seed_;
  kv_layout layout_;
  std::vector<std::unique_ptr<kv_pool>> pools_;
  kv_pools view_;
};

/// Splitting by heads (tensor-parallel style): pool g holds every token of kv heads
/// [g * kv_per_pool, (g + 1) * kv_per_pool) and attends the query heads that read them. Pool 0 owns the
/// request: the other pools are sent their query heads and the new token's K and V, and send back
/// their heads' outputs.
class head_split_bench {
 public:
  head_split_bench(cpu::cpu_backend& device, const attention_shape& shape, uint64_t seed)
      : device_(device),
        shape_(shape),
        seed_(seed),
        part_shape_{shape.n_heads / dist_pool_count, shape.n_kv_heads / dist_pool_count, shape.head_dim},
        layout_{1, part_shape_.n_kv_heads, shape.head_dim, dtype::f32} {}

  status create_pools(uint32_t max_blocks) {
    if (shape_.n_kv_heads % dist_pool_count != 0)
      return {status_code::invalid_argument,
              text::format("{} kv heads do not split over {} pools", shape_.n_kv_heads, dist_pool_count)};
    for (int p = 0; p < dist_pool_count; ++p) {
      auto pool = kv_pool::create(device_, layout_, max_blocks);
      if (!pool.is_ok()) return pool.error();
      pools_.push_back(std::make_unique<kv_pool>(std::move(pool).value()));
    }
    return status::ok();
  }

  /// Measures the head split at `context`, leaving the pools empty again.
  status measure(int context, dist_attention_figure& figure, dist_outputs& outputs) {
    const uint32_t n = blocks_for_tokens(context);
    std::vector<std::vector<uint32_t>> blocks(pools_.size());
    std::vector<int32_t> block_pos;
    for (uint32_t i = 0; i < n; ++i) block_pos.push_back(int32_t(i) * kv_block_tokens);
    for (size_t g = 0; g < pools_.size(); ++g) {
      std::vector<block_fill> fills;
      for (uint32_t i = 0; i < n; ++i) {
        auto block = pools_[g]->allocate({1, 0});
        if (!block.is_ok()) return block.error();
        blocks[g].push_back(block.value());
        fills.push_back({static_cast<float*>(pools_[g]->block_data(block.value())), int64_t(i) * kv_block_tokens});
      }
      fill_blocks(device_.pool(), layout_, fills, int(g) * part_shape_.n_kv_heads, seed_);
    }
    const decode_token token = seeded_token(shape_, int32_t(context - 1), seed_);
    auto timed = time_heads(blocks, block_pos, token, dist_steps(shape_, context), outputs.heads);
    if (!timed.is_ok()) return timed.error();
    figure.head_split = timed.value();
    for (size_t g = 0; g < pools_.size(); ++g) {
      for (uint32_t b : blocks[g]) ILLM_RETURN_IF_ERROR(pools_[g]->release(b));
      ILLM_RETURN_IF_ERROR(pools_[g]->check());
    }
    return status::ok();
  }

 private:
  result<attention_method_figure> time_heads(const std::vector<std::vector<uint32_t>>& blocks,
                                             const std::vector<int32_t>& block_pos, const decode_token& token,
                                             int steps, std::vector<float>& out) {
    const int hd = shape_.head_dim, q_heads = part_shape_.n_heads, kv_heads = part_shape_.n_kv_heads;
    const uint64_t query_bytes = uint64_t(q_heads) * hd * sizeof(float) + sizeof(int32_t);
    const uint64_t kv_bytes = 2 * uint64_t(kv_heads) * hd * sizeof(float);
    const uint64_t output_bytes = uint64_t(q_heads) * hd * sizeof(float);
    partials parts(1, size_t(q_heads), hd);
    out.assign(size_t(shape_.n_heads) * hd, 0.0f);
    const uint32_t block = uint32_t(token.pos / kv_block_tokens), offset = uint32_t(token.pos % kv_block_tokens);
    return time_steps(steps, [&](uint64_t& bytes) -> status {
      for (size_t g = 0; g < pools_.size(); ++g) {
        if (g != 0) bytes += query_bytes + kv_bytes + output_bytes;
        const kv_layer_view view = pools_[g]->layer_view(0);
        const size_t kv0 = g * size_t(kv_heads) * hd, q0 = g * size_t(q_heads) * hd;
        const uint32_t slot = blocks[g][block] * kv_block_tokens + offset;
        ILLM_RETURN_IF_ERROR(
            device_.store_kv(token.k.data() + kv0, token.v.data() + kv0, token.k.size(), 1, kv_heads, hd, view, &slot));
        ILLM_RETURN_IF_ERROR(device_.micro_attention(part_shape_, token.q.data() + q0, token.q.size(), &token.pos, 1,
                                                     view, blocks[g].data(), block_pos.data(), int(block_pos.size()),
                                                     parts.m_of(0), parts.e_of(0), parts.ma_of(0)));
        ILLM_RETURN_IF_ERROR(device_.merge(parts.m.data(), parts.e.data(), parts.ma.data(), 1, 1, q_heads, hd,
                                           out.data() + q0, out.size()));
      }
      return status::ok();
    });
  }

  cpu::cpu_backend& device_;
  attention_shape shape_;
  uint64_t seed_;
  attention_shape part_shape_;
  kv_layout layout_;
  std::vector<std::unique_ptr<kv_pool>> pools_;
};

double max_abs_difference(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

result<std::vector<dist_attention_figure>> measure_dist_attention(cpu::cpu_backend& device,
                                                                  const attention_shape& shape, uint64_t seed,
                                                                  const bench_engine_options& options) {
  const uint32_t max_blocks = blocks_for_tokens(*std::max_element(std::begin(dist_contexts), std::end(dist_contexts)));
  std::vector<dist_attention_figure> figures;
  std::vector<dist_outputs> outputs;
  for (int context : dist_contexts) {
    figures.emplace_back();
    figures.back().context_tokens = context;
  }
  outputs.resize(figures.size());
  {  // One set of pools at a time keeps the peak near 3.5 GiB.
    spread_bench spread(device, shape, seed);
    ILLM_RETURN_IF_ERROR(spread.create_pools(max_blocks));
    for (size_t i = 0; i < figures.size(); ++i) {
      report(options, text::format("DistAttention and moving the KV at {} tokens", figures[i].context_tokens));
      ILLM_RETURN_IF_ERROR(spread.measure(figures[i].context_tokens, figures[i], outputs[i]));
    }
  }
  head_split_bench heads(device, shape, seed);
  ILLM_RETURN_IF_ERROR(heads.create_pools(max_blocks));
  for (size_t i = 0; i < figures.size(); ++i) {
    report(options, text::format("split by heads at {} tokens", figures[i].context_tokens));
    ILLM_RETURN_IF_ERROR(heads.measure(figures[i].context_tokens, figures[i], outputs[i]));
    ILLM_RETURN_IF_ERROR(check_finite(outputs[i].dist, "DistAttention"));
    figures[i].max_abs_difference = std::max(max_abs_difference(outputs[i].dist, outputs[i].heads),
                                             max_abs_difference(outputs[i].dist, outputs[i].move));
    if (!(figures[i].max_abs_difference <= 1e-3))
      return status{status_code::internal, text::format("at {} tokens the three methods disagree by {}",
                                                       figures[i].context_tokens, figures[i].max_abs_difference)};
  }
  return figures;
}

status measure_model(const bench_engine_options& options, cpu::cpu_backend& device, bench_engine_result& out) {
  report(options, text::format("loading {}", options.model));
  auto model = load_model(options.model);
  if (!model.is_ok()) return model.error();
  out.model = model->name;
  out.decode_prompt_tokens = decode_prompt_tokens;
  auto made = engine::create(model->weights, device, {prefill_tokens, 128});
  if (!made.is_ok()) return made.error();
  for (int batch : decode_batches) {
    report(options, text::format("decode at batch {}", batch));
    auto figure = measure_decode(*made.value(), device, batch, options.seed);
    if (!figure.is_ok()) return figure.error();
    out.decode.push_back(figure.value());
  }
  report(options, text::format("prefill of {} tokens", prefill_tokens));
  auto prefill = measure_prefill(*made.value(), device, options.seed);
  if (!prefill.is_ok()) return prefill.error();
  out.prefill = prefill.value();
  return status::ok();
}

status measure_attention(const bench_engine_options& options, cpu::cpu_backend& device, bench_engine_result& out) {
  auto config = preset_config(attention_preset);
  if (!config.is_ok()) return config.error();
  const attention_shape shape{config->n_heads, config->n_kv_heads, config->head_dim()};
  out.attention_model = attention_preset;
  out.n_heads = shape.n_heads;
  out.n_kv_heads = shape.n_kv_heads;
  out.head_dim = shape.head_dim;
  report(options, "memory read bandwidth");
  auto memory = measure_memory(device, options.seed);
  if (!memory.is_ok()) return memory.error();
  out.memory = memory.value();
  report(options, "MicroAttention bandwidth");
  auto attention = measure_attention_bandwidth(device, shape, options.seed);
  if (!attention.is_ok()) return attention.error();
  out.attention = std::move(attention).value();
  out.pools = dist_pool_count;
  auto dist = measure_dist_attention(device, shape, options.seed, options);
  if (!dist.is_ok()) return dist.error();
  out.dist = std::move(dist).value();
  return status::ok();
}

}  // namespace

result<decode_figure> measure_decode_throughput(engine& eng, backend& device, int batch, uint64_t seed) {
  return measure_decode(eng, device, batch, seed);
}

result<bench_engine_result> run_bench_engine(const bench_engine_options& options) {
  if (options.threads < 1 || options.threads > 1024)
    return status{status_code::invalid_argument, text::format("--threads {} is outside 1..1024", options.threads)};
  const auto t0 = bench_clock::now();
  cpu::cpu_backend device(options.threads);
  bench_engine_result out;
  out.backend = device.name();
  out.threads = device.threads();
  ILLM_RETURN_IF_ERROR(measure_model(options, device, out));
  ILLM_RETURN_IF_ERROR(measure_attention(options, device, out));
  out.seconds = seconds_since(t0);
  return out;
}

}  // namespace illm::gpu
