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

#include <chrono>
#include <memory>

#include "actors/hosted_blocks.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "gpu/backend.hpp"
#include "gpu/kv_pool.hpp"
#include "transport/transport.hpp"

namespace illm::actors {

/// What an attention server needs.
struct attention_server_config {
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<hosted_blocks> hosted;  ///< what the rManager keeps here for whom
  std::shared_ptr<gpu::backend> device;   ///< its own, not the worker's
  gpu::attention_shape shape;
  int n_layers = 0;
  std::shared_ptr<transport::data_plane> plane;
  std::chrono::milliseconds wait_limit{60000};  ///< how long a chunk's attend waits for its blocks
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional: counts the attends relayed
};

/// Spawns a detached attention server; feed it the data plane's attend messages (incoming_attend).
caf::actor spawn_attention_server(caf::actor_system& sys, attention_server_config config);

}  // namespace illm::actors
