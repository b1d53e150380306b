// `illm bench engine`, part c: DistAttention (one MicroAttention partial per pool, merged at the owner) against
// splitting a layer by heads over the pools and against moving the remote KV to the owner: time per decode step
// and bytes moved, and the three outputs compared.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>

#include "gpu/batcher.hpp"
#include "gpu/bench/bench_support.hpp"
#include "gpu/generate.hpp"
#include "gpu/sampler.hpp"
#include "gpu/cpu/simd.hpp"
#include "gpu/pool_router.hpp"
#include "gpu/text.hpp"

namespace illm::gpu::bench_detail {

namespace {

constexpr int dist_contexts[] = {4096, 16384, 65536};
/// KV bytes the timed steps of one DistAttention context attend in all (sets the step count).
constexpr uint64_t dist_bytes_per_context = uint64_t(2) << 30;

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
                           shape_.head_dim, out.data(), out.size(), nullptr);
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
                           out.data(), out.size(), nullptr);
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
                                           out.data() + q0, out.size(), nullptr));
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


}  // namespace

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

}  // namespace illm::gpu::bench_detail
