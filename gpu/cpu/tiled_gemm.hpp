#pragma once
// Block-type products as register tiles: 8 weight rows interleaved (value groups of 4 bytes from each row side by
// side, so one 32-byte vector holds the same 4 values of 8 rows) against 4 activation rows at a time. Each weight
// vector is read for 4 activation rows and each broadcast activation word for 8 weight rows; the integer sums of a
// block land in 8 lanes, one per weight row, and are scaled in one multiply-add for all 8 (the row-at-a-time kernels
// of typed_gemm.cpp reduce 8 lanes and scale once per row, block and activation row). u8 x s8 products with
// vpdpbusd where the processor has AVX-VNNI or AVX-512 VNNI, maddubs + madd with AVX2. Weight rows are interleaved
// per call, a panel of 32 rows at a time into a per-thread buffer that stays in L2, and read against every row of x.

#include <cstddef>
#include <cstdint>

#include "gpu/cpu/typed_gemm.hpp"
#include "gpu/dtype.hpp"

namespace illm::gpu::cpu {

/// Whether this build has a tiled kernel for `type` (x86 with AVX2) that is faster than reading each row in
/// registers (typed_gemm.cpp) at m rows of activations. Interleaving costs the same per call at any m: q8_0 pays it
/// back from 5 rows on; the k-quants, whose rows the other kernel decodes cheaply, from 17 (at 16 rows of a
/// Llama-3.2-1B-shaped Q4_K_M, 66 tok/s tiled against 69).
bool tiled_kernel_pays(dtype type, int m);

/// y[i][j] (+)= dot(x_i, w_j) for the rows of `x` (all m of them) and weight rows [j0, j1) of a type that
/// tiled_kernel_pays, the rows w_row_bytes apart. `x` must be quantized in type's block size.
void gemm_tiled(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                float* y, size_t ldy, bool accumulate);

}  // namespace illm::gpu::cpu
