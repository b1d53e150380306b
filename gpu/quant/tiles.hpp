#pragma once
// Block-type matrices stored in tiles: 8 rows interleaved block by block, so that the cpu's register-tiled products
// (gpu/cpu/tiled_gemm.hpp) read 8 weight rows with each vector and stream a tile's bytes in order. A tile takes the
// bytes its 8 rows take in the file's layout (only the bytes move), and tile t lies where rows 8t..8t+7 lay.
//
//   q8_0  per block of 32 columns (272 bytes): the 8 rows' f16 d (row r's at 2r), then 8 words of 32 bytes: word g
//         holds levels 4g..4g+3 of every row, plus 128 (unsigned, as vpdpbusd takes them), row r's at byte 4r
//   q4_k  per super-block of 256 columns (1152 bytes): the 8 rows' f16 d, then their f16 dmin (16 bytes each); the
//         6-bit scales and mins of the 8 sub-blocks: low nibble of scale | low nibble of min << 4 at 32 + 8j + r
//         (sub-block j, row r), their two high bits in a 32-bit word per sub-block at 96 + 4j (row r's scale at bits
//         4r, 4r + 1, its min at 4r + 2, 4r + 3); then the nibbles: chunk c (256 bytes at 128 + 256c) holds word g
//         (bytes 4g..4g+3 of the row's qs[32c..32c+31]) of row r at 32g + 4r
// q6_k is not stored in tiles: its levels take 4-5 operations a vector to read from tiles, and its row-at-a-time
// kernels measured faster up to 16 rows (2048 x 32768 and 4096 x 14336 at 16 rows: tiles 0.75-0.97x).

#include <cstddef>
#include <cstdint>

#include "gpu/dtype.hpp"

namespace illm::gpu {

/// Rows per tile.
inline constexpr int rows_per_tile = 8;

/// Whether matrices of `type` can be stored in tiles.
constexpr bool has_tile_layout(dtype type) { return type == dtype::q8_0 || type == dtype::q4_k; }

/// Rearranges `rows` rows of `cols` elements of `type` (has_tile_layout; rows a multiple of rows_per_tile) from the
/// file's layout into tiles, in place.
void tile_rows_in_place(dtype type, uint8_t* data, size_t rows, size_t cols);

/// Row r of a matrix of `cols` elements per row stored in tiles, in the file's layout: row_bytes(type, cols) bytes
/// into `out`.
void untile_row(dtype type, const uint8_t* tiled, size_t cols, size_t r, uint8_t* out);

}  // namespace illm::gpu
