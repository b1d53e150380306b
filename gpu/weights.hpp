#pragma once
// Host-side fp32 weights of a LLaMA-family model, from a file or generated from a seed for any shape. Each
// layer's tensors lie together, with the projections that read the same input side by side (wq, wk, wv rows
// one matrix; w1 then w3), so a backend that computes in host fp32 reads them in place.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/host_memory.hpp"
#include "gpu/model_config.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// Pointers to one layer's tensors; matrices are row-major [out][in]. Within a layer wq, wk and wv follow one
/// another, as do bq, bk and bv, and w1 and w3. RoPE rotates adjacent pairs (2i, 2i + 1) of a head's q and k:
/// a checkpoint that pairs i with i + head_dim / 2 (Hugging Face's rotate_half) is permuted on load.
struct layer_weights {
  float* rms_att = nullptr;  ///< [dim]
  float* wq = nullptr;       ///< [q_dim][dim]
  float* wk = nullptr;       ///< [kv_dim][dim]
  float* wv = nullptr;       ///< [kv_dim][dim]
  float* bq = nullptr;       ///< [q_dim] when qkv_bias
  float* bk = nullptr;       ///< [kv_dim] when qkv_bias
  float* bv = nullptr;       ///< [kv_dim] when qkv_bias
  float* q_norm = nullptr;   ///< [head_dim] when qk_norm
  float* k_norm = nullptr;   ///< [head_dim] when qk_norm
  float* wo = nullptr;       ///< [dim][q_dim]
  float* rms_ffn = nullptr;  ///< [dim]
  float* w1 = nullptr;       ///< [hidden_dim][dim] (gate)
  float* w3 = nullptr;       ///< [hidden_dim][dim] (up)
  float* w2 = nullptr;       ///< [dim][hidden_dim] (down)
};

/// What a tensor is, for initialisation.
enum class tensor_role : uint8_t { matrix, norm, bias, embedding };

/// One named tensor inside model_weights' buffer.
struct tensor_view {
  std::string name;  ///< e.g. "layers.3.wq"
  float* data = nullptr;
  uint64_t size = 0;    ///< floats
  uint64_t fan_in = 0;  ///< input width of a matrix; 0 otherwise
  tensor_role role = tensor_role::matrix;
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

  /// Every tensor in llama2.c's checkpoint order (embedding, per-kind layer stacks, final norm, the classifier
  /// only when it is separate), then the stacks of the options (bq, bk, bv; q_norm, k_norm) when present.
  std::vector<tensor_view> tensors() const;

  /// The whole buffer.
  const float* data() const { return storage_.get(); }
  uint64_t size() const { return size_; }

 private:
  model_config config_;
  bool shared_classifier_ = true;
  host_array<float> storage_;
  uint64_t size_ = 0;
  float* token_embedding_ = nullptr;
  float* rms_final_ = nullptr;
  float* classifier_ = nullptr;
  std::vector<layer_weights> layers_;
};

/// Weights drawn from a seeded generator: the same seed and shape give the same bits everywhere.
result<model_weights> synthetic_weights(const model_config& config, uint64_t seed,
                                        bool shared_classifier = true);

}  // namespace illm::gpu
