#include "gpu/weights.hpp"

#include <cmath>
#include <algorithm>

#include "gpu/text.hpp"

namespace illm::gpu {

result<model_weights> model_weights::allocate(const model_config& config, bool shared_classifier) {
  ILLM_RETURN_IF_ERROR(config.validate());
  model_weights w;
  w.config_ = config;
  w.shared_classifier_ = shared_classifier;
  w.size_ = config.parameter_count(shared_classifier);
  w.storage_.reset(static_cast<float*>(host_alloc(w.size_ * sizeof(float))));
  if (!w.storage_)
    return status{status_code::out_of_memory,
                  text::format("cannot allocate {:.1f} GiB of weights", w.size_ * 4.0 / (1u << 30))};

  // Storage order: embedding; per layer rms_att, wq wk wv, bq bk bv, q_norm, k_norm, wo, rms_ffn, w1 w3, w2;
  // final norm; classifier.
  const uint64_t d = config.dim, h = config.hidden_dim, q = config.q_dim(), kv = config.kv_dim();
  const uint64_t hd = config.head_dim(), vocab = config.vocab_size;
  float* p = w.storage_.get();
  auto take = [&p](uint64_t floats, bool present = true) {
    float* at = present ? p : nullptr;
    if (present) p += floats;
    return at;
  };
  w.token_embedding_ = take(vocab * d);
  w.layers_.resize(size_t(config.n_layers));
  for (layer_weights& l : w.layers_) {
    l.rms_att = take(d);
    l.wq = take(q * d);
    l.wk = take(kv * d);
    l.wv = take(kv * d);
    l.bq = take(q, config.qkv_bias);
    l.bk = take(kv, config.qkv_bias);
    l.bv = take(kv, config.qkv_bias);
    l.q_norm = take(hd, config.qk_norm);
    l.k_norm = take(hd, config.qk_norm);
    l.wo = take(d * q);
    l.rms_ffn = take(d);
    l.w1 = take(h * d);
    l.w3 = take(h * d);
    l.w2 = take(d * h);
  }
  w.rms_final_ = take(d);
  w.classifier_ = shared_classifier ? w.token_embedding_ : take(vocab * d);
  return w;
}

std::vector<tensor_view> model_weights::tensors() const {
  const model_config& c = config_;
  const uint64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), hd = c.head_dim();
  std::vector<tensor_view> out;
  auto stack = [&](const char* kind, float* layer_weights::*member, uint64_t size, uint64_t fan_in,
                   tensor_role role) {
    for (int l = 0; l < c.n_layers; ++l)
      out.push_back({text::format("layers.{}.{}", l, kind), layers_[size_t(l)].*member, size, fan_in, role});
  };
  out.push_back({"token_embedding", token_embedding_, uint64_t(c.vocab_size) * d, d, tensor_role::embedding});
  stack("rms_att", &layer_weights::rms_att, d, 0, tensor_role::norm);
  stack("wq", &layer_weights::wq, q * d, d, tensor_role::matrix);
  stack("wk", &layer_weights::wk, kv * d, d, tensor_role::matrix);
  stack("wv", &layer_weights::wv, kv * d, d, tensor_role::matrix);
  stack("wo", &layer_weights::wo, d * q, q, tensor_role::matrix);
  stack("rms_ffn", &layer_weights::rms_ffn, d, 0, tensor_role::norm);
  stack("w1", &layer_weights::w1, h * d, d, tensor_role::matrix);
  stack("w2", &layer_weights::w2, d * h, h, tensor_role::matrix);
  stack("w3", &layer_weights::w3, h * d, d, tensor_role::matrix);
  out.push_back({"rms_final", rms_final_, d, 0, tensor_role::norm});
  if (!shared_classifier_) out.push_back({"classifier", classifier_, uint64_t(c.vocab_size) * d, d, tensor_role::matrix});
  if (c.qkv_bias) {
    stack("bq", &layer_weights::bq, q, 0, tensor_role::bias);
    stack("bk", &layer_weights::bk, kv, 0, tensor_role::bias);
    stack("bv", &layer_weights::bv, kv, 0, tensor_role::bias);
  }
  if (c.qk_norm) {
    stack("q_norm", &layer_weights::q_norm, hd, 0, tensor_role::norm);
    stack("k_norm", &layer_weights::k_norm, hd, 0, tensor_role::norm);
  }
  return out;
}

namespace {

/// splitmix64: small, fast, and identical on every platform.
class seeded_stream {
 public:
  explicit seeded_stream(uint64_t seed) : state_(seed) {}
  /// Uniform in [-1, 1).
  float next_signed() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return float(double(z >> 40) / double(1ull << 23) - 1.0);
  }

 private:
  uint64_t state_;
};

}  // namespace

result<model_weights> synthetic_weights(const model_config& config, uint64_t seed, bool shared_classifier) {
  auto allocated = model_weights::allocate(config, shared_classifier);
  if (!allocated.is_ok()) return allocated.error();
  seeded_stream rng(seed);
  for (const tensor_view& t : allocated->tensors()) {
    // Norm weights near one; matrices uniform with variance 1/fan_in, so activations stay of order
    // one through every layer; the embedding uniform in [-1, 1); biases small.
    const bool is_norm = t.role == tensor_role::norm;
    const float scale = is_norm || t.role == tensor_role::bias ? 0.1f
                        : t.role == tensor_role::embedding     ? 1.0f
                                                               : float(std::sqrt(3.0 / double(t.fan_in)));
    const float offset = is_norm ? 1.0f : 0.0f;
    for (uint64_t i = 0; i < t.size; ++i) t.data[i] = offset + scale * rng.next_signed();
  }
  return allocated;
}

}  // namespace illm::gpu
