#include "actors/attention_server.hpp"

#include <fmt/format.h>

namespace illm::actors {

namespace {

partials answer(const attention_server_config& c, const attend& a, instance_id from) {
  partials p;
  p.tag = a.tag;
  const size_t row = size_t(c.shape.n_heads) * c.shape.head_dim;
  if (a.layer >= c.n_layers || a.q.size() != size_t(a.n_q) * row) {
    p.error = "attend does not match this model's shape";
    return p;
  }
  const std::optional<hosted_blocks::blocks> found = c.hosted->find(from, a.req_id, a.num_blocks);
  if (!found) {
    p.error = fmt::format("instance {} keeps no {} blocks of request {} for instance {}", c.plane->self(),
                          a.num_blocks, a.req_id, from);
    return p;
  }
  const hosted_blocks::blocks& held = *found;
  const size_t rows = size_t(a.n_q) * c.shape.n_heads;
  p.m.resize(rows);
  p.e.resize(rows);
  p.ma.resize(rows * c.shape.head_dim);
  const gpu::status s = c.device->micro_attention(c.shape, a.q.data(), row, a.q_pos.data(), a.n_q,
                                                  c.pool->layer_view(a.layer), held.physical.data(),
                                                  held.first_token.data(), int(held.physical.size()), p.m.data(),
                                                  p.e.data(), p.ma.data());
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
