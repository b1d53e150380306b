#pragma once
// The shape of a LLaMA-architecture model (with grouped-query attention), and named presets.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/status.hpp"

namespace illm::gpu {

/// Shape and constants of a LLaMA-architecture decoder.
struct model_config {
  int dim = 0;         ///< residual width
  int hidden_dim = 0;  ///< SwiGLU inner width
  int n_layers = 0;
  int n_heads = 0;     ///< query heads
  int n_kv_heads = 0;  ///< key/value heads; n_heads is a multiple of it (GQA)
  int vocab_size = 0;
  int max_seq = 0;     ///< training context; positions beyond it are still valid (RoPE is computed)
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;

  int head_dim() const { return dim / n_heads; }
  int kv_dim() const { return head_dim() * n_kv_heads; }
  /// Query heads that share one key/value head.
  int gqa_group() const { return n_heads / n_kv_heads; }
  /// Number of weights, classifier counted when it is separate from the embedding.
  uint64_t parameter_count(bool shared_classifier) const;
  /// Checks that the numbers describe a model this engine can run.
  status validate() const;
};

/// The named shapes: stories15m, llama2-7b, llama2-13b, llama2-70b, llama3-8b, and small test shapes
/// (tiny, tiny-gqa).
result<model_config> preset_config(std::string_view name);

/// Names accepted by preset_config.
std::vector<std::string> preset_names();

}  // namespace illm::gpu
