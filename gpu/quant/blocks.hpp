#pragma once
// The block types' layouts (GGUF's): writing fp32 values into blocks and reading them back, and checking a file's
// blocks before they are computed with. One function per direction for every dtype, the element types included.
//
//   q8_0  32 elements: f16 d; int8 q[32]                         x = d * q
//   q5_0  32 elements: f16 d; uint8 qh[4]; uint8 qs[16]           x = d * (q - 16), q = 5 bits: low nibble of qs[j]
//         (elements j < 16) or its high nibble (j + 16), fifth bit j of the 32-bit qh
//   q4_k  256 elements: f16 d, dmin; uint8 scales[12]; uint8 qs[128]   eight sub-blocks of 32, each with a 6-bit
//         scale sc and min m: x = d * sc * q - dmin * m; chunk c of 64 elements: low nibbles of qs[32c..32c+31],
//         then their high nibbles
//   q6_k  256 elements: uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d   sixteen sub-blocks of 16 with an int8
//         scale each: x = d * scale * (q - 32), q = 6 bits (low nibble in ql, two high bits in qh)
//   mxfp4 32 elements: uint8 e; uint8 qs[16]                    x = 2^(e - 128) * level[q], q = 4 bits: low nibble of
//         qs[j] (elements j < 16) or its high nibble (j + 16); level = twice the E2M1 value (OCP microscaling); e = 255
//         is not a number

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "gpu/dtype.hpp"

namespace illm::gpu {

/// Twice the E2M1 values of MXFP4's 4-bit codes (integers, so that products with int8 activations stay exact).
inline constexpr int8_t mxfp4_levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// The scale of an MXFP4 block of exponent e: 2^(e - 128), half the E8M0 value, matching mxfp4_levels; NaN for 255.
inline float mxfp4_scale(uint8_t e) {
  // 2^-128 and 2^-127 are subnormal (a mantissa bit); above, the exponent field is e - 1; 255 sets every bit.
  const uint32_t bits = e == 255 ? 0x7fc00000u : e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

/// Reads n elements of type t (n a multiple of block_elements(t)) into fp32.
void dequantize(dtype t, const void* src, size_t n, float* out);

/// Writes n fp32 values (n a multiple of block_elements(t)) as type t: rounded to nearest for f16 and bf16; for a
/// block type, scales from each block's range (and, for q4_k and q6_k, the sub-blocks' scales rounded to their
/// bits), then every value to its nearest level.
void quantize(dtype t, const float* src, size_t n, void* out);

/// Sub-block j (0..7)'s 6-bit scale and min in a q4_k block's 12 packed scale bytes `s`.
void q4_k_scale_min(int j, const uint8_t* s, int& scale, int& min);

/// The first element of the n at src (n a multiple of block_elements(t)) that is not finite, or that a block's
/// scale which is not finite makes unreadable; none when every one is.
std::optional<uint64_t> first_non_finite(dtype t, const void* src, uint64_t n);

}  // namespace illm::gpu
