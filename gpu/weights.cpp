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
  w.body_size_ = w.size_ - (shared_classifier ? 0 : uint64_t(config.vocab_size) * config.dim);
  w.storage_.reset(static_cast<float*>(host_alloc(w.size_ * sizeof(float))));
  if (!w.storage_)
    return status{status_code::out_of_memory,
                  text::format("cannot allocate {:.1f} GiB of weights", w.size_ * 4.0 / (1u << 30))};

  w.layers_.resize(config.n_layers);
  std::vector<tensor_view> views = w.tensors();
  size_t next = 0;
  w.token_embedding_ = views[next++].data;
  for (auto member : {&layer_weights::rms_att, &layer_weights::wq, &layer_weights::wk, &layer_weights::wv,
                      &layer_weights::wo, &layer_weights::rms_ffn, &layer_weights::w1, &layer_weights::w2,
                      &layer_weights::w3})
    for (auto& l : w.layers_) l.*member = views[next++].data;
  w.rms_final_ = views[next++].data;
  w.classifier_ = shared_classifier ? w.token_embedding_ : views[next++].data;
  return w;
}

std::vector<tensor_view> model_weights::tensors() {
  const model_config& c = config_;
  const uint64_t d = c.dim, h = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
  std::vector<tensor_view> out;
  float* p = storage_.get();
  auto add = [&](std::string name, uint64_t size, uint64_t fan_in) {
    out.push_back({std::move(name), p, size, fan_in});
    p += size;
  };
  auto stack = [&](const char* kind, uint64_t size, uint64_t fan_in) {
    for (int l = 0; l < c.n_layers; ++l) add(text::format("layers.{}.{}", l, kind), size, fan_in);
  };
  add("token_embedding", vocab * d, d);
  stack("rms_att", d, 0);
  stack("wq", d * d, d);
  stack("wk", kv * d, d);
  stack("wv", kv * d, d);
  stack("wo", d * d, d);
  stack("rms_ffn", d, 0);
  stack("w1", h * d, d);
  stack("w2", d * h, h);
  stack("w3", h * d, d);
  add("rms_final", d, 0);
  if (!shared_classifier_) add("classifier", vocab * d, d);
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
    // one through every layer; the embedding uniform in [-1, 1).
    const bool is_norm = t.fan_in == 0, is_embedding = t.name == "token_embedding";
    const float scale = is_norm ? 0.1f : is_embedding ? 1.0f : float(std::sqrt(3.0 / double(t.fan_in)));
    const float offset = is_norm ? 1.0f : 0.0f;
    for (uint64_t i = 0; i < t.size; ++i) t.data[i] = offset + scale * rng.next_signed();
  }
  return allocated;
}

}  // namespace illm::gpu
