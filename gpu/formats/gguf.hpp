#pragma once
// GGUF, llama.cpp's model format (version 2 and 3): "GGUF", a version, the counts of tensors and of metadata
// entries; typed key/values (numbers, booleans, strings, arrays of them); each tensor's name, dimensions (ne[0]
// the fastest), ggml type and offset; then, at the file's alignment (general.alignment, default 32), the data.
// Every count, length, dimension and offset is checked against the file before it is trusted: a file that lies
// is refused with a corrupt_model status naming the file and what is wrong. Tensor types read: F32, F16, BF16 and
// Q8_0; another type is refused naming it.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/formats/stored_tensor.hpp"

namespace illm::gpu {

/// An open GGUF file: its metadata and its tensors, mapped.
class gguf_file {
 public:
  /// Opens and checks `path`.
  static result<gguf_file> open(const std::string& path);

  /// The metadata: key -> number, boolean, string, or array of them.
  const nlohmann::json& metadata() const { return metadata_; }
  /// The tensor called `name` (shape outermost first, as safetensors); null when there is none.
  const stored_tensor* find(std::string_view name) const;
  const std::vector<stored_tensor>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  nlohmann::json metadata_;
  std::vector<stored_tensor> tensors_;  // sorted by name
};

}  // namespace illm::gpu
