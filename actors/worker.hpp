#pragma once
// The worker of an instance: it owns the engine and runs the steps its instance plans. Remote
// attention makes a step wait on other instances, so in production the worker is detached (its own
// thread, never one of CAF's scheduler threads); tests and the simulator spawn it as an ordinary
// scheduled actor to run deterministically.

#include <memory>

#include "actors/messages.hpp"
#include "gpu/engine.hpp"

namespace illm::actors {

/// What a worker needs: the engine, the pools it may write (its own) and the router for the rest.
struct worker_config {
  std::shared_ptr<gpu::engine> engine;
  gpu::kv_pools pools;
  std::shared_ptr<gpu::attention_router> router;
  std::shared_ptr<gpu::kv_pool> local_pool;  ///< keeps the pool alive as long as the worker
};

/// Spawns a worker, detached (own thread) or scheduled.
caf::actor spawn_worker(caf::actor_system& sys, worker_config config, bool detached);

}  // namespace illm::actors
