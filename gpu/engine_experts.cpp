// The engine's mixture-of-experts feed-forward: the router's logits read on the host, each token's experts picked
// (expert_routing), the tokens' rows gathered by expert so that each chosen expert multiplies its rows as one
// product (an expert no token chose is never read), and each token's experts' outputs weighed into its residual.
#include <cmath>

#include "gpu/engine.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

/// Bytes of the experts' staging: the slots' source rows and the tokens' slots and weights, then the shared
/// expert's rows and weights.
size_t staging_bytes(size_t slots, size_t rows) { return 3 * slots * 4 + 2 * rows * 4; }

}  // namespace

status engine::allocate_expert_buffers() {
  const model_config& c = config();
  const size_t rows = size_t(options_.max_batch_tokens), slots = rows * size_t(c.n_experts_used);
  const size_t d = c.dim, h = c.hidden_dim, sh = c.shared_hidden_dim;
  auto buffer = [this](size_t floats) { return owned_floats(floats); };
  expert_x_ = buffer(slots * d);
  expert_h13_ = buffer(slots * 2 * h);
  expert_h_ = buffer(slots * h);
  expert_y_ = buffer(slots * d);
  router_logits_ = buffer(rows * size_t(c.n_experts));
  shared_h13_ = buffer(rows * 2 * sh);
  shared_h_ = buffer(rows * sh);
  if (!device_->host_memory()) expert_staging_ = make_device_buffer(*device_, staging_bytes(slots, rows));
  if (!expert_x_ || !expert_h13_ || !expert_h_ || !expert_y_ || !router_logits_ || (sh > 0 && (!shared_h13_ || !shared_h_)) ||
      (!device_->host_memory() && !expert_staging_))
    return {status_code::out_of_memory, text::format("cannot allocate the experts' buffers on {}", device_->name())};
  return status::ok();
}

result<const float*> engine::read_on_host(const float* device_src, size_t floats, std::vector<float>& host) {
  if (device_->host_memory()) return device_src;
  host.resize(floats);
  ILLM_RETURN_IF_ERROR(device_->download(host.data(), device_src, floats * sizeof(float)));
  return static_cast<const float*>(host.data());
}

result<const void*> engine::stage_for_device(const void* host, size_t bytes, size_t offset) {
  if (device_->host_memory()) return host;
  void* at = static_cast<uint8_t*>(expert_staging_.get()) + offset;
  ILLM_RETURN_IF_ERROR(device_->upload(at, host, bytes));
  return static_cast<const void*>(at);
}

status engine::for_each_chosen_expert(const std::function<status(int, size_t, int)>& project_rows) {
  for (size_t e = 0; e + 1 < routing_.first.size(); ++e) {
    const int first = routing_.first[e], n = routing_.first[e + 1] - first;
    if (n > 0) ILLM_RETURN_IF_ERROR(project_rows(int(e), size_t(first), n));
  }
  return status::ok();
}

status engine::experts_forward(const device_weights::layer& w, const float* xb, float* x, int m) {
  const model_config& c = config();
  const int d = c.dim, h = c.hidden_dim, k = c.n_experts_used;
  const size_t slots = size_t(m) * size_t(k);
  ILLM_RETURN_IF_ERROR(project(xb, size_t(d), m, d, w.router, router_logits_, size_t(c.n_experts), false));
  if (w.router_bias)
    ILLM_RETURN_IF_ERROR(device_->add_bias(router_logits_, size_t(c.n_experts), m, c.n_experts, w.router_bias));
  auto logits = read_on_host(router_logits_, size_t(m) * size_t(c.n_experts), router_host_);
  if (!logits.is_ok()) return logits.error();
  route_tokens(logits.value(), m, c.n_experts, k, c.norm_topk, routing_);
  auto source = stage_for_device(routing_.source_row.data(), slots * 4, 0);
  auto slot = stage_for_device(routing_.slot.data(), slots * 4, slots * 4);
  auto weight = stage_for_device(routing_.weight.data(), slots * 4, 2 * slots * 4);
  for (auto* staged : {&source, &slot, &weight})
    if (!staged->is_ok()) return staged->error();
  const auto* rows = static_cast<const int32_t*>(source.value());
  ILLM_RETURN_IF_ERROR(device_->gather_rows(xb, size_t(d), rows, int(slots), d, expert_x_, size_t(d)));
  ILLM_RETURN_IF_ERROR(for_each_chosen_expert([&](int e, size_t first, int n) {
    float* h13 = expert_h13_ + first * 2 * h;
    ILLM_RETURN_IF_ERROR(project(expert_x_ + first * d, size_t(d), n, d, w.expert_w13[size_t(e)], h13, 2 * size_t(h), false));
    if (!w.expert_b1) return status::ok();
    ILLM_RETURN_IF_ERROR(device_->add_bias(h13, 2 * size_t(h), n, h, w.expert_b1 + size_t(e) * h));
    return device_->add_bias(h13 + h, 2 * size_t(h), n, h, w.expert_b3 + size_t(e) * h);
  }));
  ILLM_RETURN_IF_ERROR(device_->silu_mul(expert_h13_, expert_h13_ + h, 2 * size_t(h), int(slots), h, expert_h_, size_t(h),
                                         c.activation));
  ILLM_RETURN_IF_ERROR(for_each_chosen_expert([&](int e, size_t first, int n) {
    float* y = expert_y_ + first * d;
    ILLM_RETURN_IF_ERROR(project(expert_h_ + first * h, size_t(h), n, h, w.expert_w2[size_t(e)], y, size_t(d), false));
    return w.expert_b2 ? device_->add_bias(y, size_t(d), n, d, w.expert_b2 + size_t(e) * d) : status::ok();
  }));
  ILLM_RETURN_IF_ERROR(device_->add_weighted_rows(expert_y_, size_t(d), static_cast<const int32_t*>(slot.value()),
                                             static_cast<const float*>(weight.value()), m, k, d, x, size_t(d)));
  return c.shared_hidden_dim > 0 ? shared_expert_forward(w, xb, x, m) : status::ok();
}

status engine::shared_expert_forward(const device_weights::layer& w, const float* xb, float* x, int m) {
  const model_config& c = config();
  const int d = c.dim, sh = c.shared_hidden_dim;
  const size_t slots = size_t(options_.max_batch_tokens) * size_t(c.n_experts_used);
  // The gate's logit of each row (a product with the [1][dim] gate), through the router's buffer.
  ILLM_RETURN_IF_ERROR(project(xb, size_t(d), m, d, w.shared_gate, router_logits_, 1, false));
  auto gate = read_on_host(router_logits_, size_t(m), router_host_);
  if (!gate.is_ok()) return gate.error();
  shared_rows_.resize(size_t(m));
  shared_weight_.resize(size_t(m));
  for (int i = 0; i < m; ++i) {
    shared_rows_[size_t(i)] = i;
    shared_weight_[size_t(i)] = float(1.0 / (1.0 + std::exp(-double(gate.value()[i]))));
  }
  auto rows = stage_for_device(shared_rows_.data(), size_t(m) * 4, 3 * slots * 4);
  auto weight = stage_for_device(shared_weight_.data(), size_t(m) * 4, 3 * slots * 4 + size_t(options_.max_batch_tokens) * 4);
  for (auto* staged : {&rows, &weight})
    if (!staged->is_ok()) return staged->error();
  ILLM_RETURN_IF_ERROR(project(xb, size_t(d), m, d, w.shared_w13, shared_h13_, 2 * size_t(sh), false));
  ILLM_RETURN_IF_ERROR(device_->silu_mul(shared_h13_, shared_h13_ + sh, 2 * size_t(sh), m, sh, shared_h_, size_t(sh), {}));
  ILLM_RETURN_IF_ERROR(project(shared_h_, size_t(sh), m, sh, w.shared_w2, expert_y_, size_t(d), false));
  return device_->add_weighted_rows(expert_y_, size_t(d), static_cast<const int32_t*>(rows.value()),
                               static_cast<const float*>(weight.value()), m, 1, d, x, size_t(d));
}

}  // namespace illm::gpu
