#pragma once
// An instance and its worker (same process only): the step plan is shared, never serialized.

#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "gpu/attention_router.hpp"

namespace illm::gpu {
struct step_plan;
}

namespace illm::actors {

/// instance -> worker: run this step (plan and sequences stay owned by the instance meanwhile).
struct run_step {
  std::shared_ptr<gpu::step_plan> plan;
};

/// worker -> instance: the step ran (error empty) or failed.
struct step_done {
  std::shared_ptr<gpu::step_plan> plan;
  std::string error;
  /// With an error: the sequences it is due to and the holders their remote attention failed at, when the
  /// router could tell; the others of the plan run the step again. Empty: the error is every sequence's.
  std::vector<gpu::failed_attention> failed;
};

}  // namespace illm::actors

// The worker's messages carry a shared step plan: they never leave the process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(illm::actors::run_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(illm::actors::step_done)
