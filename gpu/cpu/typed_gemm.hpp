#pragma once
// Products with weights stored in 16-bit and block types (gpu/dtype.hpp), single-threaded on slices of weight rows
// (cpu_backend splits the work). Block-type weights are multiplied in integers, as llama.cpp does: the activations
// are quantized to int8 in blocks of the weights' block size (32 for q8_0, q5_0 and mxfp4, 256 for q4_k and q6_k)
// with one fp32 scale each. With AVX2, q8_0, mxfp4, q4_k and q6_k rows are decoded in registers, each against 4
// activation rows at a time (q8_0 and mxfp4 two weight rows at a time); q5_0, and every type without AVX2, has each
// weight row unpacked once per call into levels with 16-bit sub-block scales, one kernel for every block type.
// Batches of more rows, where tiled_kernel_pays, go to the register tiles of tiled_gemm.hpp.
// 16-bit weights are widened to fp32 in registers, in tiles of weight rows by rows of x (half_gemm.cpp).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/dtype.hpp"

namespace illm::gpu::cpu {

/// Activation rows quantized for block-type weights: row i's value e is q[i][e] * scale[i][e / block].
struct quantized_rows {
  int k = 0;      ///< values per row
  int block = 0;  ///< values per scale: the weights' block_elements
  std::vector<int8_t> q;     ///< [rows][k]
  std::vector<float> scale;  ///< [rows][k / block]: max |x| / 127 of the block (fp16-rounded for blocks of 32)
  std::vector<float> sums;   ///< [rows][k / 16]: the sum of each 16 values of q, times their scale
  std::vector<int32_t> level_sums;  ///< [rows][k / 16]: the sum of each 16 values of q
  /// Sizes the arrays for m rows of k values in blocks of `block`.
  void resize(int m, int k, int block);
  /// Quantizes rows [i0, i1) of x (rows ldx apart).
  void quantize(const float* x, size_t ldx, int i0, int i1);
  /// Row i's values as the products see them (q * scale), for the reference.
  void dequantize(int i, float* out) const;
};

/// y[i][j] (+)= dot(x_i, w_j) for the rows of `x` (all m of them) and weight rows [j0, j1) of block type `type`, the
/// rows w_row_bytes apart. `x` must be quantized in type's block size.
void gemm_blocks(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                 float* y, size_t ldy, bool accumulate);

/// Whether gemm_halves widens the weights in registers (x86 with AVX2 and F16C), so that it serves batches too;
/// elsewhere it widens a row at a time into memory and suits only the decode path's few rows.
#if defined(__AVX2__) && defined(__F16C__)
inline constexpr bool halves_in_registers = true;
#else
inline constexpr bool halves_in_registers = false;
#endif

/// y[i][j] (+)= dot(x_i, w_j) for x [m][k] (rows ldx apart) and weight rows [j0, j1) of f16 or bf16, the rows
/// w_row_bytes apart.
void gemm_halves(const float* x, size_t ldx, int m, int k, dtype type, const uint8_t* w, size_t w_row_bytes, int j0,
                 int j1, float* y, size_t ldy, bool accumulate);

/// Widens n values of f32, f16 or bf16 to fp32.
void widen(dtype type, const uint8_t* src, int n, float* out);

}  // namespace illm::gpu::cpu
