#pragma once
// A tensor as a model file stores it: its element type, shape and bytes, read where they lie in the file's
// mapping (safetensors.hpp; GGUF files too).

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/dtype.hpp"
#include "gpu/formats/mapped_file.hpp"
#include "gpu/status.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// One tensor of a model file.
struct stored_tensor {
  std::string name;
  dtype type = dtype::f32;
  std::vector<uint64_t> shape;        ///< outermost first, as the file says
  const uint8_t* data = nullptr;      ///< in `file`'s mapping; not aligned for its type (read it with memcpy)
  uint64_t bytes = 0;
  std::shared_ptr<const mapped_file> file;  ///< keeps the mapping while the tensor is read
  /// Set for MXFP4 split as transformers stores it (name_blocks, name_scales): `data` holds each block's 16 bytes of
  /// codes (value 2j in the low nibble of byte j, 2j + 1 in the high one) and `scales` its exponents, one byte each.
  const uint8_t* scales = nullptr;
  std::shared_ptr<const mapped_file> scales_file;
  /// Elements: the product of the shape (1 for a scalar).
  uint64_t elements() const;
  /// "name [a, b] BF16", for messages.
  std::string describe() const;
};

/// Sorts `tensors` by name for find_by_name; returns the second of the first two tensors named alike, or nullptr when
/// every name is unique.
const stored_tensor* sort_by_name(std::vector<stored_tensor>& tensors);

/// The tensor named `name` in `sorted` (sorted by name), or nullptr.
const stored_tensor* find_by_name(const std::vector<stored_tensor>& sorted, std::string_view name);

/// Converts elements [first, first + n) of `t` to fp32 into `out` (of a block type: whole blocks); corrupt_model
/// naming the tensor and file at the first element that is not finite.
status read_floats(const stored_tensor& t, uint64_t first, uint64_t n, float* out);

/// Where a file's tensor goes: its name in the file, its shape there (outermost first), the tensor of model_weights
/// it fills ("layers.3.wq") from row `first_row` on (one expert's rows of a stack), and the heads of head_dim rows to
/// reorder for RoPE when its rows pair i with i + head_dim / 2. Where the file interleaves two tensors' rows (gpt-oss's
/// gate and up), the target takes rows source_offset, source_offset + source_stride, ... of it.
struct tensor_destination {
  std::string name;
  std::vector<uint64_t> shape;
  std::string target;
  uint64_t rope_heads = 0;
  uint64_t first_row = 0;
  uint64_t source_offset = 0, source_stride = 1;
};

/// How a file format names a model's tensors: those outside the layers, and the name in layer l of each kind
/// (layer_tensor_kinds: rms_att, wq, ...): layer_prefix, l, ".", its suffix. A stack of experts' matrices is one
/// tensor [experts][rows][cols], or, where its suffix holds "{e}", one tensor per expert e. A suffix that ends in
/// "[o::s]" names a tensor whose rows o, o + s, ... are the kind's (of each expert).
struct tensor_naming {
  std::string embedding, final_norm, classifier;
  std::string layer_prefix;
  std::map<std::string, std::string> suffix;
  bool rope_halves = false;  ///< q and k rows (and their biases and head norms) pair i with i + head_dim / 2
};

/// Every tensor a model of `config` reads from a file that names them so (the classifier unless tied).
std::vector<tensor_destination> destinations_of(const model_config& config, bool tied, const tensor_naming& naming);

/// The types the model's matrices take when loaded from `tensors`: each as the file stores it, or `wanted`
/// (matrix_type_for its rows) when asked for. Destinations whose tensor the file lacks are left out (fill_tensors
/// names them).
matrix_types matrix_types_of(const std::vector<tensor_destination>& destinations,
                             const std::vector<stored_tensor>& tensors, std::optional<dtype> wanted);

/// Fills every destination of `weights` from the tensor of its name in `tensors` (sorted by name): its bytes as they
/// are where the types agree (the blocks' scales checked), else converted through fp32; the pages of each dropped
/// once read. Refuses a missing tensor, a shape other than the destination's, a value that is not finite, and a
/// tensor no destination names unless `ignorable` says so. `model` describes the model in messages ("a
/// LlamaForCausalLM with this config.json").
status fill_tensors(model_weights& weights, const std::vector<tensor_destination>& destinations,
                    const std::vector<stored_tensor>& tensors, uint64_t head_dim, const std::string& file,
                    const std::string& model, const std::function<bool(const std::string&)>& ignorable);

/// Reorders the rows of a q or k projection (or its bias, or a head norm: rows of one element) from the half-split
/// RoPE layout (pair i of a head is rows i and i + head_dim / 2, Hugging Face's rotate_half) to adjacent pairs (rows
/// 2i, 2i + 1), in place. x [heads * head_dim] rows of `row_bytes` each, in any type.
void interleave_rope_halves(uint8_t* x, uint64_t heads, uint64_t head_dim, uint64_t row_bytes);

}  // namespace illm::gpu
