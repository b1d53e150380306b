#include "gpu/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "gpu/cpu/simd.hpp"

namespace illm::gpu::cpu {

namespace {

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

void transpose_rows(const float* x, size_t ldx, int m, int k, float* xt, int mp) {
  for (int d = 0; d < k; ++d) {
    float* row = xt + size_t(d) * mp;
    for (int i = 0; i < m; ++i) row[i] = x[size_t(i) * ldx + d];
    for (int i = m; i < mp; ++i) row[i] = 0.0f;
  }
}

namespace {

/// JB weight rows against MV vectors of x rows (transposed): each step over k broadcasts one weight per
/// row and reuses the loaded x vectors JB times; no horizontal sums.
template <int MV, int JB>
void skinny_block(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j, float* y, size_t ldy,
                  bool accumulate) {
  f32x16 acc[JB][MV] = {};
  const float* wr = w + size_t(j) * ldw;
  for (int d = 0; d < k; ++d) {
    f32x16 xv[MV];
    for (int v = 0; v < MV; ++v) xv[v] = load16(xt + size_t(d) * mp + v * lanes);
    for (int r = 0; r < JB; ++r) {
      const float wv = wr[size_t(r) * ldw + d];
      for (int v = 0; v < MV; ++v) acc[r][v] += wv * xv[v];
    }
  }
  for (int r = 0; r < JB; ++r) {
    float column[MV * lanes];
    for (int v = 0; v < MV; ++v) store16(column + v * lanes, acc[r][v]);
    for (int i = 0; i < m; ++i) {
      float& out = y[size_t(i) * ldy + j + r];
      out = (accumulate ? out : 0.0f) + column[i];
    }
  }
}

template <int MV>
void skinny_columns(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                    size_t ldy, bool accumulate) {
  constexpr int jb = MV <= 2 ? 8 : 4;  // enough independent accumulators to cover the FMA latency
  int j = j0;
  for (; j + jb <= j1; j += jb) skinny_block<MV, jb>(xt, mp, m, k, w, ldw, j, y, ldy, accumulate);
  for (; j < j1; ++j) skinny_block<MV, 1>(xt, mp, m, k, w, ldw, j, y, ldy, accumulate);
}

/// More than 32 rows: each block of 8 weight rows against every group of 32 rows in turn. Every pass over k then
/// reads 128 bytes of xt per step (at 64 rows and k = 288 a whole xt is 72 KiB, over L1, and the 64-row kernel
/// re-read it from L2 for every 4 weight rows), and the block's weight rows, just read, come again from L1.
void skinny_columns_grouped(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j0, int j1,
                            float* y, size_t ldy, bool accumulate) {
  constexpr int group = 2 * lanes, jb = 8;
  auto block = [&](int j, auto width) {
    for (int i0 = 0; i0 < m; i0 += group) {
      const int rows = std::min(group, m - i0);
      float* yi = y + size_t(i0) * ldy;
      if (rows > lanes)
        skinny_block<2, width()>(xt + i0, mp, rows, k, w, ldw, j, yi, ldy, accumulate);
      else
        skinny_block<1, width()>(xt + i0, mp, rows, k, w, ldw, j, yi, ldy, accumulate);
    }
  };
  int j = j0;
  for (; j + jb <= j1; j += jb) block(j, std::integral_constant<int, jb>{});
  for (; j < j1; ++j) block(j, std::integral_constant<int, 1>{});
}

}  // namespace

void gemm_skinny(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                 size_t ldy, bool accumulate) {
  switch (mp / lanes) {
    case 1: skinny_columns<1>(xt, mp, m, k, w, ldw, j0, j1, y, ldy, accumulate); break;
    case 2: skinny_columns<2>(xt, mp, m, k, w, ldw, j0, j1, y, ldy, accumulate); break;
    default: skinny_columns_grouped(xt, mp, m, k, w, ldw, j0, j1, y, ldy, accumulate); break;
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

void rope_table_row(int32_t pos, int head_dim, const rope_frequencies& freq, float* table) {
  for (int i = 0; i < head_dim / 2; ++i) {
    const double angle = double(pos) * freq.inverse(i, head_dim);
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

}  // namespace illm::gpu::cpu
