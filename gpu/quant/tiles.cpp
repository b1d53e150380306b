#include "gpu/quant/tiles.hpp"

#include <cstring>
#include <vector>

#include "gpu/quant/blocks.hpp"

namespace illm::gpu {

namespace {

constexpr size_t q8_0_levels = 16;   // where a q8_0 tile block's words start
constexpr size_t q4_k_nibbles = 128;  // where a q4_k tile block's chunks start

/// Row r's 32 bytes `in` into the 256 bytes of an interleaved chunk (word g, bytes 4g..4g+3, at 32g + 4r), each byte
/// xor `flip`.
void put_words(const uint8_t* in, int r, uint8_t* chunk, uint8_t flip = 0) {
  for (int g = 0; g < 8; ++g)
    for (int e = 0; e < 4; ++e) chunk[32 * g + 4 * r + e] = in[4 * g + e] ^ flip;
}

/// The inverse: row r's 32 bytes of an interleaved chunk into `out`.
void get_words(const uint8_t* chunk, int r, uint8_t* out, uint8_t flip = 0) {
  for (int g = 0; g < 8; ++g)
    for (int e = 0; e < 4; ++e) out[4 * g + e] = chunk[32 * g + 4 * r + e] ^ flip;
}

/// The 8 rows' blocks `rows[r]` of q8_0 as one tile block.
void tile_q8_0(const uint8_t* const rows[rows_per_tile], uint8_t* out) {
  for (int r = 0; r < rows_per_tile; ++r) {
    std::memcpy(out + 2 * r, rows[r], 2);
    put_words(rows[r] + 2, r, out + q8_0_levels, 0x80);
  }
}

void untile_q8_0(const uint8_t* tile, int r, uint8_t* out) {
  std::memcpy(out, tile + 2 * r, 2);
  get_words(tile + q8_0_levels, r, out + 2, 0x80);
}

uint32_t read_word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void tile_q4_k(const uint8_t* const rows[rows_per_tile], uint8_t* out) {
  uint32_t high[8] = {};
  for (int r = 0; r < rows_per_tile; ++r) {
    std::memcpy(out + 2 * r, rows[r], 2);
    std::memcpy(out + 16 + 2 * r, rows[r] + 2, 2);
    for (int j = 0; j < 8; ++j) {
      int scale, min;
      q4_k_scale_min(j, rows[r] + 4, scale, min);
      out[32 + 8 * j + r] = uint8_t((scale & 15) | ((min & 15) << 4));
      high[j] |= uint32_t((scale >> 4) | ((min >> 4) << 2)) << (4 * r);
    }
    for (int c = 0; c < 4; ++c) put_words(rows[r] + 16 + 32 * c, r, out + q4_k_nibbles + 256 * c);
  }
  std::memcpy(out + 96, high, sizeof high);
}

void untile_q4_k(const uint8_t* tile, int r, uint8_t* out) {
  std::memcpy(out, tile + 2 * r, 2);
  std::memcpy(out + 2, tile + 16 + 2 * r, 2);
  int scale[8], min[8];
  for (int j = 0; j < 8; ++j) {
    const uint32_t high = read_word(tile + 96 + 4 * j) >> (4 * r);
    const uint8_t low = tile[32 + 8 * j + r];
    scale[j] = (low & 15) | int((high & 3) << 4);
    min[j] = (low >> 4) | int(((high >> 2) & 3) << 4);
  }
  uint8_t* s = out + 4;  // q4_k_scale_min's packing, inverted
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t((min[j] & 63) | ((min[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((scale[j + 4] & 15) | ((min[j + 4] & 15) << 4));
  }
  for (int c = 0; c < 4; ++c) get_words(tile + q4_k_nibbles + 256 * c, r, out + 16 + 32 * c);
}

void tile_block(dtype type, const uint8_t* const rows[rows_per_tile], uint8_t* out) {
  if (type == dtype::q8_0) tile_q8_0(rows, out);
  else tile_q4_k(rows, out);
}

void untile_block(dtype type, const uint8_t* tile, int r, uint8_t* out) {
  if (type == dtype::q8_0) untile_q8_0(tile, r, out);
  else untile_q4_k(tile, r, out);
}

}  // namespace

void tile_rows_in_place(dtype type, uint8_t* data, size_t rows, size_t cols) {
  const size_t bytes = row_bytes(type, cols), block = block_bytes(type), blocks = cols / block_elements(type);
  std::vector<uint8_t> file(bytes * rows_per_tile);
  for (size_t t = 0; t < rows / rows_per_tile; ++t) {
    uint8_t* tile = data + t * rows_per_tile * bytes;
    std::memcpy(file.data(), tile, file.size());
    for (size_t b = 0; b < blocks; ++b) {
      const uint8_t* row_blocks[rows_per_tile];
      for (int r = 0; r < rows_per_tile; ++r) row_blocks[r] = file.data() + size_t(r) * bytes + b * block;
      tile_block(type, row_blocks, tile + b * block * rows_per_tile);
    }
  }
}

void untile_row(dtype type, const uint8_t* tiled, size_t cols, size_t r, uint8_t* out) {
  const size_t bytes = row_bytes(type, cols), block = block_bytes(type), blocks = cols / block_elements(type);
  const uint8_t* tile = tiled + r / rows_per_tile * rows_per_tile * bytes;
  for (size_t b = 0; b < blocks; ++b) {
    untile_block(type, tile + b * block * rows_per_tile, int(r % rows_per_tile), out + b * block);
  }
}

}  // namespace illm::gpu
