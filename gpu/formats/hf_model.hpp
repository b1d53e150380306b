#pragma once
// Hugging Face model folders: config.json (the architecture and its shape), generation_config.json (end ids and
// sampling defaults) and the weights in safetensors (model.safetensors, or shards that
// model.safetensors.index.json lists). Architectures: LlamaForCausalLM (Llama 2, 3, 3.1, 3.2), MistralForCausalLM,
// Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM (q/k head norms, a head width of its own), and their mixtures
// of experts: MixtralForCausalLM, Qwen2MoeForCausalLM (a gated shared expert) and Qwen3MoeForCausalLM. Every field is
// checked: a shape, rope type or option this engine does not compute is refused naming the file and the field.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/model_config.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// What config.json and generation_config.json say.
struct hf_model {
  std::string architecture;  ///< e.g. "LlamaForCausalLM"
  model_config config;       ///< max_seq is the longest context served (max_position_embeddings, or a window)
  bool tied_embeddings = false;
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;  ///< every end id of both files
  generation_defaults defaults;
  std::vector<std::string> notes;  ///< what was adapted, for the log (a sliding window bounding the context)
};

/// Whether `path` is a folder with a config.json.
bool is_hf_folder(const std::string& path);

/// Reads `folder`/config.json and, when present, generation_config.json.
result<hf_model> read_hf_config(const std::string& folder);

/// Loads the weights of `folder` as `model` describes them: matrices as stored (F32, F16, BF16) or in `weight_type`,
/// q and k rows reordered for RoPE on adjacent pairs. The files are mapped; each tensor's pages are dropped once read.
result<model_weights> load_hf_weights(const std::string& folder, const hf_model& model,
                                      std::optional<dtype> weight_type = std::nullopt);

}  // namespace illm::gpu
