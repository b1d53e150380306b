#include "gpu/device_weights.hpp"

#include "gpu/backend_registry.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

result<std::shared_ptr<const device_weights>> device_weights::place(std::shared_ptr<const model_weights> weights,
                                                                    std::shared_ptr<backend> device) {
  if (!weights || !device) return status{status_code::invalid_argument, "no weights or no device to place them on"};
  std::shared_ptr<device_weights> placed(new device_weights());
  placed->host_ = std::move(weights);
  placed->device_ = std::move(device);
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
  if (device_->host_memory() || !host) return host;
  return static_cast<const float*>(keep(make_device_buffer(*device_, n * sizeof(float)), host, n * sizeof(float)));
}

result<packed_matrix> device_weights::matrix(std::initializer_list<std::pair<const weight_matrix*, int>> parts,
                                             int cols) {
  packed_matrix packed;
  const uint8_t* end = nullptr;  // where the last part's host bytes end
  for (auto [m, rows] : parts) {
    if (!device_->computes_with(m->type))
      return status{status_code::unsupported,
                    text::format("the {} backend computes with f32, f16 and bf16 weights, not {}", device_->name(),
                                 to_string(m->type))};
    const size_t bytes = size_t(rows) * row_bytes(m->type, size_t(cols));
    matrix_part* last = packed.n_parts > 0 ? &packed.parts[size_t(packed.n_parts - 1)] : nullptr;
    if (last && last->type == m->type && last->tiled == m->tiled && end == m->data) last->rows += rows;
    else packed.parts[size_t(packed.n_parts++)] = {m->data, m->type, rows, m->tiled};
    end = m->data + bytes;
  }
  if (device_->host_memory()) return packed;
  for (int i = 0; i < packed.n_parts; ++i) {
    matrix_part& p = packed.parts[size_t(i)];
    const size_t bytes = size_t(p.rows) * row_bytes(p.type, size_t(cols));
    p.data = keep(make_device_buffer(*device_, bytes), p.data, bytes);
    if (!p.data) return status{status_code::out_of_memory, text::format("cannot place a matrix on {}", device_->name())};
  }
  return packed;
}

namespace {

/// Rows [first, first + rows) of `m`, whose rows are `cols` long (a tile holds 8 whole rows: `first` is a multiple of 8
/// where `m` is tiled).
weight_matrix rows_from(const weight_matrix& m, uint64_t first, int cols) {
  weight_matrix r = m;
  r.data += first * row_bytes(m.type, size_t(cols));
  return r;
}

}  // namespace

status device_weights::place_feed_forward(const layer_weights& w, layer& t) {
  const model_config& c = config();
  const int d = c.dim, h = c.hidden_dim, sh = c.shared_hidden_dim;
  const auto place = [&](packed_matrix& to, std::initializer_list<std::pair<const weight_matrix*, int>> parts, int cols) {
    auto placed = matrix(parts, cols);
    if (placed.is_ok()) to = placed.value();
    return placed.is_ok() ? status::ok() : placed.error();
  };
  if (!c.has_experts()) {
    ILLM_RETURN_IF_ERROR(place(t.w13, {{&w.w1, h}, {&w.w3, h}}, d));
    return place(t.w2, {{&w.w2, d}}, h);
  }
  ILLM_RETURN_IF_ERROR(place(t.router, {{&w.router, c.n_experts}}, d));
  if (c.expert_bias) {
    const size_t e = size_t(c.n_experts);
    t.router_bias = tensor(w.router_bias, e);
    t.expert_b1 = tensor(w.b1, e * size_t(h));
    t.expert_b3 = tensor(w.b3, e * size_t(h));
    t.expert_b2 = tensor(w.b2, e * size_t(d));
    if (!t.router_bias || !t.expert_b1 || !t.expert_b3 || !t.expert_b2)
      return status{status_code::out_of_memory, text::format("cannot place the experts' biases on {}", device_->name())};
  }
  t.expert_w13.resize(size_t(c.n_experts));
  t.expert_w2.resize(size_t(c.n_experts));
  for (int e = 0; e < c.n_experts; ++e) {
    const weight_matrix gate = rows_from(w.w1, uint64_t(e) * h, d), up = rows_from(w.w3, uint64_t(e) * h, d);
    const weight_matrix down = rows_from(w.w2, uint64_t(e) * d, h);
    ILLM_RETURN_IF_ERROR(place(t.expert_w13[size_t(e)], {{&gate, h}, {&up, h}}, d));
    ILLM_RETURN_IF_ERROR(place(t.expert_w2[size_t(e)], {{&down, d}}, h));
  }
  if (sh == 0) return status::ok();
  ILLM_RETURN_IF_ERROR(place(t.shared_w13, {{&w.shared_w1, sh}, {&w.shared_w3, sh}}, d));
  ILLM_RETURN_IF_ERROR(place(t.shared_w2, {{&w.shared_w2, d}}, sh));
  return place(t.shared_gate, {{&w.shared_gate, 1}}, d);
}

status device_weights::place_all() {
  const model_config& c = config();
  const int d = c.dim, q = c.q_dim(), kv = c.kv_dim(), vocab = c.vocab_size, hd = c.head_dim();
  const auto failed = [&](const std::string& what) {
    return status{status_code::out_of_memory, text::format("cannot place {} on {}", what, device_->name())};
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const layer_weights& w = host_->layer(l);
    layer t;
    auto wqkv = matrix({{&w.wq, q}, {&w.wk, kv}, {&w.wv, kv}}, d);
    auto wo = matrix({{&w.wo, d}}, q);
    for (auto* r : {&wqkv, &wo})
      if (!r->is_ok()) return r->error();
    t.wqkv = wqkv.value();
    t.wo = wo.value();
    ILLM_RETURN_IF_ERROR(place_feed_forward(w, t));
    t.rms_att = tensor(w.rms_att, size_t(d));
    t.rms_ffn = tensor(w.rms_ffn, size_t(d));
    // model_weights keeps bq, bk and bv side by side.
    if (c.qkv_bias) t.bqkv = tensor(w.bq, size_t(q + 2 * kv));
    if (c.qk_norm) {
      t.q_norm = tensor(w.q_norm, size_t(hd));
      t.k_norm = tensor(w.k_norm, size_t(hd));
    }
    t.bo = tensor(w.bo, size_t(d));
    t.sinks = tensor(w.sinks, size_t(c.n_heads));
    if (!t.rms_att || !t.rms_ffn || (c.qkv_bias && !t.bqkv) || (c.qk_norm && (!t.q_norm || !t.k_norm)) ||
        (c.o_bias && !t.bo) || (c.attention_sinks && !t.sinks))
      return failed(text::format("layer {}", l));
    layers_.push_back(t);
  }
  auto table = matrix({{&host_->token_embedding(), vocab}}, d);
  if (!table.is_ok()) return table.error();
  embedding_ = table->parts[0];
  rms_final_ = tensor(host_->rms_final(), size_t(d));
  if (host_->shared_classifier()) {
    classifier_ = table.value();
  } else {
    auto classifier = matrix({{&host_->classifier(), vocab}}, d);
    if (!classifier.is_ok()) return classifier.error();
    classifier_ = classifier.value();
  }
  if (!rms_final_) return failed("the final norm");
  return status::ok();
}

result<std::shared_ptr<const device_weights>> device_weights_cache::on(
    const std::shared_ptr<const model_weights>& weights, const std::string& device_name) {
  // Placing under the lock: a second engine on the device waits for the first one's upload instead of making
  // a copy of its own.
  std::lock_guard lock(mutex_);
  std::weak_ptr<const device_weights>& slot = placed_[key{weights.get(), device_name}];
  if (auto placed = slot.lock()) return placed;
  auto device = make_backend(device_name, 1);
  if (!device.is_ok()) return device.error();
  auto placed = device_weights::place(weights, std::shared_ptr<backend>(std::move(device).value()));
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
