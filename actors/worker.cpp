#include "actors/worker.hpp"

#include "actors/faults/hang.hpp"
#include "gpu/batcher.hpp"

namespace illm::actors {

namespace {

caf::behavior worker_behavior(caf::event_based_actor* self, worker_config config) {
  faults::silent_when_told(self);
  auto cfg = std::make_shared<worker_config>(std::move(config));
  return {
      [cfg](run_step& job) {
        const gpu::status s = gpu::batcher::execute(*cfg->engine, *job.plan, cfg->pools, cfg->router.get());
        auto failed = cfg->router ? cfg->router->take_failed() : std::vector<gpu::failed_attention>{};
        if (s.is_ok()) return step_done{std::move(job.plan), {}, {}};
        return step_done{std::move(job.plan), s.message(), std::move(failed)};
      },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& sys, worker_config config, bool detached) {
  if (detached) return sys.spawn<caf::detached>(worker_behavior, std::move(config));
  return sys.spawn(worker_behavior, std::move(config));
}

}  // namespace illm::actors
