#include "gpu/device_weights.hpp"

#include "gpu/backend_registry.hpp"
#include "gpu/half.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

result<std::shared_ptr<const device_weights>> device_weights::place(std::shared_ptr<const model_weights> weights,
                                                                    std::shared_ptr<backend> device,
                                                                    dtype weight_type) {
  if (!weights || !device) return status{status_code::invalid_argument, "no weights or no device to place them on"};
  std::shared_ptr<device_weights> placed(new device_weights());
  placed->host_ = std::move(weights);
  placed->device_ = std::move(device);
  placed->weight_type_ = weight_type;
  ILLM_RETURN_IF_ERROR(placed->place_all());
  return std::shared_ptr<const device_weights>(std::move(placed));
}

const void* device_weights::keep(device_ptr buffer, const void* host, size_t bytes) {
  if (!buffer || !device_->upload(buffer.get(), host, bytes).is_ok()) return nullptr;
  placed_bytes_ += bytes;
  owned_.push_back(std::move(buffer));
  return owned_.back().get();
}

const float* device_weights::tensor(const float* host, size_t n) {
  if (device_->host_memory()) return host;
  return static_cast<const float*>(keep(make_device_buffer(*device_, n * sizeof(float)), host, n * sizeof(float)));
}

const void* device_weights::matrix(std::initializer_list<std::pair<const float*, size_t>> parts) {
  size_t n = 0;
  bool adjacent = true;
  for (auto [p, count] : parts) {
    adjacent = adjacent && p == parts.begin()->first + n;
    n += count;
  }
  if (weight_type_ == dtype::f32 && adjacent) return tensor(parts.begin()->first, n);
  // fp32 packs are staged as they are; 16-bit ones converted (round to nearest even) on the way.
  const size_t element = dtype_bytes(weight_type_);
  std::vector<uint8_t> staged(n * element);
  size_t at = 0;
  for (auto [p, count] : parts) {
    convert_floats(p, count, weight_type_, staged.data() + at * element);
    at += count;
  }
  return keep(make_device_buffer(*device_, staged.size()), staged.data(), staged.size());
}

status device_weights::place_all() {
  const model_config& c = config();
  const size_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, vocab = c.vocab_size, hd = c.head_dim();
  for (int l = 0; l < c.n_layers; ++l) {
    const layer_weights& w = host_->layer(l);
    layer t;
    t.rms_att = tensor(w.rms_att, d);
    t.wqkv = matrix({{w.wq, q * d}, {w.wk, kv * d}, {w.wv, kv * d}});
    t.wo = matrix({{w.wo, d * q}});
    t.rms_ffn = tensor(w.rms_ffn, d);
    t.w13 = matrix({{w.w1, h * d}, {w.w3, h * d}});
    t.w2 = matrix({{w.w2, d * h}});
    // model_weights keeps bq, bk and bv side by side.
    if (c.qkv_bias) t.bqkv = tensor(w.bq, q + 2 * kv);
    if (c.qk_norm) {
      t.q_norm = tensor(w.q_norm, hd);
      t.k_norm = tensor(w.k_norm, hd);
    }
    if (!t.rms_att || !t.wqkv || !t.wo || !t.rms_ffn || !t.w13 || !t.w2 || (c.qkv_bias && !t.bqkv) ||
        (c.qk_norm && (!t.q_norm || !t.k_norm)))
      return {status_code::out_of_memory, text::format("cannot place layer {} on {}", l, device_->name())};
    layers_.push_back(t);
  }
  embedding_ = tensor(host_->token_embedding(), vocab * d);
  rms_final_ = tensor(host_->rms_final(), d);
  classifier_ = host_->shared_classifier() && weight_type_ == dtype::f32 ? embedding_
                                                                          : matrix({{host_->classifier(), vocab * d}});
  if (!embedding_ || !rms_final_ || !classifier_)
    return {status_code::out_of_memory, text::format("cannot place the embedding and classifier on {}", device_->name())};
  return status::ok();
}

result<std::shared_ptr<const device_weights>> device_weights_cache::on(
    const std::shared_ptr<const model_weights>& weights, const std::string& device_name, dtype weight_type) {
  // Placing under the lock: a second engine on the device waits for the first one's upload instead of making
  // a copy of its own.
  std::lock_guard lock(mutex_);
  std::weak_ptr<const device_weights>& slot = placed_[key{weights.get(), device_name, weight_type}];
  if (auto placed = slot.lock()) return placed;
  auto device = make_backend(device_name, 1);
  if (!device.is_ok()) return device.error();
  auto placed = device_weights::place(weights, std::shared_ptr<backend>(std::move(device).value()), weight_type);
  if (!placed.is_ok()) return placed.error();
  slot = placed.value();
  ++placements_;
  return placed;
}

int device_weights_cache::placements() const {
  std::lock_guard lock(mutex_);
  return placements_;
}

}  // namespace illm::gpu
