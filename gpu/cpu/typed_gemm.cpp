#include "gpu/cpu/typed_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "gpu/cpu/kernels.hpp"
#include "gpu/cpu/simd.hpp"
#include "gpu/cpu/tiled_gemm.hpp"
#include "gpu/half.hpp"
#include "gpu/quant/blocks.hpp"

namespace illm::gpu::cpu {

void quantized_rows::resize(int m, int k_, int block_) {
  k = k_;
  block = block_;
  q.resize(size_t(m) * size_t(k));
  scale.resize(size_t(m) * size_t(k / block));
  sums.resize(size_t(m) * size_t(k / 16));
  level_sums.resize(size_t(m) * size_t(k / 16));
}

namespace {

/// The largest |v[e]| of n values (n a multiple of 8).
float max_abs(const float* v, int n) {
  float amax = 0.0f;
#if defined(__AVX2__)
  __m256 m = _mm256_setzero_ps();
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int e = 0; e < n; e += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(v + e), magnitude));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  for (float lane : lanes) amax = std::max(amax, lane);
#else
  for (int e = 0; e < n; ++e) amax = std::max(amax, std::fabs(v[e]));
#endif
  return amax;
}

/// out[e] = v[e] * inverse rounded to the nearest level, ties to even (n a multiple of 8; |levels| <= 127).
void round_levels(const float* v, int n, float inverse, int8_t* out) {
  int e = 0;
#if defined(__AVX2__)
  // cvtps rounds as the processor's mode says: to nearest even, as lrintf does.
  for (; e < n; e += 8) {
    const __m256i words = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + e), _mm256_set1_ps(inverse)));
    const __m128i halves = _mm_packs_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + e), _mm_packs_epi16(halves, halves));
  }
#endif
  for (; e < n; ++e) out[e] = int8_t(std::lrintf(v[e] * inverse));
}

}  // namespace

void quantized_rows::quantize(const float* x, size_t ldx, int i0, int i1) {
  for (int i = i0; i < i1; ++i) {
    const float* row = x + size_t(i) * ldx;
    int8_t* qi = q.data() + size_t(i) * size_t(k);
    float* si = scale.data() + size_t(i) * size_t(k / block);
    for (int b = 0; b < k / block; ++b) {
      const float* v = row + b * block;
      const float amax = max_abs(v, block);
      // As GGML quantizes activations (block_q8_0 for 32-element weight blocks, block_q8_K for 256): levels rounded
      // to nearest even from the exact scale, which a 32-element block keeps as an fp16 number.
      const float s = amax / 127.0f, inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
      si[b] = block == 32 ? f16_to_float(float_to_f16(s)) : s;
      round_levels(v, block, inverse, qi + b * block);
    }
    float* sum = sums.data() + size_t(i) * size_t(k / 16);
    int32_t* level_sum = level_sums.data() + size_t(i) * size_t(k / 16);
    for (int g = 0; g < k / 16; ++g) {
      int total = 0;
      for (int e = 0; e < 16; ++e) total += qi[16 * g + e];
      sum[g] = float(total) * si[16 * g / block];
      level_sum[g] = total;
    }
  }
}

void quantized_rows::dequantize(int i, float* out) const {
  const int8_t* qi = q.data() + size_t(i) * size_t(k);
  const float* si = scale.data() + size_t(i) * size_t(k / block);
  for (int e = 0; e < k; ++e) out[e] = float(qi[e]) * si[e / block];
}

namespace {

/// A block-type weight row laid out for the integer products. Value e is
///   block_scale[e / block] * lane_scale(e) * (level[e] - offset) (- a min, for q4_k),
/// and every term that is not level[e] times something per 16 values is folded into `offsets`: the row's dot with
/// activations x is  sum_b block_scale[b] * xscale[b] * sum_e lane_scale(e) * level[e] * qx[e]
///                  - sum_g offsets[g] * (xscale * sum of qx over the 16 values g).
struct unpacked_row {
  std::vector<uint8_t> levels;      // [k]: unsigned, or (q8_0) int8
  std::vector<int16_t> lane_scales;  // [k / 2]: per 32 values, 8 lanes of the first 16's scale, 8 of the second's
  std::vector<float> block_scales;   // [k / block]
  std::vector<float> offsets;        // [k / 16]
  bool signed_levels = false;
  bool has_offsets = false;

  void resize(int k, int block) {
    levels.resize(size_t(k));
    lane_scales.resize(size_t(k / 2));
    block_scales.resize(size_t(k / block));
    offsets.resize(size_t(k / 16));
  }
  /// The scale of 16-value group g, in its 8 lanes.
  void set_group_scale(int g, int16_t s) { std::fill_n(lane_scales.data() + 8 * g, 8, s); }
};

void unpack_q8_0(const uint8_t* row, int k, unpacked_row& u) {
  u.signed_levels = true;
  u.has_offsets = false;
  for (int b = 0; b < k / 32; ++b) {
    const uint8_t* blk = row + size_t(b) * 34;
    u.block_scales[size_t(b)] = read_half(blk);
    std::memcpy(u.levels.data() + 32 * b, blk + 2, 32);
  }
  std::fill(u.lane_scales.begin(), u.lane_scales.end(), int16_t(1));
}

void unpack_q5_0(const uint8_t* row, int k, unpacked_row& u) {
  u.signed_levels = false;
  u.has_offsets = true;
  for (int b = 0; b < k / 32; ++b) {
    const uint8_t* blk = row + size_t(b) * 22;
    const float d = read_half(blk);
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    const uint8_t* qs = blk + 6;
    uint8_t* out = u.levels.data() + 32 * b;
    for (int j = 0; j < 16; ++j) {
      out[j] = uint8_t((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
      out[j + 16] = uint8_t((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    }
    u.block_scales[size_t(b)] = d;
    u.offsets[size_t(2 * b)] = u.offsets[size_t(2 * b + 1)] = 16.0f * d;
  }
  std::fill(u.lane_scales.begin(), u.lane_scales.end(), int16_t(1));
}

void unpack_q4_k(const uint8_t* row, int k, unpacked_row& u) {
  u.signed_levels = false;
  u.has_offsets = true;
  for (int b = 0; b < k / 256; ++b) {
    const uint8_t* blk = row + size_t(b) * 144;
    const float d = read_half(blk), dmin = read_half(blk + 2);
    const uint8_t* s = blk + 4;
    const uint8_t* qs = blk + 16;
    uint8_t* out = u.levels.data() + 256 * b;
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        out[64 * c + l] = qs[32 * c + l] & 0x0f;
        out[64 * c + 32 + l] = qs[32 * c + l] >> 4;
      }
    for (int j = 0; j < 8; ++j) {
      int scale, min;
      q4_k_scale_min(j, s, scale, min);
      const int g = 16 * b + 2 * j;  // the sub-block's two groups of 16
      u.set_group_scale(g, int16_t(scale));
      u.set_group_scale(g + 1, int16_t(scale));
      u.offsets[size_t(g)] = u.offsets[size_t(g + 1)] = dmin * float(min);
    }
    u.block_scales[size_t(b)] = d;
  }
}

void unpack_q6_k(const uint8_t* row, int k, unpacked_row& u) {
  u.signed_levels = false;
  u.has_offsets = true;
  for (int b = 0; b < k / 256; ++b) {
    const uint8_t* blk = row + size_t(b) * 210;
    const float d = read_half(blk + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    uint8_t* out = u.levels.data() + 256 * b;
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = blk + 64 * n;
      const uint8_t* qh = blk + 128 + 32 * n;
      uint8_t* o = out + 128 * n;
      for (int l = 0; l < 32; ++l) {
        o[l] = uint8_t((ql[l] & 0x0f) | ((qh[l] << 4) & 0x30));
        o[l + 32] = uint8_t((ql[l + 32] & 0x0f) | ((qh[l] << 2) & 0x30));
        o[l + 64] = uint8_t((ql[l] >> 4) | (qh[l] & 0x30));
        o[l + 96] = uint8_t((ql[l + 32] >> 4) | ((qh[l] >> 2) & 0x30));
      }
    }
    for (int i = 0; i < 16; ++i) {
      u.set_group_scale(16 * b + i, int16_t(sc[i]));
      u.offsets[size_t(16 * b + i)] = 32.0f * d * float(sc[i]);
    }
    u.block_scales[size_t(b)] = d;
  }
}

void unpack_mxfp4(const uint8_t* row, int k, unpacked_row& u) {
  u.signed_levels = true;
  u.has_offsets = false;
  for (int b = 0; b < k / 32; ++b) {
    const uint8_t* blk = row + size_t(b) * 17;
    u.block_scales[size_t(b)] = mxfp4_scale(blk[0]);
    auto* out = reinterpret_cast<int8_t*>(u.levels.data() + 32 * b);
    for (int j = 0; j < 16; ++j) {
      out[j] = mxfp4_levels[blk[1 + j] & 0x0f];
      out[j + 16] = mxfp4_levels[blk[1 + j] >> 4];
    }
  }
  std::fill(u.lane_scales.begin(), u.lane_scales.end(), int16_t(1));
}

void unpack(dtype type, const uint8_t* row, int k, unpacked_row& u) {
  u.resize(k, int(block_elements(type)));
  switch (type) {
    case dtype::q8_0: return unpack_q8_0(row, k, u);
    case dtype::q5_0: return unpack_q5_0(row, k, u);
    case dtype::q4_k: return unpack_q4_k(row, k, u);
    case dtype::q6_k: return unpack_q6_k(row, k, u);
    case dtype::mxfp4: return unpack_mxfp4(row, k, u);
    default: return;
  }
}

float dot_floats(const float* a, const float* b, int n) {
  f32x16 acc{};
  int d = 0;
  for (; d + lanes <= n; d += lanes) acc += load16(a + d) * load16(b + d);
  if (d < n) acc += load_partial16(a + d, n - d) * load_partial16(b + d, n - d);
  return reduce_add(acc);
}

#if defined(__AVX2__)

/// Products of 32 levels with 32 int8 activations, summed in adjacent pairs: 16 int16.
template <bool Signed>
inline __m256i pair_products(__m256i levels, __m256i x) {
  if constexpr (Signed) return _mm256_maddubs_epi16(_mm256_sign_epi8(levels, levels), _mm256_sign_epi8(x, levels));
  else return _mm256_maddubs_epi16(levels, x);
}

/// acc + the pairs times their int16 scales, summed in adjacent pairs.
inline __m256i add_scaled(__m256i acc, __m256i pairs, __m256i scales) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, pairs, scales);
#elif defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(acc, pairs, scales);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales));
#endif
}

/// The integer part of one weight row against R activation rows: out[r] = sum_b block_scale * xscale_r * ints.
template <int R, bool Signed>
void dot_levels(const unpacked_row& w, int k, int block, const int8_t* const* xq, const float* const* xs, float* out) {
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  const uint8_t* levels = w.levels.data();
  const int16_t* scales = w.lane_scales.data();
  for (int b = 0; b < k / block; ++b) {
    __m256i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    for (int e = b * block; e < (b + 1) * block; e += 32) {
      const __m256i lv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels + e));
      const __m256i sc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + e / 2));
      for (int r = 0; r < R; ++r)
        acc[r] = add_scaled(acc[r], pair_products<Signed>(lv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[r] + e))), sc);
    }
    const float ws = w.block_scales[size_t(b)];
    for (int r = 0; r < R; ++r)
      total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), _mm256_set1_ps(ws * xs[r][b]), total[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = sum8(total[r]);
}

#else

template <int R, bool Signed>
void dot_levels(const unpacked_row& w, int k, int block, const int8_t* const* xq, const float* const* xs, float* out) {
  for (int r = 0; r < R; ++r) {
    float total = 0.0f;
    for (int b = 0; b < k / block; ++b) {
      int64_t acc = 0;
      for (int e = b * block; e < (b + 1) * block; ++e) {
        const int level = Signed ? int(int8_t(w.levels[size_t(e)])) : int(w.levels[size_t(e)]);
        acc += int64_t(level) * xq[r][e] * w.lane_scales[size_t(e / 16 * 8)];
      }
      total += float(acc) * w.block_scales[size_t(b)] * xs[r][b];
    }
    out[r] = total;
  }
}

#endif

/// One unpacked weight row against R activation rows starting at row i.
template <int R>
void dot_rows(const unpacked_row& w, const quantized_rows& x, int i, float* out) {
  const int k = x.k, block = x.block;
  const int8_t* xq[R];
  const float* xs[R];
  for (int r = 0; r < R; ++r) {
    xq[r] = x.q.data() + size_t(i + r) * size_t(k);
    xs[r] = x.scale.data() + size_t(i + r) * size_t(k / block);
  }
  if (w.signed_levels) dot_levels<R, true>(w, k, block, xq, xs, out);
  else dot_levels<R, false>(w, k, block, xq, xs, out);
  if (w.has_offsets)
    for (int r = 0; r < R; ++r) out[r] -= dot_floats(w.offsets.data(), x.sums.data() + size_t(i + r) * size_t(k / 16), k / 16);
}

#if defined(__AVX2__)

/// Where a fused kernel reads R activation rows from row i on.
template <int R>
struct activation_rows {
  const int8_t* q[R];
  const float* scale[R];
  const float* sums[R];
  activation_rows(const quantized_rows& x, int i) {
    for (int r = 0; r < R; ++r) {
      q[r] = x.q.data() + size_t(i + r) * size_t(x.k);
      scale[r] = x.scale.data() + size_t(i + r) * size_t(x.k / x.block);
      sums[r] = x.sums.data() + size_t(i + r) * size_t(x.k / 16);
    }
  }
};

/// 16 int16 lanes: the first 8 `a`, the last 8 `b` (the scales of two groups of 16 values).
inline __m256i two_scales(int a, int b) {
  return _mm256_set_m128i(_mm_set1_epi16(int16_t(b)), _mm_set1_epi16(int16_t(a)));
}

/// A q4_k row against R activation rows, its nibbles decoded in registers (the decode path: no unpacked copy).
/// The 8 sums of 32 activations from the 16 sums of 16 at p, in order.
inline __m256 sums_of_32(const float* p) {
  const __m256 pairs = _mm256_hadd_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8));  // 0 1 4 5 | 2 3 6 7
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(pairs), 0xd8));
}

template <int R>
void fused_q4_k(const uint8_t* row, size_t row_bytes, int k, const activation_rows<R>& x, float* out) {
  __m256 total[R], mins[R];
  for (int r = 0; r < R; ++r) total[r] = mins[r] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int b = 0; b < k / 256; ++b) {
    const uint8_t* blk = row + size_t(b) * 144;
    prefetch_lines(blk + row_bytes, 144);
    const float d = read_half(blk), dmin = read_half(blk + 2);
    // The 6-bit scales and mins, four at a time in 32-bit words: sub-blocks 0-3 keep their low 6 bits in bytes
    // 0-3 (scales) and 4-7 (mins); 4-7 have their low 4 bits in bytes 8-11 and their top 2 in the spare bits.
    uint32_t u[3];
    std::memcpy(u, blk + 4, 12);
    const uint32_t scale_words[2] = {u[0] & 0x3f3f3f3fu, (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u)};
    const uint32_t min_words[2] = {u[1] & 0x3f3f3f3fu, ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u)};
    uint8_t scale[8];
    std::memcpy(scale, scale_words, 8);
    __m256i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load32(blk + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(v, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
      const __m256i s_lo = _mm256_set1_epi16(int16_t(scale[2 * c])), s_hi = _mm256_set1_epi16(int16_t(scale[2 * c + 1]));
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = x.q[r] + 256 * b + 64 * c;
        acc[r] = add_scaled(acc[r], pair_products<false>(lo, load32(xq)), s_lo);
        acc[r] = add_scaled(acc[r], pair_products<false>(hi, load32(xq + 32)), s_hi);
      }
    }
    const __m256 block_mins = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(min_words)))),
        _mm256_set1_ps(dmin));
    for (int r = 0; r < R; ++r) {
      total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), _mm256_set1_ps(d * x.scale[r][b]), total[r]);
      mins[r] = _mm256_fmadd_ps(block_mins, sums_of_32(x.sums[r] + 16 * b), mins[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = sum8(_mm256_sub_ps(total[r], mins[r]));
}

/// A q6_k row against R activation rows, decoded in registers.
template <int R>
void fused_q6_k(const uint8_t* row, size_t row_bytes, int k, const activation_rows<R>& x, float* out) {
  __m256 total[R], offsets[R];
  for (int r = 0; r < R; ++r) total[r] = offsets[r] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi8(0x0f), high = _mm256_set1_epi8(0x30);
  for (int b = 0; b < k / 256; ++b) {
    const uint8_t* blk = row + size_t(b) * 210;
    prefetch_lines(blk + row_bytes, 210);
    const float d = read_half(blk + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    __m256i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    for (int n = 0; n < 2; ++n) {
      const __m256i l0 = load32(blk + 64 * n), l1 = load32(blk + 64 * n + 32), h = load32(blk + 128 + 32 * n);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, nibble), _mm256_and_si256(_mm256_slli_epi16(h, 4), high)),
          _mm256_or_si256(_mm256_and_si256(l1, nibble), _mm256_and_si256(_mm256_slli_epi16(h, 2), high)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), nibble), _mm256_and_si256(h, high)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), nibble),
                          _mm256_and_si256(_mm256_srli_epi16(h, 2), high))};
      for (int t = 0; t < 4; ++t) {
        const int g = 8 * n + 2 * t;  // the first of the two groups of 16 this span covers
        const __m256i scales = two_scales(sc[g], sc[g + 1]);
        for (int r = 0; r < R; ++r)
          acc[r] = add_scaled(acc[r], pair_products<false>(q[t], load32(x.q[r] + 256 * b + 128 * n + 32 * t)), scales);
      }
    }
    // The offset of 32 levels, per group of 16: 32 d scale[i] times the group's activation sum.
    const __m256 step = _mm256_set1_ps(32.0f * d);
    const __m256 s0 = _mm256_mul_ps(step, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc)))));
    const __m256 s1 = _mm256_mul_ps(step, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8)))));
    for (int r = 0; r < R; ++r) {
      total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), _mm256_set1_ps(d * x.scale[r][b]), total[r]);
      const float* sums = x.sums[r] + 16 * b;
      offsets[r] = _mm256_fmadd_ps(s0, _mm256_loadu_ps(sums), offsets[r]);
      offsets[r] = _mm256_fmadd_ps(s1, _mm256_loadu_ps(sums + 8), offsets[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = sum8(_mm256_sub_ps(total[r], offsets[r]));
}

/// The 32-bit sums of 4 adjacent products of the int8 levels w and x, from |w| and x with w's signs.
inline __m256i products_of_signed(__m256i w_abs, __m256i x_signed) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w_abs, x_signed);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w_abs, x_signed);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, x_signed), _mm256_set1_epi16(1));
#endif
}

/// Block b of a row of 32-element blocks whose levels are signed bytes (q8_0, mxfp4): its scale and its 32 levels.
template <dtype T>
inline __m256i signed_block(const uint8_t* row, int b, float& d) {
  if constexpr (T == dtype::q8_0) {
    const uint8_t* blk = row + size_t(b) * 34;
    d = read_half(blk);
    return load32(blk + 2);
  } else {
    const uint8_t* blk = row + size_t(b) * 17;
    d = mxfp4_scale(blk[0]);
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1));
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m256i split = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(codes, 4), nibble), _mm_and_si128(codes, nibble));
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mxfp4_levels)));
    return _mm256_shuffle_epi8(table, split);
  }
}

/// W rows of type T (q8_0 or mxfp4: signed levels in blocks of 32; rows[0 .. W), row_bytes apart) against R
/// activation rows: each activation vector loaded once for all W (a tile of W x R sums); row c's sums in
/// out[4 c .. 4 c + R).
template <dtype T, int W, int R>
void fused_signed_blocks(const uint8_t* row, size_t row_bytes, int k, const activation_rows<R>& x, float* out) {
  __m256 total[W][R];
  for (int c = 0; c < W; ++c)
    for (int r = 0; r < R; ++r) total[c][r] = _mm256_setzero_ps();
  for (int b = 0; b < k / 32; ++b) {
    float d[W];
    __m256i w[W], w_abs[W];
    for (int c = 0; c < W; ++c) {
      if (b % 2 == 0) prefetch_lines(row + size_t(c + W) * row_bytes + size_t(b) * block_bytes(T), 2 * block_bytes(T));
      w[c] = signed_block<T>(row + size_t(c) * row_bytes, b, d[c]);
      w_abs[c] = _mm256_sign_epi8(w[c], w[c]);
    }
    for (int r = 0; r < R; ++r) {
      const __m256i xv = load32(x.q[r] + 32 * b);
      const float xs = x.scale[r][b];
      for (int c = 0; c < W; ++c) {
        const __m256i p = products_of_signed(w_abs[c], _mm256_sign_epi8(xv, w[c]));
        total[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d[c] * xs), total[c][r]);
      }
    }
  }
  for (int c = 0; c < W; ++c)
    for (int r = 0; r < R; ++r) out[4 * c + r] = sum8(total[c][r]);
}

/// Whether the decode path has a fused kernel for `type`.
constexpr bool has_fused(dtype type) {
  return type == dtype::q4_k || type == dtype::q6_k || type == dtype::q8_0 || type == dtype::mxfp4;
}

/// Weight rows [j, j + 2) (a pair where the type has a kernel for two; else row j alone) against R rows of x from
/// row i: their sums in out[0 .. R) and out[4 .. 4 + R); returns the weight rows done.
template <int R>
int fused_rows(dtype type, const uint8_t* w, size_t w_row_bytes, int j, int j_end, const quantized_rows& x, int i,
               float* out) {
  const activation_rows<R> rows(x, i);
  const uint8_t* row = w + size_t(j) * w_row_bytes;
  const bool pair = j + 1 < j_end;
  if (type == dtype::q8_0 && pair) fused_signed_blocks<dtype::q8_0, 2, R>(row, w_row_bytes, x.k, rows, out);
  else if (type == dtype::mxfp4 && pair) fused_signed_blocks<dtype::mxfp4, 2, R>(row, w_row_bytes, x.k, rows, out);
  else if (type == dtype::q4_k) fused_q4_k<R>(row, w_row_bytes, x.k, rows, out);
  else if (type == dtype::q6_k) fused_q6_k<R>(row, w_row_bytes, x.k, rows, out);
  else if (type == dtype::mxfp4) fused_signed_blocks<dtype::mxfp4, 1, R>(row, w_row_bytes, x.k, rows, out);
  else fused_signed_blocks<dtype::q8_0, 1, R>(row, w_row_bytes, x.k, rows, out);
  return (type == dtype::q8_0 || type == dtype::mxfp4) && pair ? 2 : 1;
}

#else

constexpr bool has_fused(dtype) { return false; }
template <int R>
int fused_rows(dtype, const uint8_t*, size_t, int, int, const quantized_rows&, int, float*) { return 1; }

#endif

/// Rows of activations read against each unpacked weight row before the next: enough to reuse the unpacking,
/// few enough to stay in the core's cache.
constexpr int rows_per_pass = 64;

/// Weight rows the fused kernels read against every row of x before the next rows (at k = 2048, 32 rows of q8_0
/// are 70 KiB: in L2, while the 4 rows of x a pass reads, 8 KiB of int8, stay in L1).
constexpr int fused_panel_rows = 32;

}  // namespace

void gemm_blocks(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                 float* y, size_t ldy, bool accumulate) {
  if (tiled_kernel_pays(type, m)) return gemm_tiled(x, m, type, w, w_row_bytes, j0, j1, y, ldy, accumulate);
  if (has_fused(type)) {
    // Each weight row decoded in registers for 4 rows of x at a time. Batches: the weight rows in panels that stay
    // in L2, each group of 4 rows of x (in L1) read against the whole panel before the next group.
    for (int jp = j0; jp < j1; jp += fused_panel_rows) {
      const int jp_end = std::min(j1, jp + fused_panel_rows);
      for (int i = 0; i < m; i += 4) {
        const int rows = std::min(4, m - i);
        for (int j = jp, done = 0; j < jp_end; j += done) {
          float out[8];
          switch (rows) {
            case 1: done = fused_rows<1>(type, w, w_row_bytes, j, jp_end, x, i, out); break;
            case 2: done = fused_rows<2>(type, w, w_row_bytes, j, jp_end, x, i, out); break;
            case 3: done = fused_rows<3>(type, w, w_row_bytes, j, jp_end, x, i, out); break;
            default: done = fused_rows<4>(type, w, w_row_bytes, j, jp_end, x, i, out); break;
          }
          for (int c = 0; c < done; ++c)
            for (int r = 0; r < rows; ++r) {
              float& o = y[size_t(i + r) * ldy + size_t(j + c)];
              o = (accumulate ? o : 0.0f) + out[4 * c + r];
            }
        }
      }
    }
    return;
  }
  thread_local unpacked_row u;
  for (int p0 = 0; p0 < m; p0 += rows_per_pass) {
    const int p1 = std::min(m, p0 + rows_per_pass);
    for (int j = j0; j < j1; ++j) {
      unpack(type, w + size_t(j) * w_row_bytes, x.k, u);
      for (int i = p0; i < p1; i += 4) {
        float out[4];
        switch (std::min(4, p1 - i)) {
          case 1: dot_rows<1>(u, x, i, out); break;
          case 2: dot_rows<2>(u, x, i, out); break;
          case 3: dot_rows<3>(u, x, i, out); break;
          default: dot_rows<4>(u, x, i, out); break;
        }
        for (int r = 0; r < std::min(4, p1 - i); ++r) {
          float& o = y[size_t(i + r) * ldy + size_t(j)];
          o = (accumulate ? o : 0.0f) + out[r];
        }
      }
    }
  }
}

}  // namespace illm::gpu::cpu
