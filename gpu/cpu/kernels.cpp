#include "gpu/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu/cpu/simd.hpp"

namespace illm::gpu::cpu {

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

/// Blocks accumulated before a chunk is folded into the running total.
constexpr int chunk_blocks = 32;

inline float dot(const float* a, const float* b, int n) {
  f32x16 acc{};
  int d = 0;
  for (; d + lanes <= n; d += lanes) acc += load16(a + d) * load16(b + d);
  if (d < n) acc += load_partial16(a + d, n - d) * load_partial16(b + d, n - d);
  return reduce_add(acc);
}

/// M rows of x against one row of w at a time: the weights stream through memory in order, which the
/// hardware prefetcher follows best (interleaving several rows halves the bandwidth), and each weight
/// is read once for all rows of x. Two accumulators per row hide the FMA latency.
template <int M>
void gemv_rows(const float* x, size_t ldx, int k, const float* w, size_t ldw, int j0, int j1, float* y, size_t ldy,
               bool accumulate) {
  for (int j = j0; j < j1; ++j) {
    const float* row = w + size_t(j) * ldw;
    f32x16 even[M] = {}, odd[M] = {};
    int d = 0;
    for (; d + 2 * lanes <= k; d += 2 * lanes) {
      const f32x16 w0 = load16(row + d), w1 = load16(row + d + lanes);
      for (int i = 0; i < M; ++i) {
        even[i] += w0 * load16(x + size_t(i) * ldx + d);
        odd[i] += w1 * load16(x + size_t(i) * ldx + d + lanes);
      }
    }
    for (; d < k; d += lanes) {
      const int n = std::min(lanes, k - d);
      const f32x16 w0 = load_partial16(row + d, n);
      for (int i = 0; i < M; ++i) even[i] += w0 * load_partial16(x + size_t(i) * ldx + d, n);
    }
    for (int i = 0; i < M; ++i) {
      float& out = y[size_t(i) * ldy + j];
      out = (accumulate ? out : 0.0f) + reduce_add(even[i] + odd[i]);
    }
  }
}

}  // namespace

void gemv(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y, size_t ldy,
          bool accumulate) {
  for (int i = 0; i < m; i += 4) {
    const float* xi = x + size_t(i) * ldx;
    float* yi = y + size_t(i) * ldy;
    switch (std::min(4, m - i)) {
      case 1: gemv_rows<1>(xi, ldx, k, w, ldw, j0, j1, yi, ldy, accumulate); break;
      case 2: gemv_rows<2>(xi, ldx, k, w, ldw, j0, j1, yi, ldy, accumulate); break;
      case 3: gemv_rows<3>(xi, ldx, k, w, ldw, j0, j1, yi, ldy, accumulate); break;
      default: gemv_rows<4>(xi, ldx, k, w, ldw, j0, j1, yi, ldy, accumulate); break;
    }
  }
}

void gemm_reference(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                    size_t ldy, bool accumulate) {
  for (int i = 0; i < m; ++i)
    for (int j = j0; j < j1; ++j) {
      float sum = 0;
      for (int d = 0; d < k; ++d) sum += x[size_t(i) * ldx + d] * w[size_t(j) * ldw + d];
      float& out = y[size_t(i) * ldy + j];
      out = (accumulate ? out : 0.0f) + sum;
    }
}

void rmsnorm_row(const float* x, const float* weight, int n, float eps, float* y) {
  const float mean_square = dot(x, x, n) / float(n);
  const float inv = 1.0f / std::sqrt(mean_square + eps);
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void rope_table_row(int32_t pos, int head_dim, float theta, float* table) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double angle = double(pos) * std::pow(double(theta), -2.0 * i / head_dim);
    table[2 * i] = float(std::cos(angle));
    table[2 * i + 1] = float(std::sin(angle));
  }
}

void rope_row(float* x, int n_heads, int head_dim, const float* table) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + size_t(h) * head_dim;
    for (int i = 0; i < head_dim / 2; ++i) {
      const float c = table[2 * i], s = table[2 * i + 1];
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * c - b * s;
      v[2 * i + 1] = a * s + b * c;
    }
  }
}

void silu_mul_row(const float* gate, const float* up, int n, float* out) {
  int i = 0;
  for (; i + lanes <= n; i += lanes) {
    const f32x16 g = load16(gate + i);
    store16(out + i, g / (1.0f + exp16(-g)) * load16(up + i));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

namespace {

/// Running softmax state of one query row: max, exp-sum, and the exp-weighted sum of V.
struct row_state {
  float* m;
  float* e;
  float* acc;
};

/// Folds `from` into `into` (the DistAttention merge of two partials), leaving `from` untouched.
inline void fold(row_state into, row_state from, int head_dim) {
  if (*from.e == 0.0f) return;
  const float top = std::max(*into.m, *from.m);
  const float a = *into.e == 0.0f ? 0.0f : std::exp(*into.m - top), b = std::exp(*from.m - top);
  *into.e = *into.e * a + *from.e * b;
  for (int d = 0; d < head_dim; ++d) into.acc[d] = into.acc[d] * a + from.acc[d] * b;
  *into.m = top;
}

inline void reset(row_state s, int head_dim) {
  *s.m = neg_inf;
  *s.e = 0.0f;
  std::fill(s.acc, s.acc + head_dim, 0.0f);
}

/// Adds one block's keys [0, n_valid) with the given scores to a row's state.
inline void accumulate_block(row_state s, f32x16 scores, int n_valid, const float* v, int head_dim) {
  const float block_max = reduce_max(scores);
  const float top = std::max(*s.m, block_max);
  const f32x16 p = exp16(scores - top);
  if (top != *s.m && *s.e != 0.0f) {
    const float correction = std::exp(*s.m - top);
    *s.e *= correction;
    for (int d = 0; d < head_dim; ++d) s.acc[d] *= correction;
  }
  *s.m = top;
  *s.e += reduce_add(p);
  float weights[lanes];
  store16(weights, p);
  for (int t = 0; t < n_valid; ++t) {
    const float w = weights[t];
    const float* vt = v + size_t(t) * head_dim;
    for (int d = 0; d < head_dim; ++d) s.acc[d] += w * vt[d];
  }
}

/// Scores of one query row against a block's keys [0, n_valid), scaled; -inf beyond n_valid.
inline f32x16 block_scores(const float* q, const float* k, const float* k_transposed, int n_valid, int head_dim,
                           float scale) {
  f32x16 s{};
  if (k_transposed) {
    for (int d = 0; d < head_dim; ++d) s += q[d] * load16(k_transposed + size_t(d) * lanes);
  } else {
    float dots[lanes] = {};
    for (int t = 0; t < n_valid; ++t) dots[t] = dot(q, k + size_t(t) * head_dim, head_dim);
    s = load16(dots);
  }
  s *= scale;
  const i32x16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  return lane < n_valid ? s : splat16(neg_inf);
}

inline const float* kv_run(const kv_layer_view& kv, uint32_t block, size_t offset, int kv_head) {
  return static_cast<const float*>(kv.base) + size_t(block) * kv.block_stride + offset +
         size_t(kv_head) * kv.head_stride;
}

}  // namespace

void attend_tile(const attention_args& a, int kv_head, int t0, int t1, int b0, int b1, const partial_out& out,
                 attention_scratch& scratch) {
  const int group = a.shape.n_heads / a.shape.n_kv_heads, hd = a.shape.head_dim;
  const int rows = (t1 - t0) * group;
  const float scale = 1.0f / std::sqrt(float(hd));
  // State per row: [total m, total e, chunk m, chunk e] then total acc and chunk acc.
  const size_t row_floats = 4 + 2 * size_t(hd);
  scratch.state.resize(size_t(rows) * row_floats);
  auto total = [&](int r) {
    float* base = scratch.state.data() + size_t(r) * row_floats;
    return row_state{base, base + 1, base + 4};
  };
  auto chunk = [&](int r) {
    float* base = scratch.state.data() + size_t(r) * row_floats;
    return row_state{base + 2, base + 3, base + 4 + hd};
  };
  // Several rows share each block: transposing K once makes every score row one vector op per dim.
  const bool transpose = rows >= 4;
  if (transpose) scratch.k_transposed.resize(size_t(hd) * lanes);
  int t_max_pos = a.q_pos[t0];
  for (int t = t0; t < t1; ++t) t_max_pos = std::max(t_max_pos, a.q_pos[t]);

  for (int r = 0; r < rows; ++r) reset(total(r), hd);
  for (int c0 = b0; c0 < b1; c0 += chunk_blocks) {
    for (int r = 0; r < rows; ++r) reset(chunk(r), hd);
    for (int b = c0; b < std::min(b1, c0 + chunk_blocks); ++b) {
      const int32_t pos0 = a.block_pos[b];
      if (pos0 > t_max_pos) continue;
      const float* k = kv_run(a.kv, a.blocks[b], a.kv.k_offset, kv_head);
      const float* v = kv_run(a.kv, a.blocks[b], a.kv.v_offset, kv_head);
      if (b + 1 < b1) {
        __builtin_prefetch(kv_run(a.kv, a.blocks[b + 1], a.kv.k_offset, kv_head));
        __builtin_prefetch(kv_run(a.kv, a.blocks[b + 1], a.kv.v_offset, kv_head));
      }
      const int block_valid = std::min(kv_block_tokens, t_max_pos - pos0 + 1);
      if (transpose)
        for (int t = 0; t < block_valid; ++t)
          for (int d = 0; d < hd; ++d) scratch.k_transposed[size_t(d) * lanes + t] = k[size_t(t) * hd + d];
      for (int r = 0; r < rows; ++r) {
        const int t = t0 + r / group, h = kv_head * group + r % group;
        const int n_valid = std::min(block_valid, a.q_pos[t] - pos0 + 1);
        if (n_valid <= 0) continue;
        const float* q = a.q + size_t(t) * a.q_ld + size_t(h) * hd;
        const f32x16 s = block_scores(q, k, transpose ? scratch.k_transposed.data() : nullptr, n_valid, hd, scale);
        accumulate_block(chunk(r), s, n_valid, v, hd);
      }
    }
    for (int r = 0; r < rows; ++r) fold(total(r), chunk(r), hd);
  }
  for (int r = 0; r < rows; ++r) {
    const int t = t0 + r / group, h = kv_head * group + r % group;
    const size_t row = size_t(t) * a.shape.n_heads + h;
    const row_state s = total(r);
    out.m[row] = *s.m;
    out.e[row] = *s.e;
    std::copy(s.acc, s.acc + hd, out.ma + row * hd);
  }
}

void attend_reference(const attention_args& a, int kv_head, int t0, int t1, const partial_out& out) {
  const int group = a.shape.n_heads / a.shape.n_kv_heads, hd = a.shape.head_dim;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> scores;
  std::vector<const float*> values;
  for (int t = t0; t < t1; ++t)
    for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      const float* q = a.q + size_t(t) * a.q_ld + size_t(h) * hd;
      scores.clear();
      values.clear();
      for (int b = 0; b < a.n_blocks; ++b)
        for (int i = 0; i < kv_block_tokens && a.block_pos[b] + i <= a.q_pos[t]; ++i) {
          const float* k = kv_run(a.kv, a.blocks[b], a.kv.k_offset, kv_head) + size_t(i) * hd;
          float s = 0;
          for (int d = 0; d < hd; ++d) s += q[d] * k[d];
          scores.push_back(s * scale);
          values.push_back(kv_run(a.kv, a.blocks[b], a.kv.v_offset, kv_head) + size_t(i) * hd);
        }
      const size_t row = size_t(t) * a.shape.n_heads + h;
      float m = neg_inf, e = 0;
      for (float s : scores) m = std::max(m, s);
      float* ma = out.ma + row * hd;
      std::fill(ma, ma + hd, 0.0f);
      for (size_t i = 0; i < scores.size(); ++i) {
        const float p = std::exp(scores[i] - m);
        e += p;
        for (int d = 0; d < hd; ++d) ma[d] += p * values[i][d];
      }
      out.m[row] = m;
      out.e[row] = e;
    }
}

namespace {

/// The largest m over parts for one row, and each part's weight exp(m_p - top) (0 for empty parts).
inline float part_weights(const float* m, const float* e, int n_parts, int n_rows, int r, float* weights) {
  float top = neg_inf;
  for (int p = 0; p < n_parts; ++p)
    if (e[size_t(p) * n_rows + r] != 0.0f) top = std::max(top, m[size_t(p) * n_rows + r]);
  for (int p = 0; p < n_parts; ++p) {
    const size_t i = size_t(p) * n_rows + r;
    weights[p] = e[i] == 0.0f ? 0.0f : std::exp(m[i] - top);
  }
  return top;
}

}  // namespace

void merge_rows(const float* m, const float* e, const float* ma, int n_parts, int n_rows, int n_heads, int head_dim,
                int r0, int r1, float* out, size_t out_ld) {
  std::vector<float> weights(static_cast<size_t>(n_parts));
  for (int r = r0; r < r1; ++r) {
    part_weights(m, e, n_parts, n_rows, r, weights.data());
    float total = 0;
    for (int p = 0; p < n_parts; ++p) total += e[size_t(p) * n_rows + r] * weights[p];
    float* o = out + size_t(r / n_heads) * out_ld + size_t(r % n_heads) * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    if (total == 0.0f) continue;  // no key seen at all: output zero
    for (int p = 0; p < n_parts; ++p) {
      if (weights[p] == 0.0f) continue;
      const float w = weights[p] / total;
      const float* part = ma + (size_t(p) * n_rows + r) * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] += w * part[d];
    }
  }
}

void combine_rows(const float* m, const float* e, const float* ma, int n_parts, int n_rows, int head_dim, int r0,
                  int r1, const partial_out& merged) {
  std::vector<float> weights(static_cast<size_t>(n_parts));
  for (int r = r0; r < r1; ++r) {
    const float top = part_weights(m, e, n_parts, n_rows, r, weights.data());
    float total = 0;
    float* o = merged.ma + size_t(r) * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (int p = 0; p < n_parts; ++p) {
      if (weights[p] == 0.0f) continue;
      total += e[size_t(p) * n_rows + r] * weights[p];
      const float* part = ma + (size_t(p) * n_rows + r) * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] += weights[p] * part[d];
    }
    merged.m[r] = top;
    merged.e[r] = total;
  }
}

}  // namespace illm::gpu::cpu
