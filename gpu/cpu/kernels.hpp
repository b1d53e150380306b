#pragma once
// Single-threaded CPU kernels; cpu_backend splits the work over its threads and calls these on slices.
// Layouts are those of gpu/backend.hpp.

#include <cstddef>
#include <cstdint>

#include "gpu/rope_frequencies.hpp"

#include "gpu/backend.hpp"

namespace illm::gpu::cpu {

/// y[i][j] (+)= dot(x[i], w[j]) for rows i < m and columns j in [j0, j1); fastest for m <= 4
/// (the decode path: each weight row is read once for all rows of x).
void gemv(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y, size_t ldy,
          bool accumulate);

/// Rows of up to skinny_rows_max tokens: x [m][k] transposed into xt [k][mp], mp = m rounded up to 16,
/// zero-padded.
void transpose_rows(const float* x, size_t ldx, int m, int k, float* xt, int mp);

/// Most rows of x that gemm_skinny takes (beyond: a general GEMM, whose packing pays off from there on).
inline constexpr int skinny_rows_max = 128;

/// y[i][j] (+)= dot(x[i], w[j]) for i < m and j in [j0, j1), from the transposed xt (transpose_rows):
/// the product of a decode batch (a few dozen rows) and a weight matrix without the packing that a
/// general GEMM does per call (which, at this shape, costs as much as the product).
void gemm_skinny(const float* xt, int mp, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                 size_t ldy, bool accumulate);

/// The same product through plain loops, for reference mode.
void gemm_reference(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                    size_t ldy, bool accumulate);

void rmsnorm_row(const float* x, const float* weight, int n, float eps, float* y);
void rope_table_row(int32_t pos, int head_dim, const rope_frequencies& freq, float* table);
void rope_row(float* x, int n_heads, int head_dim, const float* table);
void silu_mul_row(const float* gate, const float* up, int n, float* out);

}  // namespace illm::gpu::cpu
