#pragma once
// Block-type products as register tiles: 8 weight rows interleaved (value groups of 4 bytes from each row side by
// side, so one 32-byte vector holds the same 4 values of 8 rows) against 4 activation rows at a time. Each weight
// vector is read for 4 activation rows and each broadcast activation word for 8 weight rows; the integer sums of a
// block land in 8 lanes, one per weight row, and are scaled in one multiply-add for all 8 (the row-at-a-time kernels
// of typed_gemm.cpp reduce 8 lanes and scale once per row, block and activation row). u8 x s8 products with
// vpdpbusd where the processor has AVX-VNNI or AVX-512 VNNI, maddubs + madd with AVX2. Weight rows are interleaved
// per call, a panel of 32 rows at a time into a per-thread buffer that stays in L2, and read against every row of x;
// q8_0 and q4_k matrices are stored in tiles at load (gpu/quant/tiles.hpp) and read where they lie (q8_0 up to 64
// rows of x, q4_k up to 16; above that expanded once per call into a panel that every 4-row group reads, where they
// would otherwise split cache lines or unpack nibbles and 6-bit scales again and again), asking for their cache
// lines 4 KiB ahead. Against the file layout's kernels, 2 threads of an AVX-512 VNNI Xeon, 1 / 16 / 64 / 512 rows
// of x: q8_0 4096 x 14336 1.23 / 1.71 / 1.49 / 1.05x, q4_k 1.00 / 1.30 / 1.14 / 1.05x.

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

/// Whether block-type matrices are best stored in tiles (gpu/quant/tiles.hpp) for this build's kernels: where the
/// tiled kernels exist (x86 with AVX2), which then serve every batch size from those tiles.
bool stored_tiles_pay();

/// y[i][8t + r] (+)= dot(x_i, row r of tile t) for tiles [t0, t1) of a matrix of `type` (has_tile_layout) stored in
/// tiles, its rows w_row_bytes long. `x` must be quantized in type's block size.
void gemm_stored_tiles(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int t0,
                       int t1, float* y, size_t ldy, bool accumulate);

}  // namespace illm::gpu::cpu
