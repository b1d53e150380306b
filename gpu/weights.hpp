#pragma once
// Host-side fp32 weights of a LLaMA model, laid out in the llama2.c checkpoint order, from a file or
// generated from a seed for any shape.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/host_memory.hpp"
#include "gpu/model_config.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// Pointers to one layer's tensors; matrices are row-major [out][in].
struct layer_weights {
  const float* rms_att = nullptr;  ///< [dim]
  const float* wq = nullptr;       ///< [dim][dim]
  const float* wk = nullptr;       ///< [kv_dim][dim]
  const float* wv = nullptr;       ///< [kv_dim][dim]
  const float* wo = nullptr;       ///< [dim][dim]
  const float* rms_ffn = nullptr;  ///< [dim]
  const float* w1 = nullptr;       ///< [hidden_dim][dim] (gate)
  const float* w2 = nullptr;       ///< [dim][hidden_dim] (down)
  const float* w3 = nullptr;       ///< [hidden_dim][dim] (up)
};

/// One named tensor inside model_weights' buffer.
struct tensor_view {
  std::string name;  ///< e.g. "layers.3.wq"
  float* data = nullptr;
  uint64_t size = 0;    ///< floats
  uint64_t fan_in = 0;  ///< input width of a matrix; 0 for norm weights
};

/// A model's weights in one fp32 buffer.
class model_weights {
 public:
  /// Allocates storage for `config` (not initialised) and points every tensor into it.
  static result<model_weights> allocate(const model_config& config, bool shared_classifier);

  const model_config& config() const { return config_; }
  bool shared_classifier() const { return shared_classifier_; }
  const float* token_embedding() const { return token_embedding_; }  ///< [vocab][dim]
  const float* rms_final() const { return rms_final_; }              ///< [dim]
  const float* classifier() const { return classifier_; }            ///< [vocab][dim]
  const layer_weights& layer(int l) const { return layers_[l]; }

  /// Every tensor, in storage order (the classifier only when it is separate).
  std::vector<tensor_view> tensors();

  /// The whole buffer, in checkpoint order: embedding, per-kind layer stacks, final norm, classifier.
  float* data() { return storage_.get(); }
  const float* data() const { return storage_.get(); }
  uint64_t size() const { return size_; }
  /// Floats from the embedding through the final norm (the classifier follows when separate).
  uint64_t body_size() const { return body_size_; }

 private:
  model_config config_;
  bool shared_classifier_ = true;
  host_array<float> storage_;
  uint64_t size_ = 0;
  uint64_t body_size_ = 0;
  const float* token_embedding_ = nullptr;
  const float* rms_final_ = nullptr;
  const float* classifier_ = nullptr;
  std::vector<layer_weights> layers_;
};

/// Weights drawn from a seeded generator: the same seed and shape give the same bits everywhere.
result<model_weights> synthetic_weights(const model_config& config, uint64_t seed,
                                        bool shared_classifier = true);

}  // namespace illm::gpu
