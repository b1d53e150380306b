#include "gpu/cpu/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "gpu/cpu/simd.hpp"

namespace illm::gpu::cpu {

namespace {

/// The register the products hold their accumulators in: 16 floats where the CPU has AVX-512 (32 registers), 8
/// where it has AVX2 (16 registers). A vector wider than the registers (GCC splits an f32x16 into two ymm) would
/// leave a tile more accumulators than the registers hold, and a spilled tile runs at a fiftieth of the speed.
#if defined(__AVX512F__)
using native = f32x16;
inline constexpr int native_lanes = 16;
inline constexpr int tile_columns = 8;  ///< weight rows a tile holds: 2 x 8 accumulators of 32 registers
#elif defined(__AVX__)
using native = float __attribute__((vector_size(32)));
inline constexpr int native_lanes = 8;
inline constexpr int tile_columns = 6;  ///< weight rows a tile holds: 2 x 6 accumulators, 2 x vectors, 1 weight
#else
using native = float __attribute__((vector_size(16)));  // SSE: 16 registers of 4 floats
inline constexpr int native_lanes = 4;
inline constexpr int tile_columns = 6;
#endif

inline native load_native(const float* p) {
  native v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The first n < native_lanes floats at p, zero in the other lanes.
inline native load_partial_native(const float* p, int n) {
  native v{};
  std::memcpy(&v, p, sizeof(float) * size_t(n));
  return v;
}

inline float reduce_native(native v) {
#if defined(__AVX512F__)
  return reduce_add(v);
#elif defined(__AVX__)
  const f32x4 s4 = low4(v) + high4(v);
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
#else
  return (v[0] + v[2]) + (v[1] + v[3]);
#endif
}

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
    native even[M] = {}, odd[M] = {};
    int d = 0;
    for (; d + 2 * native_lanes <= k; d += 2 * native_lanes) {
      const native w0 = load_native(row + d), w1 = load_native(row + d + native_lanes);
      for (int i = 0; i < M; ++i) {
        even[i] += w0 * load_native(x + size_t(i) * ldx + d);
        odd[i] += w1 * load_native(x + size_t(i) * ldx + d + native_lanes);
      }
    }
    for (; d < k; d += native_lanes) {
      const int n = std::min(native_lanes, k - d);
      const native w0 = n == native_lanes ? load_native(row + d) : load_partial_native(row + d, n);
      for (int i = 0; i < M; ++i)
        even[i] += w0 * (n == native_lanes ? load_native(x + size_t(i) * ldx + d)
                                           : load_partial_native(x + size_t(i) * ldx + d, n));
    }
    for (int i = 0; i < M; ++i) {
      float& out = y[size_t(i) * ldy + j];
      out = (accumulate ? out : 0.0f) + reduce_native(even[i] + odd[i]);
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
  native acc[JB][MV] = {};
  const float* wr = w + size_t(j) * ldw;
  for (int d = 0; d < k; ++d) {
    native xv[MV];
    for (int v = 0; v < MV; ++v) xv[v] = load_native(xt + size_t(d) * mp + v * native_lanes);
    for (int r = 0; r < JB; ++r) {
      const float wv = wr[size_t(r) * ldw + d];
      for (int v = 0; v < MV; ++v) acc[r][v] += wv * xv[v];
    }
  }
  for (int r = 0; r < JB; ++r) {
    float column[MV * native_lanes];
    std::memcpy(column, acc[r], sizeof column);
    for (int i = 0; i < m; ++i) {
      float& out = y[size_t(i) * ldy + j + r];
      out = (accumulate ? out : 0.0f) + column[i];
    }
  }
}

/// Up to 2 vectors of rows: tiles of tile_columns weight rows, the rest one by one.
template <int MV>
void skinny_columns(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                    size_t ldy, bool accumulate) {
  int j = j0;
  for (; j + tile_columns <= j1; j += tile_columns)
    skinny_block<MV, tile_columns>(xt, mp, m, k, w, ldw, j, y, ldy, accumulate);
  for (; j < j1; ++j) skinny_block<MV, 1>(xt, mp, m, k, w, ldw, j, y, ldy, accumulate);
}

/// More rows than 2 vectors: each tile of weight rows against every group of 2 vectors of rows in turn. Every pass
/// over k then reads a group's few vectors of xt per step (a whole xt of 64 rows at k = 288 is 72 KiB, over L1),
/// and the tile's weight rows, just read, come again from L1.
void skinny_columns_grouped(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j0, int j1,
                            float* y, size_t ldy, bool accumulate) {
  constexpr int group = 2 * native_lanes;
  auto block = [&](int j, auto width) {
    for (int i0 = 0; i0 < m; i0 += group) {
      const int rows = std::min(group, m - i0);
      float* yi = y + size_t(i0) * ldy;
      if (rows > native_lanes)
        skinny_block<2, width()>(xt + i0, mp, rows, k, w, ldw, j, yi, ldy, accumulate);
      else
        skinny_block<1, width()>(xt + i0, mp, rows, k, w, ldw, j, yi, ldy, accumulate);
    }
  };
  int j = j0;
  for (; j + tile_columns <= j1; j += tile_columns) block(j, std::integral_constant<int, tile_columns>{});
  for (; j < j1; ++j) block(j, std::integral_constant<int, 1>{});
}

}  // namespace

void gemm_skinny(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                 size_t ldy, bool accumulate) {
  switch ((mp + native_lanes - 1) / native_lanes) {
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
  const double magnitude = freq.magnitude();
  for (int i = 0; i < head_dim / 2; ++i) {
    const double angle = double(pos) * freq.inverse(i, head_dim);
    table[2 * i] = float(magnitude * std::cos(angle));
    table[2 * i + 1] = float(magnitude * std::sin(angle));
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
