#pragma once
// The safetensors format (Hugging Face checkpoints): an 8-byte little-endian header length N, N bytes of JSON
// naming each tensor's dtype, shape and data_offsets [begin, end) within the data section that follows (and an
// optional "__metadata__" object of strings), then the data. A checkpoint is one file, or shards that
// model.safetensors.index.json maps tensor names to. Every header is checked before a byte of data is trusted:
// a file that lies (offsets past the end or overlapping, sizes that disagree with the shape, an unknown dtype,
// a header larger than the limit) is refused with a corrupt_model status naming the file and the tensor. U8 tensors
// are read only as MXFP4 pairs (transformers' form: name_blocks [..., groups, 16] of 4-bit codes and name_scales
// [..., groups] of E8M0 exponents), each pair one MXFP4 tensor `name` of [..., groups * 32] values.

#include <string>
#include <string_view>
#include <vector>

#include "gpu/formats/stored_tensor.hpp"

namespace illm::gpu {

/// The largest header read (the format's own limit is 100 MB).
inline constexpr uint64_t max_safetensors_header_bytes = uint64_t(100) << 20;

/// A tensor's entry in a header: its bytes are [begin, end) of the data section.
struct safetensors_entry {
  std::string name;
  dtype type = dtype::f32;
  bool bytes = false;  ///< U8: half of an MXFP4 pair (type unused)
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;
};

/// Parses the JSON header of `file` (for messages), whose data section has `data_bytes`: every entry checked.
result<std::vector<safetensors_entry>> parse_safetensors_header(std::string_view json, uint64_t data_bytes,
                                                                const std::string& file);

/// The tensors of a checkpoint in safetensors, mapped.
class safetensors_checkpoint {
 public:
  /// Opens `path`: a .safetensors file, or an index (model.safetensors.index.json) and every shard it names
  /// (each shard's header checked; a name the index maps to a shard that lacks it is refused).
  static result<safetensors_checkpoint> open(const std::string& path);

  /// The tensor called `name`; null when there is none.
  const stored_tensor* find(std::string_view name) const;
  /// Every tensor, by name.
  const std::vector<stored_tensor>& tensors() const { return tensors_; }

 private:
  std::vector<stored_tensor> tensors_;  // sorted by name
};

}  // namespace illm::gpu
