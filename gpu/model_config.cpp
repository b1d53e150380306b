#include "gpu/model_config.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include "gpu/text.hpp"

namespace illm::gpu {

uint64_t model_config::parameter_count(bool shared_classifier) const {
  const uint64_t d = dim, h = hidden_dim, q = q_dim(), kv = kv_dim(), v = vocab_size;
  const uint64_t e = uint64_t(n_experts), sh = uint64_t(shared_hidden_dim);
  const uint64_t ffn = has_experts() ? e * d + e * 3 * d * h + (sh > 0 ? 3 * d * sh + d : 0) : 3 * d * h;
  const uint64_t biases = (qkv_bias ? q + 2 * kv : 0) + (o_bias ? d : 0) + (expert_bias ? e + e * (2 * h + d) : 0) +
                         (attention_sinks ? uint64_t(n_heads) : 0);
  const uint64_t per_layer = 2 * d + d * q * 2 + 2 * d * kv + ffn + biases + (qk_norm ? 2 * uint64_t(head_dim()) : 0);
  return v * d + n_layers * per_layer + d + (shared_classifier ? 0 : v * d);
}

status model_config::validate() const {
  auto bad = [](std::string what) { return status{status_code::corrupt_model, std::move(what)}; };
  if (dim <= 0 || hidden_dim <= 0 || n_layers <= 0 || n_heads <= 0 || n_kv_heads <= 0 ||
      vocab_size <= 0 || max_seq <= 0)
    return bad(text::format("non-positive dimension (dim {}, hidden_dim {}, n_layers {}, n_heads {}, "
                           "n_kv_heads {}, vocab_size {}, max_seq {})",
                           dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq));
  if (head_size < 0) return bad(text::format("negative head_dim {}", head_size));
  if (head_size == 0 && dim % n_heads != 0)
    return bad(text::format("dim {} is not a multiple of n_heads {}", dim, n_heads));
  if (n_heads % n_kv_heads != 0)
    return bad(text::format("n_heads {} is not a multiple of n_kv_heads {}", n_heads, n_kv_heads));
  if (head_dim() % 2 != 0) return bad(text::format("head_dim {} is odd (RoPE rotates pairs)", head_dim()));
  if (dim > (1 << 16) || hidden_dim > (1 << 18) || n_layers > 1024 || vocab_size > (1 << 22) ||
      head_dim() > 512 || n_heads > 1024)
    return bad(text::format("implausible shape (dim {}, hidden_dim {}, n_layers {}, vocab_size {})", dim,
                           hidden_dim, n_layers, vocab_size));
  if (n_experts < 0 || n_experts > 1024 || shared_hidden_dim < 0 || shared_hidden_dim > (1 << 18))
    return bad(text::format("implausible experts ({} experts, shared expert width {})", n_experts, shared_hidden_dim));
  if (has_experts() && (n_experts_used < 1 || n_experts_used > n_experts))
    return bad(text::format("{} experts used of {}: not between 1 and the experts", n_experts_used, n_experts));
  if (!has_experts() && (n_experts_used != 0 || shared_hidden_dim != 0))
    return bad("experts used, or a shared expert, without routed experts");
  if (uint64_t(ffn_rows()) > (uint64_t(1) << 26))
    return bad(text::format("{} experts of width {}: more rows than a layer holds", n_experts, hidden_dim));
  if (expert_bias && !has_experts()) return bad("expert biases without routed experts");
  if (sliding_window < 0 || sliding_period < 0)
    return bad(text::format("negative sliding window ({}) or period ({})", sliding_window, sliding_period));
  const gated_activation& a = activation;
  if (!(a.alpha > 0.0f && a.alpha < 100.0f) || !(a.limit >= 0.0f) || !std::isfinite(a.up_shift))
    return bad(text::format("the gate's alpha {} must be in (0, 100), its limit {} not negative, its shift {} finite",
                            a.alpha, a.limit, a.up_shift));
  if (!(rope_theta > 0.0f) || !(norm_eps > 0.0f))
    return bad("rope_theta and norm_eps must be positive");
  const rope_frequencies& r = rope_scaling;
  if ((r.scaling == rope_scaling_kind::linear || r.scaling == rope_scaling_kind::llama3) &&
      !(r.factor >= 1.0f && r.factor < 1e6f))
    return bad(text::format("rope scaling factor {} is not in [1, 1e6)", r.factor));
  if (r.scaling == rope_scaling_kind::per_pair)
    for (int i = 0; i < head_dim() / 2; ++i)
      if (!(r.pair_divisors[i] > 0.0f))
        return bad(text::format("RoPE frequency factor {} of pair {} is not positive", r.pair_divisors[i], i));
  if (r.scaling == rope_scaling_kind::yarn &&
      !(r.factor >= 1.0f && r.factor < 1e6f && r.original_positions > 0 && r.beta_fast > r.beta_slow && r.beta_slow > 0.0f))
    return bad(text::format("yarn rope scaling needs a factor in [1, 1e6) ({}), a positive original context ({}) and "
                            "beta_fast ({}) > beta_slow ({}) > 0",
                            r.factor, r.original_positions, r.beta_fast, r.beta_slow));
  if (r.scaling == rope_scaling_kind::llama3 &&
      !(r.low_freq_factor > 0.0f && r.high_freq_factor > r.low_freq_factor && r.original_positions > 0))
    return bad(text::format("llama3 rope scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({}) and a "
                            "positive original_max_position_embeddings ({})",
                            r.low_freq_factor, r.high_freq_factor, r.original_positions));
  return status::ok();
}

namespace {

struct named_config {
  const char* name;
  model_config config;
};

// dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq, rope_theta, norm_eps (and, named, the options)
constexpr std::array<named_config, 9> presets{{
    {"stories15m", {288, 768, 6, 6, 6, 32000, 256, 10000.0f, 1e-5f}},
    {"llama2-7b", {4096, 11008, 32, 32, 32, 32000, 4096, 10000.0f, 1e-5f}},
    {"llama2-13b", {5120, 13824, 40, 40, 40, 32000, 4096, 10000.0f, 1e-5f}},
    {"llama2-70b", {8192, 28672, 80, 64, 8, 32000, 4096, 10000.0f, 1e-5f}},
    {"llama3-8b", {4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f, 1e-5f}},
    {"tiny", {64, 160, 2, 4, 4, 512, 128, 10000.0f, 1e-5f}},
    {"tiny-gqa", {128, 256, 3, 8, 2, 1000, 128, 10000.0f, 1e-5f}},
    {"mixtral-8x7b", {.dim = 4096, .hidden_dim = 14336, .n_layers = 32, .n_heads = 32, .n_kv_heads = 8,
                      .vocab_size = 32000, .max_seq = 32768, .rope_theta = 1e6f, .norm_eps = 1e-5f, .n_experts = 8,
                      .n_experts_used = 2}},
    {"qwen3-30b-a3b", {.dim = 2048, .hidden_dim = 768, .n_layers = 48, .n_heads = 32, .n_kv_heads = 4,
                       .vocab_size = 151936, .max_seq = 40960, .rope_theta = 1e6f, .norm_eps = 1e-6f, .head_size = 128,
                       .qk_norm = true, .n_experts = 128, .n_experts_used = 8}},
}};

}  // namespace

result<model_config> preset_config(std::string_view name) {
  const auto same_letters = [](char a, char b) { return std::tolower(uint8_t(a)) == std::tolower(uint8_t(b)); };
  for (const auto& p : presets)
    if (std::ranges::equal(name, std::string_view(p.name), same_letters)) return p.config;
  return status{status_code::invalid_argument,
                text::format("unknown model shape '{}' (known: {})", name, text::join(preset_names(), ", "))};
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets) names.emplace_back(p.name);
  return names;
}

}  // namespace illm::gpu
