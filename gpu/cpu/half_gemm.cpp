// Products with f16 and bf16 weights (declared in typed_gemm.hpp): the decode path widens each weight row in
// registers; batches widen rows to fp32 in memory (cpu_backend) for the f32 products.
#include "gpu/cpu/typed_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "gpu/cpu/kernels.hpp"
#include "gpu/cpu/simd.hpp"

namespace illm::gpu::cpu {

namespace {

#if defined(__AVX2__) && defined(__F16C__)

/// 8 values of a 16-bit weight row widened to fp32.
inline __m256 widen8(dtype type, const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (type == dtype::f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/// M rows of x against weight rows [j0, j1) of f16 or bf16, widened in registers (the decode path).
template <int M>
void halves_rows(const float* x, size_t ldx, int k, dtype type, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                 float* y, size_t ldy, bool accumulate) {
  for (int j = j0; j < j1; ++j) {
    const uint8_t* row = w + size_t(j) * w_row_bytes;
    __m256 even[M], odd[M];
    for (int i = 0; i < M; ++i) even[i] = odd[i] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= k; d += 16) {
      const __m256 w0 = widen8(type, row + 2 * d), w1 = widen8(type, row + 2 * d + 16);
      for (int i = 0; i < M; ++i) {
        even[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + size_t(i) * ldx + d), even[i]);
        odd[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + size_t(i) * ldx + d + 8), odd[i]);
      }
    }
    float tail[M] = {};
    for (; d < k; ++d) {
      float v;
      widen(type, row + 2 * d, 1, &v);
      for (int i = 0; i < M; ++i) tail[i] += v * x[size_t(i) * ldx + d];
    }
    for (int i = 0; i < M; ++i) {
      float& out = y[size_t(i) * ldy + j];
      out = (accumulate ? out : 0.0f) + sum8(_mm256_add_ps(even[i], odd[i])) + tail[i];
    }
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
  for (int i = 0; i < m; i += 4) {
    const float* xi = x + size_t(i) * ldx;
    float* yi = y + size_t(i) * ldy;
    switch (std::min(4, m - i)) {
      case 1: halves_rows<1>(xi, ldx, k, type, w, w_row_bytes, j0, j1, yi, ldy, accumulate); break;
      case 2: halves_rows<2>(xi, ldx, k, type, w, w_row_bytes, j0, j1, yi, ldy, accumulate); break;
      case 3: halves_rows<3>(xi, ldx, k, type, w, w_row_bytes, j0, j1, yi, ldy, accumulate); break;
      default: halves_rows<4>(xi, ldx, k, type, w, w_row_bytes, j0, j1, yi, ldy, accumulate); break;
    }
  }
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
