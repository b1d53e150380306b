#pragma once
// 16-lane fp32 vectors on GCC vector extensions: AVX-512 registers where the CPU has them, pairs of
// AVX2 registers (or SSE quads) elsewhere, from one source.

#include <cstdint>
#include <cstring>

#if defined(__AVX__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "gpu/half.hpp"

namespace illm::gpu::cpu {

/// 16 floats.
using f32x16 = float __attribute__((vector_size(64)));
/// 16 int32 lanes (comparison results).
using i32x16 = int32_t __attribute__((vector_size(64)));

inline constexpr int lanes = 16;

inline f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }
inline f32x16 splat16(float x) { return f32x16{} + x; }
/// Loads the first n <= 16 floats, zero in the other lanes; reads nothing past p + n.
inline f32x16 load_partial16(const float* p, int n) {
#if defined(__AVX512F__)
  return f32x16(_mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p));
#else
  f32x16 v{};
  std::memcpy(&v, p, sizeof(float) * size_t(n));
  return v;
#endif
}

/// Stores the first n <= 16 lanes; writes nothing past p + n.
inline void store_partial16(float* p, f32x16 v, int n) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), __m512(v));
#else
  std::memcpy(p, &v, sizeof(float) * size_t(n));
#endif
}

/// 8 and 4 floats, for the halving reductions.
using f32x8 = float __attribute__((vector_size(32)));
using f32x4 = float __attribute__((vector_size(16)));

inline f32x8 low8(f32x16 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline f32x8 high8(f32x16 v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }
inline f32x4 low4(f32x8 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3); }
inline f32x4 high4(f32x8 v) { return __builtin_shufflevector(v, v, 4, 5, 6, 7); }

inline float reduce_add(f32x16 v) {
  const f32x8 s8 = low8(v) + high8(v);
  const f32x4 s4 = low4(s8) + high4(s8);
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

inline float reduce_max(f32x16 v) {
  const f32x8 a = low8(v), b = high8(v);
  const f32x8 s8 = a > b ? a : b;
  const f32x4 c = low4(s8), d = high4(s8);
  const f32x4 s4 = c > d ? c : d;
  const float x = s4[0] > s4[1] ? s4[0] : s4[1], y = s4[2] > s4[3] ? s4[2] : s4[3];
  return x > y ? x : y;
}

inline f32x16 max16(f32x16 a, f32x16 b) { return a > b ? a : b; }

/// e^x per lane, within 2 ulp over the float range; lanes below -87.3 (masked scores) give 0.
inline f32x16 exp16(f32x16 x) {
  const f32x16 lo = splat16(-87.3f), hi = splat16(88.7f);
  const f32x16 xc = max16(lo, x < hi ? x : hi);
  // x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2; ln2 is split in two for exactness.
  const f32x16 y = xc * 1.44269504088896341f + 0.5f;
  const f32x16 t = __builtin_convertvector(__builtin_convertvector(y, i32x16), f32x16);  // trunc(y)
  const f32x16 n = y < t ? t - 1.0f : t;                                                // floor(y)
  const f32x16 r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  f32x16 p = splat16(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i32x16 bits = (__builtin_convertvector(n, i32x16) + 127) << 23;
  f32x16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const f32x16 result = p * scale;
  return x < lo ? f32x16{} : result;
}

/// The f16 stored at p as a float: one instruction with F16C (a block's scale is read once per 32 weights).
inline float read_half(const uint8_t* p) {
#if defined(__F16C__)
  return _cvtsh_ss(read_u16(p));
#else
  return f16_to_float(read_u16(p));
#endif
}

#if defined(__AVX__)
/// 32 bytes at p, unaligned.
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

/// Asks for the cache lines of the `bytes` at p: the weight rows after the ones being read, whose first lines the
/// hardware's prefetchers (which stop at page ends) would otherwise fetch cold, row after row (the decode path is
/// bound by the memory's read rate).
inline void prefetch_lines(const void* p, int bytes) {
  for (int off = 0; off < bytes; off += 64) _mm_prefetch(static_cast<const char*>(p) + off, _MM_HINT_T0);
}

/// The sum of an AVX register's 8 floats.
inline float sum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
#endif

}  // namespace illm::gpu::cpu
