#pragma once
// fp16 and bf16 on the host: rounding fp32 to nearest even and widening back, bit-exact with the
// device's __float2half_rn / __float2bfloat16_rn. Used to convert weights before upload and to give the
// cpu reference the same rounded KV that a 16-bit pool holds.

#include <cstdint>
#include <cstring>

#include "gpu/backend.hpp"

namespace illm::gpu {

/// The 16 bits stored at p (a scale or weight of a stored tensor, unaligned).
inline uint16_t read_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

/// The bits of a float.
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// fp32 to bf16, round to nearest even (NaN stays NaN).
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

/// fp32 to IEEE fp16, round to nearest even; overflow gives infinity, tiny values subnormals.
inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to infinity (>= 65520)
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal (units of 2^-24) or zero
    const uint32_t exponent = abs >> 23;
    const uint32_t shift = 126 - exponent;  // value = mantissa * 2^-24 >> shift
    if (exponent == 0 || shift > 24) return uint16_t(sign);
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  const uint32_t rebased = abs - (uint32_t(127 - 15) << 23);
  const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return uint16_t(sign | (rounded >> 13));
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float value = float(mantissa) * (1.0f / 16777216.0f);
    return bits_float(float_bits(value) | sign);
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

/// `value` rounded to `type` and widened back: what a pool of that type gives back.
inline float round_to(dtype type, float value) {
  switch (type) {
    case dtype::f16: return f16_to_float(float_to_f16(value));
    case dtype::bf16: return bf16_to_float(float_to_bf16(value));
    default: break;
  }
  return value;
}

/// Converts n floats to `type` (2 bytes each for f16 and bf16, a copy for f32; not a block type) into out.
inline void convert_floats(const float* in, size_t n, dtype type, void* out) {
  if (type == dtype::f32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  auto* o = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; ++i) o[i] = type == dtype::f16 ? float_to_f16(in[i]) : float_to_bf16(in[i]);
}

}  // namespace illm::gpu
