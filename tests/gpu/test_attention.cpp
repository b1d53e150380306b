// DistAttention is exact: MicroAttention over random partitions of a request's blocks (empty parts and
// a partial last block included), merged, equals an fp64 softmax over the whole context, per head
// within max|out - ref| / max|ref| <= 1e-5, for head_dim 32..128, GQA 1..8, contexts 1 to 100K; with a sliding
// window (a query sees its last `window` positions) and sink logits (one per head, in the denominator only).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/kv_pool.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

struct attention_case {
  int head_dim, group, n_kv_heads, context, n_q, n_pools;
  float q_scale;    // larger: peakier softmax
  int window = 0;   // keys a query sees, itself included (0: all before it)
  bool sinks = false;
};

/// Runs one case on `device`: returns the worst per-head error against fp64.
double worst_head_error(gpu::backend& device, const attention_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int hd = c.head_dim, n_heads = c.group * c.n_kv_heads;
  const gpu::kv_layout layout{1, c.n_kv_heads, hd, gpu::dtype::f32};
  const uint32_t n_blocks = gpu::blocks_for_tokens(c.context);
  std::vector<gpu::kv_pool> pools;
  for (int p = 0; p < c.n_pools; ++p) pools.push_back(std::move(gpu::kv_pool::create(device, layout, n_blocks).value()));

  // The context, kept in plain arrays for the reference: k, v [context][n_kv_heads][hd].
  std::vector<float> k(size_t(c.context) * c.n_kv_heads * hd), v(k.size());
  for (auto& x : k) x = u(rng);
  for (auto& x : v) x = u(rng);
  // Each block goes to a random pool; the last pool stays empty when there are several.
  const int used_pools = c.n_pools > 1 ? c.n_pools - 1 : 1;
  std::vector<std::vector<uint32_t>> blocks(c.n_pools);
  std::vector<std::vector<int32_t>> block_pos(c.n_pools);
  for (uint32_t b = 0; b < n_blocks; ++b) {
    const int p = int(rng() % uint32_t(used_pools));
    const uint32_t phys = pools[p].allocate({1, 0}).value();
    auto* data = static_cast<float*>(pools[p].block_data(phys));
    // Slots past the context hold NaN: attention must never read them.
    std::fill(data, data + layout.block_elements(), std::numeric_limits<float>::quiet_NaN());
    for (int t = 0; t < gpu::kv_block_tokens && int(b) * 16 + t < c.context; ++t)
      for (int h = 0; h < c.n_kv_heads; ++h)
        for (int d = 0; d < hd; ++d) {
          const size_t src = (size_t(b * 16 + t) * c.n_kv_heads + h) * hd + d;
          data[layout.k_offset(0) + h * layout.head_stride() + t * hd + d] = k[src];
          data[layout.v_offset(0) + h * layout.head_stride() + t * hd + d] = v[src];
        }
    blocks[p].push_back(phys);
    block_pos[p].push_back(int32_t(b) * 16);
  }
  // Queries at the last n_q positions (a prefill chunk, or one decode token).
  std::vector<float> q(size_t(c.n_q) * n_heads * hd);
  for (auto& x : q) x = u(rng) * c.q_scale;
  std::vector<int32_t> q_pos(c.n_q);
  for (int t = 0; t < c.n_q; ++t) q_pos[t] = c.context - c.n_q + t;

  const size_t rows = size_t(c.n_q) * n_heads;
  std::vector<float> m(c.n_pools * rows), e(c.n_pools * rows), ma(c.n_pools * rows * hd), out(rows * hd);
  std::vector<float> sinks(static_cast<size_t>(n_heads));
  for (auto& x : sinks) x = 3.0f * u(rng);
  const gpu::attention_shape shape{n_heads, c.n_kv_heads, hd, c.window};
  for (int p = 0; p < c.n_pools; ++p)
    REQUIRE(device
                .micro_attention(shape, q.data(), size_t(n_heads) * hd, q_pos.data(), c.n_q,
                                 pools[p].layer_view(0), blocks[p].data(), block_pos[p].data(), int(blocks[p].size()),
                                 m.data() + p * rows, e.data() + p * rows, ma.data() + p * rows * hd)
                .is_ok());
  REQUIRE(device.merge(m.data(), e.data(), ma.data(), c.n_pools, c.n_q, n_heads, hd, out.data(), size_t(n_heads) * hd,
                       c.sinks ? sinks.data() : nullptr)
              .is_ok());

  double worst = 0;
  std::vector<double> scores, ref(hd);
  for (int t = 0; t < c.n_q; ++t)
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / c.group;
      const float* qh = q.data() + (size_t(t) * n_heads + h) * hd;
      scores.assign(size_t(q_pos[t]) + 1, 0.0);
      const int first = c.window > 0 ? std::max(0, q_pos[t] - c.window + 1) : 0;
      double top = c.sinks ? double(sinks[size_t(h)]) : -INFINITY;
      for (int i = first; i <= q_pos[t]; ++i) {
        double s = 0;
        for (int d = 0; d < hd; ++d) s += double(qh[d]) * k[(size_t(i) * c.n_kv_heads + kvh) * hd + d];
        scores[i] = s / std::sqrt(double(hd));
        top = std::max(top, scores[i]);
      }
      double total = c.sinks ? std::exp(double(sinks[size_t(h)]) - top) : 0.0;
      std::fill(ref.begin(), ref.end(), 0.0);
      for (int i = first; i <= q_pos[t]; ++i) {
        const double p = std::exp(scores[i] - top);
        total += p;
        for (int d = 0; d < hd; ++d) ref[d] += p * v[(size_t(i) * c.n_kv_heads + kvh) * hd + d];
      }
      double ref_max = 0, err_max = 0;
      for (int d = 0; d < hd; ++d) {
        ref[d] /= total;
        ref_max = std::max(ref_max, std::abs(ref[d]));
        err_max = std::max(err_max, std::abs(ref[d] - out[(size_t(t) * n_heads + h) * hd + d]));
      }
      worst = std::max(worst, err_max / ref_max);
    }
  return worst;
}

/// Random cases of each context and GQA group; with `windows`, the cases of even groups slide (windows of 1 to 200
/// positions) and have sinks.
void check_cases(gpu::backend& device, const std::vector<int>& contexts, int max_kv_heads, uint32_t seed,
                 bool windows = false) {
  std::mt19937 rng(seed);
  for (int context : contexts)
    for (int group : {1, 2, 4, 8}) {
      attention_case c{32 + 2 * int(rng() % 49), group, 1 + int(rng() % uint32_t(max_kv_heads)), context,
                       context > 5000 ? 1 + int(rng() % 2) : 1 + int(rng() % uint32_t(std::min(context, 37))),
                       1 + int(rng() % 5), rng() % 2 ? 1.0f : 6.0f};
      if (windows && group % 2 == 0) {
        c.window = 1 + int(rng() % 200);
        c.sinks = true;
      }
      const double err = worst_head_error(device, c, rng());
      CHECK_MESSAGE(err <= 1e-5, "head_dim ", c.head_dim, " group ", group, " kv heads ", c.n_kv_heads, " context ",
                    context, " queries ", c.n_q, " pools ", c.n_pools, " window ", c.window, " sinks ", c.sinks,
                    " error ", err);
    }
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("distributed attention matches fp64 on short contexts") {
    check_cases(test::cpu_device(), {1, 2, 15, 16, 17, 33, 250, 1000}, 3, 1);
  }

  TEST_CASE("sliding windows and sink logits match fp64, on both cpu backends") {
    gpu::cpu::cpu_backend reference(2, gpu::cpu::cpu_mode::reference);
    for (gpu::backend* device : {&test::cpu_device(), static_cast<gpu::backend*>(&reference)})
      check_cases(*device, {1, 17, 130, 300, 1000}, 3, 4, true);
  }

  TEST_CASE("distributed attention matches fp64 on long contexts") {
    check_cases(test::cpu_device(), {4099, 30000}, 2, 2);
  }

  TEST_CASE("reference-mode attention matches fp64") {
    gpu::cpu::cpu_backend reference(2, gpu::cpu::cpu_mode::reference);
    check_cases(reference, {1, 17, 1000}, 2, 3);
  }

  TEST_CASE("merging nothing gives zeros and empty partials are neutral") {
    gpu::backend& device = test::cpu_device();
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> m = {-inf, 0.5f}, e = {0.0f, 2.0f}, ma = {9, 9, 1, 3}, out(2);
    REQUIRE(device.merge(m.data(), e.data(), ma.data(), 2, 1, 1, 2, out.data(), 2, nullptr).is_ok());
    CHECK(out[0] == doctest::Approx(0.5));
    CHECK(out[1] == doctest::Approx(1.5));
    REQUIRE(device.merge(m.data(), e.data(), ma.data(), 1, 1, 1, 2, out.data(), 2, nullptr).is_ok());
    CHECK(out[0] == 0.0f);
    CHECK(out[1] == 0.0f);
  }
}

TEST_SUITE("slow") {
  TEST_CASE("distributed attention matches fp64 at 100K tokens") {
    check_cases(test::cpu_device(), {100000}, 1, 4);
  }
}
