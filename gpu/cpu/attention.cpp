#include "gpu/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu/cpu/simd.hpp"

namespace illm::gpu::cpu {

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

/// Blocks accumulated before a chunk is folded into the running total.
constexpr int chunk_blocks = 32;

inline const float* kv_run(const kv_layer_view& kv, uint32_t block, size_t offset, int kv_head) {
  return static_cast<const float*>(kv.base) + size_t(block) * kv.block_stride + offset +
         size_t(kv_head) * kv.head_stride;
}

/// NV vectors of a row (the last `tail` lanes wide): acc = acc * scale + sum_t p[t * p_stride] v[t].
template <int NV>
inline void scale_add_span(float* acc, float scale, const float* p, int p_stride, int n, const float* v, int hd,
                           int tail) {
  f32x16 r[NV];
  for (int j = 0; j < NV - 1; ++j) r[j] = load16(acc + j * lanes) * scale;
  r[NV - 1] = load_partial16(acc + (NV - 1) * lanes, tail) * scale;
  for (int t = 0; t < n; ++t) {
    const float w = p[t * p_stride];
    const float* vt = v + size_t(t) * hd;
    for (int j = 0; j < NV - 1; ++j) r[j] += w * load16(vt + j * lanes);
    r[NV - 1] += w * load_partial16(vt + (NV - 1) * lanes, tail);
  }
  for (int j = 0; j < NV - 1; ++j) store16(acc + j * lanes, r[j]);
  store_partial16(acc + (NV - 1) * lanes, r[NV - 1], tail);
}

/// acc[0, hd) = acc * scale + sum over t < n of p[t * p_stride] * v[t] (V rows hd apart), in spans of
/// up to four vectors kept in registers while the keys go by.
inline void scale_add_values(float* acc, float scale, const float* p, int p_stride, int n, const float* v, int hd) {
  for (int d0 = 0; d0 < hd; d0 += 4 * lanes) {
    const int width = std::min(4 * lanes, hd - d0);
    const int nv = (width + lanes - 1) / lanes, tail = width - (nv - 1) * lanes;
    switch (nv) {
      case 1: scale_add_span<1>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 2: scale_add_span<2>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 3: scale_add_span<3>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      default: scale_add_span<4>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
    }
  }
}

inline float dot(const float* a, const float* b, int n) {
  f32x16 acc{};
  int d = 0;
  for (; d + lanes <= n; d += lanes) acc += load16(a + d) * load16(b + d);
  if (d < n) acc += load_partial16(a + d, n - d) * load_partial16(b + d, n - d);
  return reduce_add(acc);
}

/// Softmax state of up to 16 rows: the running total and the chunk being accumulated.
struct tile_state {
  int rows, hd;
  float *total_m, *total_e, *chunk_m, *chunk_e;  // [16] each
  float *total_acc, *chunk_acc;                  // [rows][hd] each
  float *q_t, *p;                                // [hd][16] scaled queries by lane; [16 keys][16 rows]

  tile_state(attention_scratch& s, int rows_, int hd_) : rows(rows_), hd(hd_) {
    s.floats.resize(4 * size_t(lanes) + 2 * size_t(tile_rows) * hd + size_t(hd) * lanes + size_t(lanes) * lanes);
    float* f = s.floats.data();
    total_m = f;
    total_e = f + lanes;
    chunk_m = f + 2 * lanes;
    chunk_e = f + 3 * lanes;
    total_acc = f + 4 * lanes;
    chunk_acc = total_acc + size_t(tile_rows) * hd;
    q_t = chunk_acc + size_t(tile_rows) * hd;
    p = q_t + size_t(hd) * lanes;
    std::fill(total_m, total_m + lanes, neg_inf);
    std::fill(total_e, total_e + lanes, 0.0f);
    std::fill(total_acc, total_acc + size_t(rows) * hd, 0.0f);
  }

  void start_chunk() {
    std::fill(chunk_m, chunk_m + lanes, neg_inf);
    std::fill(chunk_e, chunk_e + lanes, 0.0f);
    std::fill(chunk_acc, chunk_acc + size_t(rows) * hd, 0.0f);
  }

  /// Folds the chunk into the total (the DistAttention merge of two partials).
  void fold_chunk() {
    for (int r = 0; r < rows; ++r) {
      if (chunk_e[r] == 0.0f) continue;
      const float top = std::max(total_m[r], chunk_m[r]);
      const float a = total_e[r] == 0.0f ? 0.0f : std::exp(total_m[r] - top), b = std::exp(chunk_m[r] - top);
      total_e[r] = total_e[r] * a + chunk_e[r] * b;
      float* acc = total_acc + size_t(r) * hd;
      const float* add = chunk_acc + size_t(r) * hd;
      for (int d = 0; d < hd; ++d) acc[d] = acc[d] * a + add[d] * b;
      total_m[r] = top;
    }
  }
};

/// Where row r of a tile lives: its query token and head.
struct row_map {
  int t0, group, kv_head, r0;
  int token(int r) const { return t0 + (r0 + r) / group; }
  int head(int r) const { return kv_head * group + (r0 + r) % group; }
};

/// Few rows (decode): each row's 16 scores are dot products over head_dim.
void accumulate_rows(const attention_args& a, const row_map& map, int b0, int b1, tile_state& st) {
  const int hd = st.hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  int max_pos = 0;
  for (int r = 0; r < st.rows; ++r) max_pos = std::max(max_pos, a.q_pos[map.token(r)]);
  for (int c0 = b0; c0 < b1; c0 += chunk_blocks) {
    st.start_chunk();
    for (int b = c0; b < std::min(b1, c0 + chunk_blocks); ++b) {
      const int32_t pos0 = a.block_pos[b];
      if (pos0 > max_pos) continue;
      const float* k = kv_run(a.kv, a.blocks[b], a.kv.k_offset, map.kv_head);
      const float* v = kv_run(a.kv, a.blocks[b], a.kv.v_offset, map.kv_head);
      if (b + 1 < b1) {
        __builtin_prefetch(kv_run(a.kv, a.blocks[b + 1], a.kv.k_offset, map.kv_head));
        __builtin_prefetch(kv_run(a.kv, a.blocks[b + 1], a.kv.v_offset, map.kv_head));
      }
      for (int r = 0; r < st.rows; ++r) {
        const int n_valid = std::min(kv_block_tokens, a.q_pos[map.token(r)] - pos0 + 1);
        if (n_valid <= 0) continue;
        const float* q = a.q + size_t(map.token(r)) * a.q_ld + size_t(map.head(r)) * hd;
        float scores[lanes];
        std::fill(scores, scores + lanes, neg_inf);
        for (int t = 0; t < n_valid; ++t) scores[t] = dot(q, k + size_t(t) * hd, hd) * scale;
        const f32x16 s = load16(scores);
        const float top = std::max(st.chunk_m[r], reduce_max(s));
        const float correction = st.chunk_e[r] == 0.0f ? 0.0f : std::exp(st.chunk_m[r] - top);
        const f32x16 p = exp16(s - top);
        store16(st.p, p);
        st.chunk_e[r] = st.chunk_e[r] * correction + reduce_add(p);
        st.chunk_m[r] = top;
        scale_add_values(st.chunk_acc + size_t(r) * hd, correction, st.p, 1, n_valid, v, hd);
      }
    }
    st.fold_chunk();
  }
}

/// Many rows (prefill, GQA): rows sit in vector lanes, so one key's scores for every row are one
/// vector, built from the transposed, pre-scaled queries with one FMA per dimension.
void accumulate_lanes(const attention_args& a, const row_map& map, int b0, int b1, tile_state& st) {
  const int hd = st.hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  int32_t row_pos_array[lanes];
  int max_pos = 0;
  for (int r = 0; r < lanes; ++r) {
    row_pos_array[r] = r < st.rows ? a.q_pos[map.token(r)] : -1;  // padding lanes see no key
    max_pos = std::max(max_pos, row_pos_array[r]);
    const float* q = r < st.rows ? a.q + size_t(map.token(r)) * a.q_ld + size_t(map.head(r)) * hd : nullptr;
    for (int d = 0; d < hd; ++d) st.q_t[size_t(d) * lanes + r] = q ? q[d] * scale : 0.0f;
  }
  i32x16 row_pos;
  std::memcpy(&row_pos, row_pos_array, sizeof row_pos);

  for (int c0 = b0; c0 < b1; c0 += chunk_blocks) {
    st.start_chunk();
    f32x16 chunk_m = load16(st.chunk_m), chunk_e = load16(st.chunk_e);
    for (int b = c0; b < std::min(b1, c0 + chunk_blocks); ++b) {
      const int32_t pos0 = a.block_pos[b];
      if (pos0 > max_pos) continue;
      const float* k = kv_run(a.kv, a.blocks[b], a.kv.k_offset, map.kv_head);
      const float* v = kv_run(a.kv, a.blocks[b], a.kv.v_offset, map.kv_head);
      const int n_keys = std::min(kv_block_tokens, max_pos - pos0 + 1);
      f32x16 scores[lanes];
      for (int t = 0; t < n_keys; t += 4) {  // rows t..t+3 of a block always exist
        f32x16 s0{}, s1{}, s2{}, s3{};
        const float* k0 = k + size_t(t) * hd;
        for (int d = 0; d < hd; ++d) {
          const f32x16 qd = load16(st.q_t + size_t(d) * lanes);
          s0 += qd * k0[d];
          s1 += qd * k0[hd + d];
          s2 += qd * k0[2 * hd + d];
          s3 += qd * k0[3 * hd + d];
        }
        scores[t] = s0;
        scores[t + 1] = s1;
        scores[t + 2] = s2;
        scores[t + 3] = s3;
      }
      f32x16 block_max = splat16(neg_inf);
      for (int t = 0; t < n_keys; ++t) {
        scores[t] = row_pos >= pos0 + t ? scores[t] : splat16(neg_inf);  // causal mask per lane
        block_max = max16(block_max, scores[t]);
      }
      const f32x16 top = max16(chunk_m, block_max);
      const f32x16 safe_top = top == neg_inf ? f32x16{} : top;  // rows that have seen no key yet
      const f32x16 correction = exp16(chunk_m - safe_top);
      f32x16 sum{};
      for (int t = 0; t < n_keys; ++t) {
        const f32x16 p = exp16(scores[t] - safe_top);
        sum += p;
        store16(st.p + size_t(t) * lanes, p);
      }
      chunk_e = chunk_e * correction + sum;
      chunk_m = top;
      float corrections[lanes];
      store16(corrections, correction);
      for (int r = 0; r < st.rows; ++r)
        if (row_pos_array[r] >= pos0)
          scale_add_values(st.chunk_acc + size_t(r) * hd, corrections[r], st.p + r, lanes, n_keys, v, hd);
    }
    store16(st.chunk_m, chunk_m);
    store16(st.chunk_e, chunk_e);
    st.fold_chunk();
  }
}

}  // namespace

void attend_tile(const attention_args& a, int kv_head, int t0, int t1, int b0, int b1, const partial_out& out,
                 attention_scratch& scratch) {
  const int group = a.shape.n_heads / a.shape.n_kv_heads, hd = a.shape.head_dim;
  const int rows = (t1 - t0) * group;
  for (int r0 = 0; r0 < rows; r0 += tile_rows) {
    const row_map map{t0, group, kv_head, r0};
    tile_state st(scratch, std::min(tile_rows, rows - r0), hd);
    if (st.rows >= 4)
      accumulate_lanes(a, map, b0, b1, st);
    else
      accumulate_rows(a, map, b0, b1, st);
    for (int r = 0; r < st.rows; ++r) {
      const size_t row = size_t(map.token(r)) * a.shape.n_heads + map.head(r);
      out.m[row] = st.total_m[r];
      out.e[row] = st.total_e[r];
      std::copy(st.total_acc + size_t(r) * hd, st.total_acc + size_t(r + 1) * hd, out.ma + row * hd);
    }
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
