#include "gpu/cpu/tiled_gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "gpu/cpu/simd.hpp"
#include "gpu/quant/blocks.hpp"
#include "gpu/quant/tiles.hpp"

namespace illm::gpu::cpu {

#if defined(__AVX2__)

namespace {

/// Weight rows side by side in a tile: one 32-bit lane each.
constexpr int tile_rows = rows_per_tile;
/// Tiles interleaved per panel: 32 rows, read against every row of x before the next panel.
constexpr int panel_tiles = 4;

#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
constexpr bool has_vnni = true;
#else
constexpr bool has_vnni = false;
#endif

/// The 8 x 8 transpose of 32-bit words: out[g] holds word g of in[0..8).
inline void transpose_words(const __m256i in[8], __m256i out[8]) {
  __m256i t[8], u[8];
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = _mm256_unpacklo_epi32(in[2 * p], in[2 * p + 1]);      // words 0 1 | 4 5 of the pair
    t[2 * p + 1] = _mm256_unpackhi_epi32(in[2 * p], in[2 * p + 1]);  // words 2 3 | 6 7
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
    __m256i* o = u + 4 * h;
    const __m256i* s = t + 4 * h;
    o[0] = _mm256_unpacklo_epi64(s[0], s[2]);  // word 0 | 4 of four rows
    o[1] = _mm256_unpackhi_epi64(s[0], s[2]);  // 1 | 5
    o[2] = _mm256_unpacklo_epi64(s[1], s[3]);  // 2 | 6
    o[3] = _mm256_unpackhi_epi64(s[1], s[3]);  // 3 | 7
  }
  for (int g = 0; g < 4; ++g) {
    out[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
    out[g + 4] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
  }
}

/// How a block type's rows are laid in a tile. Every type is read as groups of `group` values, each with one scale
/// per row, and levels that are unsigned (but for q8_0 without VNNI: signed, multiplied with the sign trick) less an
/// offset: an integer one, taken off in integers (q8_0's 128 with VNNI, where its levels are stored plus 128; q5_0's
/// 16; q6_k's 32), or q4_k's per-row min. A row's dot with activations x (block scale xs) is
///   sum over groups of  scale * xs * sum_e (level_e - offset) * q_e  -  min * xs * sum_e q_e.
struct layout {
  int group = 32;              ///< values per scale: 32, or 16 (q6_k)
  bool signed_levels = false;  ///< levels as stored (q8_0 without VNNI)
  int offset = 0;              ///< the integer offset of every level
  bool mins = false;           ///< a per-row, per-group min to take off (q4_k)
};

constexpr layout layout_of(dtype type) {
  switch (type) {
    case dtype::q8_0: return {32, !has_vnni, has_vnni ? 128 : 0, false};
    case dtype::q5_0: return {32, false, 16, false};
    case dtype::mxfp4: return {32, false, 12, false};
    case dtype::q6_k: return {16, false, 32, false};
    default: return {32, false, 0, true};
  }
}

/// A panel of block-type rows interleaved. For tile t and span s (values 32 s .. 32 s + 31 of each row): 8 vectors of
/// 32 bytes at levels[(t * spans + s) * 256], vector g holding levels 4g .. 4g + 3 of the span of row r in bytes
/// 4r .. 4r + 3; for each group of the span, 8 scales and 8 mins (one per row) at [(t * groups + group) * 8].
struct panel {
  int spans = 0, groups = 0;
  std::vector<uint8_t> storage;  // the levels, from its first 32-byte boundary (a vector load never splits a line)
  std::vector<float> scales, mins;

  /// The levels of span s of tile t.
  uint8_t* levels(int t, int s) { return storage.data() + level_offset(t, s); }
  const uint8_t* levels(int t, int s) const { return storage.data() + level_offset(t, s); }
  size_t level_offset(int t, int s) const {
    const auto at = reinterpret_cast<uintptr_t>(storage.data());
    return (32 - at % 32) % 32 + (size_t(t) * size_t(spans) + size_t(s)) * 256;
  }

  void resize(int k, int group) {
    spans = k / 32;
    groups = k / group;
    storage.resize(size_t(panel_tiles) * size_t(spans) * 256 + 32);
    scales.resize(size_t(panel_tiles) * size_t(groups) * tile_rows);
    mins.resize(scales.size());
  }
};

/// A row's levels of span s (values 32 s .. 32 s + 31), unsigned (q8_0: signed, or plus 128 with VNNI).
__m256i levels_q8_0(const uint8_t* row, int s) {
  const __m256i v = load32(row + size_t(s) * 34 + 2);
  return has_vnni ? _mm256_xor_si256(v, _mm256_set1_epi8(int8_t(-128))) : v;
}

__m256i levels_q5_0(const uint8_t* row, int s) {
  const uint8_t* blk = row + size_t(s) * 22;
  uint32_t qh;
  std::memcpy(&qh, blk + 2, 4);
  alignas(32) uint8_t levels[32];
  for (int j = 0; j < 16; ++j) {
    levels[j] = uint8_t((blk[6 + j] & 0x0f) | (((qh >> j) & 1u) << 4));
    levels[j + 16] = uint8_t((blk[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
  return load32(levels);
}

__m256i levels_mxfp4(const uint8_t* row, int s) {
  // The signed levels plus 12: unsigned, 0 .. 24.
  alignas(16) int8_t shifted[16];
  for (int c = 0; c < 16; ++c) shifted[c] = int8_t(mxfp4_levels[c] + 12);
  const uint8_t* blk = row + size_t(s) * 17;
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 1)), nibble = _mm_set1_epi8(0x0f);
  const __m256i split = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(codes, 4), nibble), _mm_and_si128(codes, nibble));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(shifted))), split);
}

__m256i levels_q4_k(const uint8_t* row, int s) {
  const int j = s % 8;  // the sub-block: low nibbles of chunk j / 2 for even j, high for odd
  const __m256i v = load32(row + size_t(s / 8) * 144 + 16 + 32 * (j / 2));
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  return j % 2 == 0 ? _mm256_and_si256(v, nibble) : _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
}

__m256i levels_q6_k(const uint8_t* row, int s) {
  const uint8_t* blk = row + size_t(s / 8) * 210;
  const int n = (s % 8) / 4, t = s % 4;  // the half of the block and the span within it
  const __m256i low = load32(blk + 64 * n + 32 * (t % 2)), high = load32(blk + 128 + 32 * n);
  const __m256i nibble = _mm256_set1_epi8(0x0f), top = _mm256_set1_epi8(0x30);
  // Spans 0-3 of a half: low nibbles of ql[0..32), of ql[32..64), then their high nibbles; qh bits 2t, 2t + 1.
  const __m256i l = t < 2 ? _mm256_and_si256(low, nibble) : _mm256_and_si256(_mm256_srli_epi16(low, 4), nibble);
  const __m256i shifted = t == 0 ? _mm256_slli_epi16(high, 4)
                          : t == 1 ? _mm256_slli_epi16(high, 2)
                          : t == 2 ? high
                                   : _mm256_srli_epi16(high, 2);
  return _mm256_or_si256(l, _mm256_and_si256(shifted, top));
}

__m256i span_levels(dtype type, const uint8_t* row, int s) {
  switch (type) {
    case dtype::q8_0: return levels_q8_0(row, s);
    case dtype::q5_0: return levels_q5_0(row, s);
    case dtype::mxfp4: return levels_mxfp4(row, s);
    case dtype::q4_k: return levels_q4_k(row, s);
    default: return levels_q6_k(row, s);
  }
}

/// Row r's scale and min of every group into the tile's arrays (group g's at [g * tile_rows + r]).
void group_scales(dtype type, const uint8_t* row, int k, int r, float* scales, float* mins) {
  const auto put = [&](int g, float scale, float min) {
    scales[size_t(g) * tile_rows + size_t(r)] = scale;
    mins[size_t(g) * tile_rows + size_t(r)] = min;
  };
  if (type == dtype::q8_0 || type == dtype::q5_0) {
    const size_t bytes = type == dtype::q8_0 ? 34 : 22;
    for (int b = 0; b < k / 32; ++b) put(b, read_half(row + size_t(b) * bytes), 0.0f);
  } else if (type == dtype::mxfp4) {
    for (int b = 0; b < k / 32; ++b) put(b, mxfp4_scale(row[size_t(b) * 17]), 0.0f);
  } else if (type == dtype::q4_k) {
    for (int b = 0; b < k / 256; ++b) {
      const uint8_t* blk = row + size_t(b) * 144;
      const float d = read_half(blk), dmin = read_half(blk + 2);
      for (int j = 0; j < 8; ++j) {
        int scale, min;
        q4_k_scale_min(j, blk + 4, scale, min);
        put(8 * b + j, d * float(scale), dmin * float(min));
      }
    }
  } else {
    for (int b = 0; b < k / 256; ++b) {
      const uint8_t* blk = row + size_t(b) * 210;
      const float d = read_half(blk + 208);
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      for (int g = 0; g < 16; ++g) put(16 * b + g, d * float(sc[g]), 0.0f);
    }
  }
}

/// Interleaves `rows` <= 8 rows of `type` (row_bytes apart) into tile t of the panel; missing rows are zero.
void interleave(dtype type, const uint8_t* w, size_t row_bytes, int rows, int t, panel& p, int k) {
  float* scales = p.scales.data() + size_t(t) * size_t(p.groups) * tile_rows;
  float* mins = p.mins.data() + size_t(t) * size_t(p.groups) * tile_rows;
  for (int r = 0; r < tile_rows; ++r) {
    if (r < rows) {
      group_scales(type, w + size_t(r) * row_bytes, k, r, scales, mins);
      continue;
    }
    for (int g = 0; g < p.groups; ++g) scales[size_t(g) * tile_rows + size_t(r)] = 0.0f;
    for (int g = 0; g < p.groups; ++g) mins[size_t(g) * tile_rows + size_t(r)] = 0.0f;
  }
  const size_t span_bytes = row_bytes / size_t(p.spans);  // about: the k-quants' scales lie among the spans
  for (int s = 0; s < p.spans; ++s) {
    __m256i in[8], out[8];
    for (int r = 0; r < tile_rows; ++r) {
      // The next tile's rows, read cold otherwise (the hardware's prefetchers stop at page ends).
      prefetch_lines(w + size_t(r + tile_rows) * row_bytes + size_t(s) * span_bytes, 1);
      in[r] = r < rows ? span_levels(type, w + size_t(r) * row_bytes, s) : _mm256_setzero_si256();
    }
    transpose_words(in, out);
    uint8_t* levels = p.levels(t, s);
    for (int g = 0; g < 8; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(levels + 32 * g), out[g]);
  }
}

/// acc + the 8 lanes' sums of 4 products each: levels times 4 broadcast activations.
template <bool Signed>
inline __m256i dot_words(__m256i acc, __m256i levels, int32_t activations) {
  const __m256i x = _mm256_set1_epi32(activations);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, levels, x);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, levels, x);
#else
  const __m256i products = Signed ? _mm256_maddubs_epi16(_mm256_sign_epi8(levels, levels), _mm256_sign_epi8(x, levels))
                                  : _mm256_maddubs_epi16(levels, x);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(products, _mm256_set1_epi16(1)));
#endif
}

inline int32_t word_at(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// total + one group's integer sums scaled, less its mins times the activations' sum over the group.
template <bool Mins>
inline __m256 add_group(__m256 total, __m256i sums, __m256 scales, __m256 mins, float xs, float xsum) {
  total = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(scales, _mm256_set1_ps(xs)), total);
  if constexpr (Mins) total = _mm256_fnmadd_ps(mins, _mm256_set1_ps(xsum), total);
  return total;
}

/// Tile t of a panel interleaved per call.
struct panel_tile {
  const panel& p;
  int t;
  int spans() const { return p.spans; }
  /// Word g (values 4g .. 4g + 3 of the 8 rows) of span s.
  __m256i level(int s, int g) const {
    return load32(p.levels(t, s) + 32 * size_t(g));
  }
  /// The 8 rows' scales and mins of a group.
  __m256 scale(int group) const { return _mm256_loadu_ps(p.scales.data() + index(group)); }
  __m256 min(int group) const { return _mm256_loadu_ps(p.mins.data() + index(group)); }
  size_t index(int group) const { return (size_t(t) * size_t(p.groups) + size_t(group)) * tile_rows; }
  void prefetch(int) const {}  // in L2 already
};

/// How far ahead of its reads a product with stored tiles asks for their cache lines: the hardware's prefetchers
/// stop at each 4 KiB page.
constexpr size_t stored_prefetch_distance = 4096;

/// Asks for the cache lines a stored tile's span s will be read from stored_prefetch_distance bytes on (at the
/// tile's average bytes per span: its blocks are read in order).
template <class Tile>
inline void prefetch_ahead(const Tile& tile, int s) {
  prefetch_lines(tile.base + size_t(s) * Tile::span_bytes + stored_prefetch_distance, int(Tile::span_bytes));
}

/// A q8_0 tile as stored (gpu/quant/tiles.hpp): 272 bytes per block of 32 columns.
struct stored_q8_0_tile {
  /// Up to how many rows of x a product reads the tile where it lies (more: expanded into a panel first). q8_0's
  /// levels are read as stored, but its blocks of 272 bytes put every other vector across two cache lines.
  static constexpr int read_in_place_rows = 64;
  static constexpr size_t span_bytes = 272;
  const uint8_t* base;
  int blocks;
  int spans() const { return blocks; }
  /// Stored plus 128: as they are with VNNI (layout_of's offset), signed again for the sign trick without.
  __m256i level(int s, int g) const {
    const __m256i v = load32(base + size_t(s) * 272 + 16 + 32 * size_t(g));
    return has_vnni ? v : _mm256_xor_si256(v, _mm256_set1_epi8(int8_t(-128)));
  }
  __m256 scale(int group) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + size_t(group) * 272)));
  }
  __m256 min(int) const { return _mm256_setzero_ps(); }
  void prefetch(int s) const { prefetch_ahead(*this, s); }
};

/// A q4_k tile as stored: 1152 bytes per super-block of 256 columns; span s is sub-block s % 8 of super-block s / 8.
struct stored_q4_k_tile {
  static constexpr int read_in_place_rows = 16;
  static constexpr size_t span_bytes = 144;
  const uint8_t* base;
  int blocks;
  int spans() const { return blocks * 8; }
  const uint8_t* super(int s) const { return base + size_t(s / 8) * 1152; }
  __m256i level(int s, int g) const {
    const int j = s % 8;  // low nibbles of chunk j / 2 for even j, high for odd
    const __m256i v = load32(super(s) + 128 + 256 * (j / 2) + 32 * g), nibble = _mm256_set1_epi8(0x0f);
    return j % 2 == 0 ? _mm256_and_si256(v, nibble) : _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
  }
  /// Sub-block j's 6-bit scales (High = 0) or mins (High = 2) of the 8 rows, times d or dmin.
  template <int High>
  __m256 sixbit(int s) const {
    const uint8_t* sb = super(s);
    const int j = s % 8;
    const __m256i low = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + 32 + 8 * j)));
    int32_t word;
    std::memcpy(&word, sb + 96 + 4 * j, 4);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), _mm256_add_epi32(shifts,
                                          _mm256_set1_epi32(High))), _mm256_set1_epi32(3));
    const __m256i nibble = High == 0 ? _mm256_and_si256(low, _mm256_set1_epi32(15)) : _mm256_srli_epi32(low, 4);
    const __m256i six = _mm256_or_si256(nibble, _mm256_slli_epi32(high, 4));
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + (High == 0 ? 0 : 16))));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(six));
  }
  __m256 scale(int s) const { return sixbit<0>(s); }
  __m256 min(int s) const { return sixbit<2>(s); }
  void prefetch(int s) const { prefetch_ahead(*this, s); }
};

/// A tile against R activation rows from row i: row r's 8 sums in out[r].
template <layout L, int R, class Tile>
void tile_product(const Tile& tile, const quantized_rows& x, int i, __m256 out[R]) {
  const int8_t* xq[R];
  const float *xs[R], *xsums[R];
  const int32_t* xlevel_sums[R];
  for (int r = 0; r < R; ++r) {
    xq[r] = x.q.data() + size_t(i + r) * size_t(x.k);
    xs[r] = x.scale.data() + size_t(i + r) * size_t(x.k / x.block);
    xsums[r] = x.sums.data() + size_t(i + r) * size_t(x.k / 16);
    xlevel_sums[r] = x.level_sums.data() + size_t(i + r) * size_t(x.k / 16);
    out[r] = _mm256_setzero_ps();
  }
  constexpr int groups_per_span = 32 / L.group;
  const int spans = tile.spans();
  for (int s = 0; s < spans; ++s) {
    tile.prefetch(s);
    // Values 0-15 and 16-31 of the span in two accumulators per row (2 R sums in flight; with group 16, one group
    // each), which start from -offset times their activations' sum.
    __m256i first[R], second[R];
    for (int r = 0; r < R; ++r) {
      const int32_t* sums = xlevel_sums[r] + 2 * s;
      first[r] = _mm256_set1_epi32(-L.offset * (L.group == 16 ? sums[0] : sums[0] + sums[1]));
      second[r] = _mm256_set1_epi32(L.group == 16 ? -L.offset * sums[1] : 0);
    }
    for (int g = 0; g < 4; ++g) {
      const __m256i a = tile.level(s, g), b = tile.level(s, g + 4);
      for (int r = 0; r < R; ++r) {
        first[r] = dot_words<L.signed_levels>(first[r], a, word_at(xq[r] + 32 * s + 4 * g));
        second[r] = dot_words<L.signed_levels>(second[r], b, word_at(xq[r] + 32 * s + 4 * g + 16));
      }
    }
    const int group = s * groups_per_span;
    const __m256 scales = tile.scale(group), mins = L.mins ? tile.min(group) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const float block_scale = xs[r][32 * s / x.block];
      const float* sums16 = xsums[r] + 2 * s;
      if constexpr (groups_per_span == 1) {
        out[r] = add_group<L.mins>(out[r], _mm256_add_epi32(first[r], second[r]), scales, mins, block_scale,
                                   sums16[0] + sums16[1]);
      } else {
        out[r] = add_group<L.mins>(out[r], first[r], scales, mins, block_scale, sums16[0]);
        out[r] = add_group<L.mins>(out[r], second[r], tile.scale(group + 1), tile.min(group + 1), block_scale,
                                   sums16[1]);
      }
    }
  }
}

/// y[i + r][j .. j + columns) (+)= the tile's sums for activation rows i .. i + R.
template <layout L, int R, class Tile>
void tile_rows_into(const Tile& tile, const quantized_rows& x, int i, float* y, size_t ldy, int columns,
                    bool accumulate) {
  __m256 out[R];
  tile_product<L, R>(tile, x, i, out);
  for (int r = 0; r < R; ++r) {
    float sums[tile_rows];
    _mm256_storeu_ps(sums, out[r]);
    float* row = y + size_t(i + r) * ldy;
    for (int c = 0; c < columns; ++c) row[c] = (accumulate ? row[c] : 0.0f) + sums[c];
  }
}

/// tile_rows_into for the next 4 (or the last 1-3) of m activation rows from row i.
template <layout L, class Tile>
void tile_rows_of(const Tile& tile, const quantized_rows& x, int i, int m, float* y, size_t ldy, int columns,
                  bool accumulate) {
  switch (std::min(4, m - i)) {
    case 1: return tile_rows_into<L, 1>(tile, x, i, y, ldy, columns, accumulate);
    case 2: return tile_rows_into<L, 2>(tile, x, i, y, ldy, columns, accumulate);
    case 3: return tile_rows_into<L, 3>(tile, x, i, y, ldy, columns, accumulate);
    default: return tile_rows_into<L, 4>(tile, x, i, y, ldy, columns, accumulate);
  }
}

/// The product for one type's layout: panels of 32 rows interleaved, each read against every row of x.
template <layout L>
void gemm_panels(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                 float* y, size_t ldy, bool accumulate) {
  thread_local panel p;
  p.resize(x.k, L.group);
  for (int jp = j0; jp < j1; jp += panel_tiles * tile_rows) {
    const int tiles = std::min(panel_tiles, (j1 - jp + tile_rows - 1) / tile_rows);
    for (int t = 0; t < tiles; ++t)
      interleave(type, w + size_t(jp + t * tile_rows) * w_row_bytes, w_row_bytes,
                 std::min(tile_rows, j1 - jp - t * tile_rows), t, p, x.k);
    for (int i = 0; i < m; i += 4)
      for (int t = 0; t < tiles; ++t) {
        const int j = jp + t * tile_rows, columns = std::min(tile_rows, j1 - j);
        tile_rows_of<L>(panel_tile{p, t}, x, i, m, y + j, ldy, columns, accumulate);
      }
  }
}

/// A stored tile's levels and scales written into tile t of a panel, in the form the panel's readers take.
template <class Tile>
void expand(const Tile& tile, panel& p, int t) {
  for (int s = 0; s < p.spans; ++s) {
    uint8_t* levels = p.levels(t, s);
    for (int g = 0; g < 8; ++g) _mm256_storeu_si256(reinterpret_cast<__m256i*>(levels + 32 * g), tile.level(s, g));
  }
  const panel_tile into{p, t};
  for (int group = 0; group < p.groups; ++group) {
    _mm256_storeu_ps(p.scales.data() + into.index(group), tile.scale(group));
    _mm256_storeu_ps(p.mins.data() + into.index(group), tile.min(group));
  }
}

/// The product with a matrix stored in tiles: panels of 4 tiles (in L2), each read against every 4 rows of x. Tiles
/// whose levels take work to read (q4_k's nibbles, its 6-bit scales) are expanded once per call into a panel when
/// more than 4 rows will read them.
template <layout L, class Tile>
void gemm_stored(const quantized_rows& x, int m, const uint8_t* w, size_t tile_bytes, int blocks, int t0, int t1,
                 float* y, size_t ldy, bool accumulate) {
  const bool expanded = m > Tile::read_in_place_rows;
  thread_local panel p;
  if (expanded) p.resize(x.k, L.group);
  for (int tp = t0; tp < t1; tp += panel_tiles) {
    const int tp_end = std::min(t1, tp + panel_tiles);
    if (expanded)
      for (int t = tp; t < tp_end; ++t) expand(Tile{w + size_t(t) * tile_bytes, blocks}, p, t - tp);
    for (int i = 0; i < m; i += 4)
      for (int t = tp; t < tp_end; ++t) {
        float* yt = y + size_t(t) * tile_rows;
        if (expanded) tile_rows_of<L>(panel_tile{p, t - tp}, x, i, m, yt, ldy, tile_rows, accumulate);
        else tile_rows_of<L>(Tile{w + size_t(t) * tile_bytes, blocks}, x, i, m, yt, ldy, tile_rows, accumulate);
      }
  }
}

}  // namespace

bool stored_tiles_pay() { return true; }

bool tiled_kernel_pays(dtype type, int m) {
  if (type == dtype::q8_0 || type == dtype::mxfp4) return m > 4;
  return (type == dtype::q5_0 || type == dtype::q4_k || type == dtype::q6_k) && m > 16;
}

void gemm_tiled(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int j0, int j1,
                float* y, size_t ldy, bool accumulate) {
  switch (type) {
    case dtype::q8_0:
      return gemm_panels<layout_of(dtype::q8_0)>(x, m, type, w, w_row_bytes, j0, j1, y, ldy, accumulate);
    case dtype::q5_0:
      return gemm_panels<layout_of(dtype::q5_0)>(x, m, type, w, w_row_bytes, j0, j1, y, ldy, accumulate);
    case dtype::mxfp4:
      return gemm_panels<layout_of(dtype::mxfp4)>(x, m, type, w, w_row_bytes, j0, j1, y, ldy, accumulate);
    case dtype::q6_k:
      return gemm_panels<layout_of(dtype::q6_k)>(x, m, type, w, w_row_bytes, j0, j1, y, ldy, accumulate);
    default: return gemm_panels<layout_of(dtype::q4_k)>(x, m, type, w, w_row_bytes, j0, j1, y, ldy, accumulate);
  }
}

void gemm_stored_tiles(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int t0,
                       int t1, float* y, size_t ldy, bool accumulate) {
  const size_t tile_bytes = w_row_bytes * tile_rows;
  const int blocks = int(size_t(x.k) / block_elements(type));
  switch (type) {
    case dtype::q8_0:
      return gemm_stored<layout_of(dtype::q8_0), stored_q8_0_tile>(x, m, w, tile_bytes, blocks, t0, t1, y, ldy,
                                                                   accumulate);
    default:
      return gemm_stored<layout_of(dtype::q4_k), stored_q4_k_tile>(x, m, w, tile_bytes, blocks, t0, t1, y, ldy,
                                                                   accumulate);
  }
}

#else

bool stored_tiles_pay() { return false; }

bool tiled_kernel_pays(dtype, int) { return false; }

void gemm_stored_tiles(const quantized_rows& x, int m, dtype type, const uint8_t* w, size_t w_row_bytes, int t0,
                       int t1, float* y, size_t ldy, bool accumulate) {
  // No tiled kernels in this build: each tile's rows back in the file's layout, then the row kernels.
  thread_local std::vector<uint8_t> rows;
  rows.resize(w_row_bytes * rows_per_tile);
  for (int t = t0; t < t1; ++t) {
    for (int r = 0; r < rows_per_tile; ++r)
      untile_row(type, w, size_t(x.k), size_t(t) * rows_per_tile + size_t(r), rows.data() + size_t(r) * w_row_bytes);
    gemm_blocks(x, m, type, rows.data(), w_row_bytes, 0, rows_per_tile, y + size_t(t) * rows_per_tile, ldy, accumulate);
  }
}

void gemm_tiled(const quantized_rows&, int, dtype, const uint8_t*, size_t, int, int, float*, size_t, bool) {}

#endif

}  // namespace illm::gpu::cpu
