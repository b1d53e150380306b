#include "actors/attention_server.hpp"

#include <fmt/format.h>

namespace illm::actors {

namespace {

/// Checks an attend request against the pool: shape, layer and ownership of every block.
gpu::status check_request(const attention_server_config& c, const attend& a, instance_id from) {
  const size_t row = size_t(c.shape.n_heads) * c.shape.head_dim;
  if (a.layer >= c.n_layers || a.q.size() != size_t(a.n_q) * row)
    return {gpu::status_code::invalid_argument, "attend does not match this model's shape"};
  for (uint32_t b : a.blocks) {
    const gpu::block_owner owner = c.pool->owner(b);
    if (!c.pool->is_used(b) || owner.request != a.req_id || owner.instance != from)
      return {gpu::status_code::invalid_argument,
              fmt::format("block {} is not kept here for request {} of instance {}", b, a.req_id, from)};
  }
  return gpu::status::ok();
}

partials answer(const attention_server_config& c, const attend& a, instance_id from) {
  partials p;
  p.tag = a.tag;
  if (gpu::status s = check_request(c, a, from); !s.is_ok()) {
    p.error = s.message();
    return p;
  }
  const size_t rows = size_t(a.n_q) * c.shape.n_heads;
  p.m.resize(rows);
  p.e.resize(rows);
  p.ma.resize(rows * c.shape.head_dim);
  const gpu::status s = c.device->micro_attention(c.shape, a.q.data(), size_t(c.shape.n_heads) * c.shape.head_dim,
                                                  a.q_pos.data(), a.n_q, c.pool->layer_view(a.layer), a.blocks.data(),
                                                  a.block_pos.data(), int(a.blocks.size()), p.m.data(), p.e.data(),
                                                  p.ma.data());
  p.ok = s.is_ok();
  if (!p.ok) p.error = s.message();
  return p;
}

caf::behavior attention_server_behavior(caf::event_based_actor*, attention_server_config config) {
  auto cfg = std::make_shared<attention_server_config>(std::move(config));
  return {
      [cfg](const incoming_attend& in) {
        auto request = decode_attend(in.payload);
        partials p;
        if (request.is_ok()) {
          p = answer(*cfg, request.value(), in.from);
        } else {
          p.error = request.error().message();  // the tag is unknown: the owner times out on it
        }
        const std::vector<uint8_t> payload = encode(p);
        cfg->plane->send(in.from, transport::channel::partials, payload, [](gpu::status) {});
      },
  };
}

}  // namespace

caf::actor spawn_attention_server(caf::actor_system& sys, attention_server_config config) {
  return sys.spawn<caf::detached>(attention_server_behavior, std::move(config));
}

}  // namespace illm::actors
