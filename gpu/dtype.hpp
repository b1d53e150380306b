#pragma once
// Element types of weights and KV blocks: one value per element (f32, f16, bf16), or blocks of values that share
// scales, with GGUF's block layouts (q8_0, q5_0, mxfp4: 32 elements; q4_k, q6_k: super-blocks of 256).
// gpu/quant/blocks.hpp reads and writes the blocks.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace illm::gpu {

/// Element types of weights and KV blocks.
enum class dtype : uint8_t { f32, f16, bf16, q8_0, q5_0, q4_k, q6_k, mxfp4 };

/// Every type, in the enum's order.
inline constexpr dtype all_dtypes[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q5_0, dtype::q4_k,
                                       dtype::q6_k, dtype::mxfp4};

/// Elements per block: 1 for the element types, 32 or 256 for the block types.
constexpr uint32_t block_elements(dtype t) {
  switch (t) {
    case dtype::q8_0:
    case dtype::q5_0:
    case dtype::mxfp4: return 32;
    case dtype::q4_k:
    case dtype::q6_k: return 256;
    default: return 1;
  }
}

/// Bytes of one block (of an element type: of one element).
constexpr uint32_t block_bytes(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16:
    case dtype::bf16: return 2;
    case dtype::q8_0: return 34;   // f16 d, int8 q[32]
    case dtype::q5_0: return 22;   // f16 d, the 32 high bits, 16 bytes of low nibbles
    case dtype::q4_k: return 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
    case dtype::q6_k: return 210;  // 128 bytes of low nibbles, 64 of high bit pairs, int8 scales[16], f16 d
    case dtype::mxfp4: return 17;  // an E8M0 exponent, 16 bytes of 4-bit E2M1 values
  }
  return 0;
}

/// True for the types stored in blocks of shared scales.
constexpr bool is_block_type(dtype t) { return block_elements(t) > 1; }

/// Bytes of one element of an element type (KV pools, activations): 4 or 2.
inline size_t dtype_bytes(dtype t) { return t == dtype::f32 ? 4 : 2; }

/// Bytes that n elements take: a whole number of blocks, or 0 when n is not one.
constexpr uint64_t stored_bytes(dtype t, uint64_t n) {
  return n % block_elements(t) == 0 ? n / block_elements(t) * block_bytes(t) : 0;
}

/// Bytes of a row of n elements, n a multiple of block_elements(t).
constexpr size_t row_bytes(dtype t, size_t n) { return n / block_elements(t) * block_bytes(t); }

/// "f32", "q4_k", ...: the names of the command line's flags.
const char* to_string(dtype t);
/// "F32", "Q4_K", ...: the names GGUF and safetensors files give them.
const char* file_name(dtype t);
/// The type named `name` (either spelling), or none.
std::optional<dtype> parse_dtype(std::string_view name);

}  // namespace illm::gpu
