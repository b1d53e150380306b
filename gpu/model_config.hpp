#pragma once
// The shape of a LLaMA-architecture model (with grouped-query attention), and named presets. The family's
// variants are options of it: a head width apart from dim / n_heads, biases on q, k and v (Qwen2), RMSNorm of
// each query and key head before RoPE (Qwen3), scaled RoPE frequencies (Llama 3.1), and a feed-forward of routed
// experts (Mixtral, Qwen2-MoE, Qwen3-MoE) with a shared expert (Qwen2-MoE); gpt-oss adds sliding-window layers,
// a learned sink logit per head, YaRN, biases on the output projection, the router and the experts, and a clamped
// SwiGLU.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/attention_shape.hpp"
#include "gpu/gated_activation.hpp"
#include "gpu/rope_frequencies.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// Shape and constants of a LLaMA-architecture decoder.
struct model_config {
  int dim = 0;         ///< residual width
  int hidden_dim = 0;  ///< SwiGLU inner width (of each expert where the layers have experts)
  int n_layers = 0;
  int n_heads = 0;     ///< query heads
  int n_kv_heads = 0;  ///< key/value heads; n_heads is a multiple of it (GQA)
  int vocab_size = 0;
  int max_seq = 0;     ///< training context; positions beyond it are still valid (RoPE is computed)
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  int head_size = 0;      ///< width of a head; 0: dim / n_heads
  bool qkv_bias = false;  ///< q, k and v projections add a bias
  bool qk_norm = false;   ///< each query and key head is RMS-normalised (weights [head_dim]) before RoPE
  /// RoPE scaling; its theta is rope_theta (rope() gives the whole).
  rope_frequencies rope_scaling{};
  /// Routed experts of each layer's feed-forward (0: one dense SwiGLU). A token's router logits (a product with the
  /// router [n_experts][dim]) pick the n_experts_used largest; their softmax probabilities weigh the experts' outputs.
  int n_experts = 0;
  int n_experts_used = 0;  ///< experts each token runs (top-k)
  /// The chosen experts' weights divided by their sum (Mixtral's softmax over the k; Qwen's norm_topk_prob).
  bool norm_topk = true;
  /// Width of a shared expert every token runs beside the routed ones, its output scaled by the sigmoid of a
  /// product with a gate vector [dim] (Qwen2-MoE; 0: none).
  int shared_hidden_dim = 0;
  int sliding_window = 0;        ///< keys a query of a sliding layer sees, itself included (0: no layer slides)
  int sliding_period = 0;        ///< which layers slide (attention_shape::slides)
  bool attention_sinks = false;  ///< a learned logit per query head joins each softmax's denominator
  bool o_bias = false;           ///< the output projection adds a bias
  bool expert_bias = false;      ///< the router and each expert's three projections add biases
  gated_activation activation{};  ///< the feed-forward's gate (plain SwiGLU unless the model says otherwise)

  int head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }
  /// Width of the queries (and of the attention output): n_heads * head_dim.
  int q_dim() const { return n_heads * head_dim(); }
  int kv_dim() const { return head_dim() * n_kv_heads; }
  /// The RoPE frequencies: rope_theta with rope_scaling's scaling.
  rope_frequencies rope() const {
    rope_frequencies r = rope_scaling;
    r.theta = rope_theta;
    return r;
  }
  /// The attention's heads and sliding pattern (at_layer gives one layer's call).
  attention_shape attention() const {
    return {n_heads, n_kv_heads, head_dim(), 0, sliding_window, sliding_period};
  }
  /// Whether each layer's feed-forward is a mixture of experts.
  bool has_experts() const { return n_experts > 0; }
  /// Rows of the stacked w1 and w3 (every expert's, one after another): hidden_dim times the experts (or 1).
  int ffn_rows() const { return hidden_dim * (has_experts() ? n_experts : 1); }
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
