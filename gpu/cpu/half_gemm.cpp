// Products with f16 and bf16 weights (declared in typed_gemm.hpp), widened in registers: tiles of 4 (AVX-512) or 2
// (AVX2) weight rows by 4 rows of x, the weight rows in panels that stay in L2 while every group of x passes.
#include "gpu/cpu/typed_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "gpu/cpu/kernels.hpp"
#include "gpu/cpu/simd.hpp"

namespace illm::gpu::cpu {

namespace {

#if defined(__AVX2__) && defined(__F16C__)

// The processor's own fp32 vector: 16 lanes with AVX-512 (tiles of 4 x 4 accumulators in 32 registers), 8 with AVX2
// (2 x 4 in 16).
#if defined(__AVX512F__)
constexpr int width = 16, tile_weight_rows = 4;
#else
constexpr int width = 8, tile_weight_rows = 2;
#endif
using vec = float __attribute__((vector_size(4 * width)));

inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float sum(vec v) {
  float total = 0.0f;
  for (int i = 0; i < width; ++i) total += v[i];
  return total;
}

/// `width` values of a 16-bit weight row widened to fp32.
template <bool Bf16>
inline vec widen_vec(const uint8_t* p) {
#if defined(__AVX512F__)
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return vec(Bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h));
#else
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return vec(Bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h));
#endif
}

/// W weight rows from row j against M rows of x, each weight vector widened in registers once for the M rows and
/// each activation vector loaded once for the W rows.
template <bool Bf16, int W, int M>
void halves_tile(const float* x, size_t ldx, int k, const uint8_t* w, size_t w_row_bytes, int j, float* y, size_t ldy,
                 bool accumulate) {
  const uint8_t* rows[W];
  vec acc[W][M];
  for (int c = 0; c < W; ++c) {
    rows[c] = w + size_t(j + c) * w_row_bytes;
    for (int i = 0; i < M; ++i) acc[c][i] = vec{};
  }
  int d = 0;
  for (; d + width <= k; d += width) {
    vec wv[W];
    for (int c = 0; c < W; ++c) {
      // The next tile's rows, a tile ahead: each row is a page of its own at k = 2048, which the hardware's
      // prefetchers (they stop at page ends) would start cold.
      if (d % 32 == 0) prefetch_lines(rows[c] + 2 * d + W * w_row_bytes, 1);
      wv[c] = widen_vec<Bf16>(rows[c] + 2 * d);
    }
    for (int i = 0; i < M; ++i) {
      const vec xv = load(x + size_t(i) * ldx + d);
      for (int c = 0; c < W; ++c) acc[c][i] += wv[c] * xv;
    }
  }
  for (int c = 0; c < W; ++c) {
    float tail[M] = {};
    for (int e = d; e < k; ++e) {
      float v;
      widen(Bf16 ? dtype::bf16 : dtype::f16, rows[c] + 2 * e, 1, &v);
      for (int i = 0; i < M; ++i) tail[i] += v * x[size_t(i) * ldx + e];
    }
    for (int i = 0; i < M; ++i) {
      float& out = y[size_t(i) * ldy + size_t(j + c)];
      out = (accumulate ? out : 0.0f) + sum(acc[c][i]) + tail[i];
    }
  }
}

/// M rows of x against weight rows [j0, j1), W at a time.
template <bool Bf16, int M>
void halves_rows(const float* x, size_t ldx, int k, const uint8_t* w, size_t w_row_bytes, int j0, int j1, float* y,
                 size_t ldy, bool accumulate) {
  int j = j0;
  for (; j + tile_weight_rows <= j1; j += tile_weight_rows)
    halves_tile<Bf16, tile_weight_rows, M>(x, ldx, k, w, w_row_bytes, j, y, ldy, accumulate);
  for (; j < j1; ++j) halves_tile<Bf16, 1, M>(x, ldx, k, w, w_row_bytes, j, y, ldy, accumulate);
}

/// Rows i0 .. i0 + M of x against weight rows [j0, j1).
template <bool Bf16>
void halves_group(const float* x, size_t ldx, int rows, int k, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                  float* y, size_t ldy, bool accumulate) {
  switch (rows) {
    case 1: return halves_rows<Bf16, 1>(x, ldx, k, w, w_row_bytes, j0, j1, y, ldy, accumulate);
    case 2: return halves_rows<Bf16, 2>(x, ldx, k, w, w_row_bytes, j0, j1, y, ldy, accumulate);
    case 3: return halves_rows<Bf16, 3>(x, ldx, k, w, w_row_bytes, j0, j1, y, ldy, accumulate);
    default: return halves_rows<Bf16, 4>(x, ldx, k, w, w_row_bytes, j0, j1, y, ldy, accumulate);
  }
}

/// Weight rows read against every group of 4 rows of x before the next: at k = 2048, 32 rows of f16 are 128 KiB,
/// which stay in L2 while the groups pass.
constexpr int halves_panel_rows = 32;

template <bool Bf16>
void halves_panels(const float* x, size_t ldx, int m, int k, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                   float* y, size_t ldy, bool accumulate) {
  for (int jp = j0; jp < j1; jp += halves_panel_rows) {
    const int jp_end = std::min(j1, jp + halves_panel_rows);
    for (int i = 0; i < m; i += 4)
      halves_group<Bf16>(x + size_t(i) * ldx, ldx, std::min(4, m - i), k, w, w_row_bytes, jp, jp_end,
                         y + size_t(i) * ldy, ldy, accumulate);
  }
}

#endif

}  // namespace

void widen(dtype type, const uint8_t* src, int n, float* out) {
  if (type == dtype::f32) {
    std::memcpy(out, src, sizeof(float) * size_t(n));
  } else if (type == dtype::bf16) {
    for (int i = 0; i < n; ++i) {
      const uint32_t bits = uint32_t(read_u16(src + 2 * i)) << 16;
      std::memcpy(out + i, &bits, 4);
    }
  } else {
    int i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
#endif
    for (; i < n; ++i) out[i] = read_half(src + 2 * i);
  }
}

void gemm_halves(const float* x, size_t ldx, int m, int k, dtype type, const uint8_t* w, size_t w_row_bytes, int j0,
                 int j1, float* y, size_t ldy, bool accumulate) {
#if defined(__AVX2__) && defined(__F16C__)
  if (type == dtype::bf16) halves_panels<true>(x, ldx, m, k, w, w_row_bytes, j0, j1, y, ldy, accumulate);
  else halves_panels<false>(x, ldx, m, k, w, w_row_bytes, j0, j1, y, ldy, accumulate);
  return;
#endif
  thread_local std::vector<float> row;
  row.resize(size_t(k));
  for (int j = j0; j < j1; ++j) {
    widen(type, w + size_t(j) * w_row_bytes, k, row.data());
    gemv(x, ldx, m, k, row.data(), size_t(k), 0, 1, y + j, ldy, accumulate);
  }
}

}  // namespace illm::gpu::cpu
