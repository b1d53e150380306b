#pragma once
// The llama2.c checkpoint format: a 7-int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len; a negative vocab_size means a separate classifier follows), then fp32 tensors
// in model_weights' order with the RoPE tables (seq_len x head_dim floats) between the final norm
// and the classifier.

#include <cstdint>
#include <string>

#include "gpu/weights.hpp"

namespace illm::gpu {

/// Bytes of the fixed header.
inline constexpr uint64_t llama2c_header_bytes = 7 * sizeof(int32_t);

/// Loads a checkpoint. A truncated, oversized or malformed file, or a non-finite weight, gives a
/// corrupt_model status that names the file and what is wrong.
result<model_weights> load_llama2c(const std::string& path);

/// Writes `weights` as a checkpoint (RoPE tables included, as llama2.c's export does).
status write_llama2c(const model_weights& weights, const std::string& path);

/// The file size a checkpoint of this shape has.
uint64_t llama2c_file_bytes(const model_config& config, bool shared_classifier);

}  // namespace illm::gpu
