#pragma once
// A tensor as a model file stores it: its element type, shape and bytes, read where they lie in the file's
// mapping (safetensors.hpp; GGUF files too).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/formats/mapped_file.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// How a tensor's elements are stored: one by one (f32, f16, bf16), or in blocks of 32 that share a scale
/// (q8_0: an f16 scale and 32 int8, GGUF's layout).
enum class stored_type : uint8_t { f32, f16, bf16, q8_0 };

/// Its name as the files spell it ("F32", "F16", "BF16", "Q8_0").
const char* to_string(stored_type t);
/// Bytes of one element (of a block type: of one block).
uint32_t element_bytes(stored_type t);
/// Elements per block: 1, or 32 for q8_0.
uint32_t block_elements(stored_type t);
/// Bytes that `elements` elements take (a whole number of blocks; 0 when they are not).
uint64_t stored_bytes(stored_type t, uint64_t elements);

/// One tensor of a model file.
struct stored_tensor {
  std::string name;
  stored_type type = stored_type::f32;
  std::vector<uint64_t> shape;        ///< outermost first, as the file says
  const uint8_t* data = nullptr;      ///< in `file`'s mapping; not aligned for its type (read it with memcpy)
  uint64_t bytes = 0;
  std::shared_ptr<const mapped_file> file;  ///< keeps the mapping while the tensor is read
  /// Elements: the product of the shape (1 for a scalar).
  uint64_t elements() const;
  /// "name [a, b] BF16", for messages.
  std::string describe() const;
};

/// Converts elements [first, first + n) of `t` to fp32 into `out` (of a block type: whole blocks); corrupt_model
/// naming the tensor and file at the first element that is not finite.
status read_floats(const stored_tensor& t, uint64_t first, uint64_t n, float* out);

/// Where a file's tensor goes: its name, the shape the model needs (outermost first), its destination, and the
/// heads of head_dim rows to reorder for RoPE when its rows pair i with i + head_dim / 2.
struct tensor_destination {
  std::string name;
  std::vector<uint64_t> shape;
  float* dst = nullptr;
  uint64_t rope_heads = 0;
};

/// Fills every destination from the tensor of its name in `tensors` (sorted by name), converted to fp32 (the
/// pages of each dropped once read); refuses a missing tensor, a shape other than the destination's, and a tensor
/// no destination names unless `ignorable` says so. `model` describes the model in messages ("a
/// LlamaForCausalLM with this config.json").
status fill_tensors(const std::vector<tensor_destination>& destinations, const std::vector<stored_tensor>& tensors,
                    uint64_t head_dim, const std::string& file, const std::string& model,
                    const std::function<bool(const std::string&)>& ignorable);

/// Reorders the rows of a q or k projection (or its bias, or a head norm: cols 1) from the half-split RoPE layout
/// (pair i of a head is rows i and i + head_dim / 2, Hugging Face's rotate_half) to adjacent pairs (rows 2i,
/// 2i + 1), in place. x [heads * head_dim][cols].
void interleave_rope_halves(float* x, uint64_t heads, uint64_t head_dim, uint64_t cols);

}  // namespace illm::gpu
