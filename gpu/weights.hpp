#pragma once
// Host-side weights of a LLaMA-family model, from a file or generated from a seed for any shape. Matrices (the
// embedding and classifier among them) are held in a type of their own each (fp32, 16-bit or GGUF's block types,
// as a file stores them or as --weight-type asks); norms and biases in fp32. Each layer's tensors lie together, with
// the projections that read the same input side by side (wq, wk, wv; w1 then w3), so a backend that computes on the
// host reads them in place.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu/dtype.hpp"
#include "gpu/host_memory.hpp"
#include "gpu/model_config.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// A row-major matrix [rows][cols] in `type`: rows of whole blocks for a block type.
struct weight_matrix {
  uint8_t* data = nullptr;
  dtype type = dtype::f32;
  bool tiled = false;  ///< rows stored in tiles of 8 (gpu/quant/tiles.hpp), not one after another
  /// The data as floats when the type is f32, else nullptr.
  float* f32() const { return type == dtype::f32 ? reinterpret_cast<float*>(data) : nullptr; }
};

/// One layer's tensors; matrices are [out][in]. Within a layer wq, wk and wv follow one another, as do bq, bk and
/// bv, and w1 and w3. RoPE rotates adjacent pairs (2i, 2i + 1) of a head's q and k: a checkpoint that pairs i with
/// i + head_dim / 2 (Hugging Face's rotate_half) is permuted on load.
struct layer_weights {
  float* rms_att = nullptr;  ///< [dim]
  weight_matrix wq;          ///< [q_dim][dim]
  weight_matrix wk;          ///< [kv_dim][dim]
  weight_matrix wv;          ///< [kv_dim][dim]
  float* bq = nullptr;       ///< [q_dim] when qkv_bias
  float* bk = nullptr;       ///< [kv_dim] when qkv_bias
  float* bv = nullptr;       ///< [kv_dim] when qkv_bias
  float* q_norm = nullptr;   ///< [head_dim] when qk_norm
  float* k_norm = nullptr;   ///< [head_dim] when qk_norm
  weight_matrix wo;          ///< [dim][q_dim]
  float* bo = nullptr;       ///< [dim] when o_bias
  float* sinks = nullptr;    ///< [n_heads] when attention_sinks: each head's logit in its softmax's denominator
  float* rms_ffn = nullptr;  ///< [dim]
  weight_matrix w1;          ///< [hidden_dim][dim] (gate); with experts, every expert's in turn [n_experts * hidden_dim]
  weight_matrix w3;          ///< [hidden_dim][dim] (up); stacked as w1
  weight_matrix w2;          ///< [dim][hidden_dim] (down); with experts [n_experts * dim][hidden_dim]
  weight_matrix router;      ///< [n_experts][dim] with experts: each token's logit of each expert
  float* router_bias = nullptr;  ///< [n_experts] when expert_bias
  float* b1 = nullptr;           ///< [n_experts * hidden_dim] when expert_bias: each expert's gate bias in turn
  float* b3 = nullptr;           ///< [n_experts * hidden_dim]: the up biases
  float* b2 = nullptr;           ///< [n_experts * dim]: the down biases
  weight_matrix shared_w1;   ///< [shared_hidden_dim][dim]: the shared expert's gate, then its up and down
  weight_matrix shared_w3;   ///< [shared_hidden_dim][dim]
  weight_matrix shared_w2;   ///< [dim][shared_hidden_dim]
  weight_matrix shared_gate;  ///< [1][dim]: the shared expert's output is scaled by sigmoid(x . shared_gate)
};

/// What a tensor is, for initialisation.
enum class tensor_role : uint8_t { matrix, norm, bias, embedding };

/// One tensor every layer of a model has: its name in model_weights ("wq": "layers.3.wq"), its shape, its role and
/// the member of layer_weights it fills.
struct layer_tensor_kind {
  const char* name = "";
  uint64_t rows = 0, cols = 1;  ///< cols 1: a vector
  tensor_role role = tensor_role::matrix;
  float* layer_weights::*vector = nullptr;          ///< norms and biases (fp32)
  weight_matrix layer_weights::*matrix = nullptr;  ///< matrices
  uint64_t experts = 0;  ///< a stack of this many experts' matrices (or vectors) of rows / experts rows each (0: one)
};

/// The tensors of each layer of `config`, in the order they are stored: rms_att, wq wk wv, bq bk bv, q_norm k_norm,
/// wo, bo, sinks, rms_ffn, router, router_bias, w1 w3 w2, b1 b3 b2, shared_w1 shared_w3 shared_w2 shared_gate
/// (absent options left out). The one list
/// that allocation, tensors(), store_in_tiles and the loaders' destinations read.
std::vector<layer_tensor_kind> layer_tensor_kinds(const model_config& config);

/// One named tensor inside model_weights' buffer.
struct tensor_view {
  std::string name;  ///< e.g. "layers.3.wq"
  uint8_t* data = nullptr;
  dtype type = dtype::f32;
  uint64_t size = 0;    ///< elements
  uint64_t cols = 1;    ///< row length: the input width of a matrix, 1 for a vector
  tensor_role role = tensor_role::matrix;
  bool tiled = false;  ///< a matrix stored in tiles of 8 rows (gpu/quant/tiles.hpp)
  /// The data as floats when the type is f32, else nullptr.
  float* f32() const { return type == dtype::f32 ? reinterpret_cast<float*>(data) : nullptr; }
  /// Bytes the tensor takes.
  uint64_t bytes() const { return stored_bytes(type, size); }
};

/// The type of each matrix by tensor name ("layers.3.wq", "token_embedding", "classifier"); f32 for a name it
/// lacks.
using matrix_types = std::map<std::string, dtype>;

/// A model's weights in one buffer.
class model_weights {
 public:
  /// Allocates storage for `config` (not initialised), matrices in `types`, and points every tensor into it. A type
  /// whose blocks do not tile a matrix's rows is refused.
  static result<model_weights> allocate(const model_config& config, bool shared_classifier,
                                        const matrix_types& types = {});

  const model_config& config() const { return config_; }
  bool shared_classifier() const { return shared_classifier_; }
  const weight_matrix& token_embedding() const { return token_embedding_; }  ///< [vocab][dim]
  const float* rms_final() const { return rms_final_; }                      ///< [dim]
  const weight_matrix& classifier() const { return classifier_; }            ///< [vocab][dim]
  const layer_weights& layer(int l) const { return layers_[l]; }

  /// Every tensor in llama2.c's checkpoint order (embedding, per-kind layer stacks, final norm, the classifier
  /// only when it is separate), then the stacks of the options (bq, bk, bv; q_norm, k_norm; the experts' tensors)
  /// when present.
  std::vector<tensor_view> tensors() const;
  /// The types of this model's matrices, by name.
  matrix_types types() const;
  /// How many matrices each type holds, for logs: "q4_k 113, q6_k 16".
  std::string describe_types() const;

  /// Stores the matrices that products read (each layer's, and a classifier of its own; not the embedding table) in
  /// tiles where their type has a tile layout and their rows fill whole tiles, on every core: the layout the cpu's
  /// register-tiled kernels read. Only bytes move; sampled_bytes keeps answering for the layout as loaded.
  void store_in_tiles();
  /// One byte in every 4096 of the buffer as loaded (before store_in_tiles): two checkpoints of one shape differ
  /// there, and reading it is cheap.
  std::string sampled_bytes() const;

  /// The whole buffer, and its bytes.
  const uint8_t* data() const { return storage_.get(); }
  uint64_t bytes() const { return bytes_; }

 private:
  model_config config_;
  bool shared_classifier_ = true;
  host_array<uint8_t> storage_;
  uint64_t bytes_ = 0;
  std::string sampled_before_tiles_;  // sampled_bytes() when store_in_tiles ran
  weight_matrix token_embedding_;
  float* rms_final_ = nullptr;
  weight_matrix classifier_;
  std::vector<layer_weights> layers_;
};

/// Weights drawn from a seeded generator (fp32): the same seed and shape give the same bits everywhere.
result<model_weights> synthetic_weights(const model_config& config, uint64_t seed, bool shared_classifier = true);

/// The type a matrix of rows `cols` long is held in when `wanted` is asked for: `wanted` where its blocks tile the
/// rows; else, as llama.cpp's quantizer does, q5_0 for q4_k and q8_0 for q6_k where blocks of 32 tile them; else f32.
dtype matrix_type_for(dtype wanted, uint64_t cols);

/// The same weights with every matrix held in `wanted` (matrix_type_for each), converted through fp32.
result<model_weights> convert_weights(const model_weights& weights, dtype wanted);

}  // namespace illm::gpu
