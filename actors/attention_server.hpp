#pragma once
// The attention server of an instance: it answers other instances' remote MicroAttention over the
// blocks this instance hosts for them. It runs on its own thread with its own kernels, apart from the
// worker, so that two instances that lend to each other never wait on each other's step.
//
// The queries of a chunk that another instance prefills for a request name the blocks they read, which
// may be ones a chunk before it is still computing here: such an attend waits, without holding the
// thread, until the pool marks their layer written (kv_pool::mark_written), and fails when their request
// ends first or when it has waited wait_limit. An attend that forwards to other holders on this node is
// relayed to them (their partials come back as incoming_partials), and their partials are merged into
// this one's before it is answered.
//
// An instance runs two: decode tokens' attends (one query row each) go to one, prefill queries (chunks',
// relays, an owner's own long prompt) to the other, so that a decode token never waits behind the prefill
// queries queued here. Each has its own thread and kernels; the one for prefill watches the pool's writes.

#include <chrono>
#include <memory>

#include "actors/logic/hosted_blocks.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/settings/settings.hpp"
#include "gpu/backend.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/staged_attention.hpp"
#include "transport/transport.hpp"

namespace illm::actors {

/// What an attention server needs.
struct attention_server_config {
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<hosted_blocks> hosted;  ///< what the rManager keeps here for whom
  std::shared_ptr<gpu::backend> device;   ///< its own, not the worker's
  gpu::attention_shape shape;  ///< the model's (at_layer gives a layer's call)
  int n_layers = 0;
  std::shared_ptr<transport::data_plane> plane;
  std::chrono::milliseconds wait_limit{60000};  ///< how long a chunk's attend waits for its blocks
  /// Attends of one peer that may wait for their blocks at once (instance_settings' peer_max_waiting_attends):
  /// more are refused and counted (illm:peer_limit_violations_total).
  size_t max_waiting_per_peer = size_t(instance_settings{}.peer_max_waiting_attends);
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional: counts the attends relayed
  /// Listens for the pool's writes, for the chunks' attends that wait (one server per pool does).
  bool watches_writes = true;
  /// MicroAttention on `device` from the attends' host arrays (made by the server).
  std::shared_ptr<gpu::staged_attention> kernels;
};

/// Spawns a detached attention server; feed it the data plane's attend messages (incoming_attend).
attention_server_actor spawn_attention_server(caf::actor_system& sys, attention_server_config config);

/// An instance's attention servers: one for decode tokens' attends, one for everything else.
struct attention_servers {
  attention_server_actor decode, prefill;
  /// Hands an attend payload from `from` to the server of its kind (is_decode_attend).
  void accept(instance_id from, std::vector<uint8_t> bytes) const;
};

/// Spawns both: the prefill one with `config`, the decode one with `decode_device` (its own kernels).
attention_servers spawn_attention_servers(caf::actor_system& sys, attention_server_config config,
                                          std::shared_ptr<gpu::backend> decode_device);

}  // namespace illm::actors
