#include "gpu/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu/cpu/simd.hpp"
#include "gpu/cpu/typed_gemm.hpp"

namespace illm::gpu::cpu {

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

/// Blocks accumulated before a chunk is folded into the running total.
constexpr int chunk_blocks = 32;

/// Whether a key at position `key` is older than the window of a query at `query` (never without a window).
bool before_window(const attention_shape& shape, int key, int query) {
  return shape.window > 0 && key <= query - shape.window;
}

/// The first key of the block starting at pos0 that the window of a query at `query` reaches (0 without a window;
/// kv_block_tokens or more when none does).
int first_in_window(const attention_shape& shape, int pos0, int query) {
  return shape.window > 0 ? std::max(0, query - shape.window + 1 - pos0) : 0;
}

/// Reads the K or V runs of a pool layer as fp32: in place in an f32 pool; widened into a buffer of the reader's own
/// in a 16-bit pool (which the pointer read last points into until the next read).
class run_reader {
 public:
  run_reader(const kv_layer_view& kv, int head_dim) : kv_(kv), elements_(size_t(kv_block_tokens) * size_t(head_dim)) {
    if (kv.type != dtype::f32) buffer_.resize(elements_);
  }
  /// The run of kv head `kv_head` at `offset` (k_offset or v_offset) of `block`: 16 tokens x head_dim.
  const float* read(uint32_t block, size_t offset, int kv_head) {
    const size_t at = size_t(block) * kv_.block_stride + offset + size_t(kv_head) * kv_.head_stride;
    if (kv_.type == dtype::f32) return static_cast<const float*>(kv_.base) + at;
    widen(kv_.type, static_cast<const uint8_t*>(kv_.base) + at * dtype_bytes(kv_.type), int(elements_), buffer_.data());
    return buffer_.data();
  }

 private:
  const kv_layer_view& kv_;
  size_t elements_;
  std::vector<float> buffer_;
};

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
/// up to eight vectors kept in registers while the keys go by; with head_dim <= 128 each V row is read
/// once, straight through.
inline void scale_add_values(float* acc, float scale, const float* p, int p_stride, int n, const float* v, int hd) {
  for (int d0 = 0; d0 < hd; d0 += 8 * lanes) {
    const int width = std::min(8 * lanes, hd - d0);
    const int nv = (width + lanes - 1) / lanes, tail = width - (nv - 1) * lanes;
    switch (nv) {
      case 1: scale_add_span<1>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 2: scale_add_span<2>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 3: scale_add_span<3>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 4: scale_add_span<4>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 5: scale_add_span<5>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 6: scale_add_span<6>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      case 7: scale_add_span<7>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
      default: scale_add_span<8>(acc + d0, scale, p, p_stride, n, v + d0, hd, tail); break;
    }
  }
}

/// scores[t] = scale * q . k[t] for keys t < n (K rows hd apart). Keys are read one after another:
/// interleaving several rows looks faster on paper but breaks the hardware prefetcher's stream
/// (measured here: a third of the bandwidth). Two accumulators shorten the FMA chain.
inline void key_dots(const float* q, const float* k, int n, int hd, float scale, float* scores) {
  for (int t = 0; t < n; ++t) {
    const float* kt = k + size_t(t) * hd;
    f32x16 even{}, odd{};
    int d = 0;
    for (; d + 2 * lanes <= hd; d += 2 * lanes) {
      even += load16(q + d) * load16(kt + d);
      odd += load16(q + d + lanes) * load16(kt + d + lanes);
    }
    for (; d < hd; d += lanes) {
      const int width = std::min(lanes, hd - d);
      even += load_partial16(q + d, width) * load_partial16(kt + d, width);
    }
    scores[t] = reduce_add(even + odd) * scale;
  }
}

/// Softmax state of a set of query rows: the running total and the chunk being accumulated, plus the
/// lanes path's transposed queries and key weights.
struct tile_state {
  int rows, hd;
  float *total_m, *total_e, *chunk_m, *chunk_e;  // [padded rows] each
  float *total_acc, *chunk_acc;                  // [rows][hd] each
  float *q_t, *p;                                // [hd][16] scaled queries by lane; [16 keys][16 rows]
  float *row_weights, *row_correction;           // decode path: [rows][16] key weights, [rows] rescale
  int* row_keys;                                 // decode path: [rows] keys seen in the current block

  tile_state(attention_scratch& s, int rows_, int hd_) : rows(rows_), hd(hd_) {
    const size_t padded = (size_t(rows) + lanes - 1) / lanes * lanes;
    s.floats.resize(4 * padded + 2 * size_t(rows) * hd + size_t(hd) * lanes + size_t(lanes) * lanes +
                    size_t(rows) * (lanes + 2));
    float* f = s.floats.data();
    total_m = f;
    total_e = f + padded;
    chunk_m = f + 2 * padded;
    chunk_e = f + 3 * padded;
    total_acc = f + 4 * padded;
    chunk_acc = total_acc + size_t(rows) * hd;
    q_t = chunk_acc + size_t(rows) * hd;
    p = q_t + size_t(hd) * lanes;
    row_weights = p + size_t(lanes) * lanes;
    row_correction = row_weights + size_t(rows) * lanes;
    row_keys = reinterpret_cast<int*>(row_correction + rows);  // a float slot per int
    std::fill(total_m, total_m + padded, neg_inf);
    std::fill(total_e, total_e + padded, 0.0f);
    std::fill(total_acc, total_acc + size_t(rows) * hd, 0.0f);
  }

  void start_chunk() {
    const size_t padded = (size_t(rows) + lanes - 1) / lanes * lanes;
    std::fill(chunk_m, chunk_m + padded, neg_inf);
    std::fill(chunk_e, chunk_e + padded, 0.0f);
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

  /// Writes row r's partial as output row `row`.
  void write(int r, size_t row, const partial_out& out) const {
    out.m[row] = total_m[r];
    out.e[row] = total_e[r];
    std::copy(total_acc + size_t(r) * hd, total_acc + size_t(r + 1) * hd, out.ma + row * hd);
  }
};

/// Where row r of a lanes tile lives: its query token and head.
struct row_map {
  int t0, group, kv_head, r0;
  int token(int r) const { return t0 + (r0 + r) / group; }
  int head(int r) const { return kv_head * group + (r0 + r) % group; }
};

/// Few query tokens (decode): every head of tokens [t0, t1), block by block. Within a block the K runs
/// of all heads are one contiguous region and the V runs another, so each block is read as two straight
/// streams: first every head's scores from K, then every head's values from V. The hardware prefetcher
/// follows that at full bandwidth (alternating K and V runs head by head, it does not).
/// Row r = (t - t0) * n_heads + head.
void accumulate_blocks(const attention_args& a, int t0, int t1, int b0, int b1, tile_state& st) {
  const int group = a.shape.n_heads / a.shape.n_kv_heads, hd = st.hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  int max_pos = 0, min_pos = std::numeric_limits<int>::max();
  for (int t = t0; t < t1; ++t) max_pos = std::max(max_pos, a.q_pos[t]), min_pos = std::min(min_pos, a.q_pos[t]);
  float* weights = st.row_weights;  // [rows][16]: this block's exp(score - max) per row
  run_reader keys(a.kv, hd), values(a.kv, hd);
  for (int c0 = b0; c0 < b1; c0 += chunk_blocks) {
    st.start_chunk();
    for (int b = c0; b < std::min(b1, c0 + chunk_blocks); ++b) {
      const int32_t pos0 = a.block_pos[b];
      if (pos0 > max_pos || before_window(a.shape, pos0 + kv_block_tokens - 1, min_pos)) continue;
      for (int kv_head = 0; kv_head < a.shape.n_kv_heads; ++kv_head) {
        const float* k = keys.read(a.blocks[b], a.kv.k_offset, kv_head);
        for (int t = t0; t < t1; ++t)
          for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
            const int r = (t - t0) * a.shape.n_heads + h;
            const int first = first_in_window(a.shape, pos0, a.q_pos[t]);
            const int n_valid = first < kv_block_tokens ? std::min(kv_block_tokens, a.q_pos[t] - pos0 + 1) : 0;
            float scores[lanes];
            std::fill(scores, scores + lanes, neg_inf);
            if (n_valid > 0) key_dots(a.q + size_t(t) * a.q_ld + size_t(h) * hd, k, n_valid, hd, scale, scores);
            std::fill(scores, scores + std::min(first, lanes), neg_inf);  // keys before the window
            const f32x16 s = load16(scores);
            const float top = n_valid > 0 ? std::max(st.chunk_m[r], reduce_max(s)) : st.chunk_m[r];
            st.row_correction[r] = st.chunk_e[r] == 0.0f ? 0.0f : std::exp(st.chunk_m[r] - top);
            const f32x16 p = n_valid > 0 ? exp16(s - top) : f32x16{};
            store16(weights + size_t(r) * lanes, p);
            st.chunk_e[r] = st.chunk_e[r] * st.row_correction[r] + reduce_add(p);
            st.chunk_m[r] = top;
            st.row_keys[r] = std::max(0, n_valid);
          }
      }
      for (int kv_head = 0; kv_head < a.shape.n_kv_heads; ++kv_head) {
        const float* v = values.read(a.blocks[b], a.kv.v_offset, kv_head);
        for (int t = t0; t < t1; ++t)
          for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
            const int r = (t - t0) * a.shape.n_heads + h;
            if (st.row_keys[r] > 0)
              scale_add_values(st.chunk_acc + size_t(r) * hd, st.row_correction[r], weights + size_t(r) * lanes, 1,
                               st.row_keys[r], v, hd);
          }
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
  int max_pos = 0, min_pos = std::numeric_limits<int>::max();
  for (int r = 0; r < lanes; ++r) {
    row_pos_array[r] = r < st.rows ? a.q_pos[map.token(r)] : -1;  // padding lanes see no key
    max_pos = std::max(max_pos, row_pos_array[r]);
    if (r < st.rows) min_pos = std::min(min_pos, row_pos_array[r]);
    const float* q = r < st.rows ? a.q + size_t(map.token(r)) * a.q_ld + size_t(map.head(r)) * hd : nullptr;
    for (int d = 0; d < hd; ++d) st.q_t[size_t(d) * lanes + r] = q ? q[d] * scale : 0.0f;
  }
  i32x16 row_pos;
  std::memcpy(&row_pos, row_pos_array, sizeof row_pos);
  // Positions are below 2^30: without a window every earlier key is within this one.
  const int window = a.shape.window > 0 ? a.shape.window : 1 << 30;
  run_reader keys(a.kv, hd), values(a.kv, hd);

  for (int c0 = b0; c0 < b1; c0 += chunk_blocks) {
    st.start_chunk();
    f32x16 chunk_m = load16(st.chunk_m), chunk_e = load16(st.chunk_e);
    for (int b = c0; b < std::min(b1, c0 + chunk_blocks); ++b) {
      const int32_t pos0 = a.block_pos[b];
      if (pos0 > max_pos || before_window(a.shape, pos0 + kv_block_tokens - 1, min_pos)) continue;
      const float* k = keys.read(a.blocks[b], a.kv.k_offset, map.kv_head);
      const float* v = values.read(a.blocks[b], a.kv.v_offset, map.kv_head);
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
        // Causal mask per lane, and the window's: a key older than `window` positions.
        scores[t] = (row_pos >= pos0 + t) & (row_pos < pos0 + t + window) ? scores[t] : splat16(neg_inf);
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
  const int group = a.shape.n_heads / a.shape.n_kv_heads;
  const int rows = (t1 - t0) * group;
  for (int r0 = 0; r0 < rows; r0 += tile_rows) {
    const row_map map{t0, group, kv_head, r0};
    tile_state st(scratch, std::min(tile_rows, rows - r0), a.shape.head_dim);
    accumulate_lanes(a, map, b0, b1, st);
    for (int r = 0; r < st.rows; ++r) st.write(r, size_t(map.token(r)) * a.shape.n_heads + map.head(r), out);
  }
}

void attend_blocks(const attention_args& a, int t0, int t1, int b0, int b1, const partial_out& out,
                   attention_scratch& scratch) {
  const int rows = (t1 - t0) * a.shape.n_heads;
  tile_state st(scratch, rows, a.shape.head_dim);
  accumulate_blocks(a, t0, t1, b0, b1, st);
  for (int r = 0; r < rows; ++r) st.write(r, size_t(t0) * a.shape.n_heads + r, out);
}

void attend_reference(const attention_args& a, int kv_head, int t0, int t1, const partial_out& out) {
  const int group = a.shape.n_heads / a.shape.n_kv_heads, hd = a.shape.head_dim;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> scores, values;  // values: [keys][hd]
  run_reader keys(a.kv, hd), value_runs(a.kv, hd);
  for (int t = t0; t < t1; ++t)
    for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
      const float* q = a.q + size_t(t) * a.q_ld + size_t(h) * hd;
      scores.clear();
      values.clear();
      for (int b = 0; b < a.n_blocks; ++b)
        for (int i = first_in_window(a.shape, a.block_pos[b], a.q_pos[t]);
             i < kv_block_tokens && a.block_pos[b] + i <= a.q_pos[t]; ++i) {
          const float* k = keys.read(a.blocks[b], a.kv.k_offset, kv_head) + size_t(i) * hd;
          float s = 0;
          for (int d = 0; d < hd; ++d) s += q[d] * k[d];
          scores.push_back(s * scale);
          const float* v = value_runs.read(a.blocks[b], a.kv.v_offset, kv_head) + size_t(i) * hd;
          values.insert(values.end(), v, v + hd);
        }
      const size_t row = size_t(t) * a.shape.n_heads + h;
      float m = neg_inf, e = 0;
      for (float s : scores) m = std::max(m, s);
      float* ma = out.ma + row * hd;
      std::fill(ma, ma + hd, 0.0f);
      for (size_t i = 0; i < scores.size(); ++i) {
        const float p = std::exp(scores[i] - m);
        e += p;
        for (int d = 0; d < hd; ++d) ma[d] += p * values[i * size_t(hd) + size_t(d)];
      }
      out.m[row] = m;
      out.e[row] = e;
    }
}

namespace {

/// The largest m over parts for one row (and `floor`), and each part's weight exp(m_p - top) (0 for empty parts).
inline float part_weights(const float* m, const float* e, int n_parts, int n_rows, int r, float* weights,
                          float floor = neg_inf) {
  float top = floor;
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
                int r0, int r1, float* out, size_t out_ld, const float* sinks) {
  std::vector<float> weights(static_cast<size_t>(n_parts));
  for (int r = r0; r < r1; ++r) {
    const float sink = sinks ? sinks[r % n_heads] : neg_inf;
    const float top = part_weights(m, e, n_parts, n_rows, r, weights.data(), sink);
    float total = sinks ? std::exp(sink - top) : 0.0f;  // the sink weighs in the denominator only
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
