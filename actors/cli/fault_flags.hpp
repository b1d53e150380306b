#pragma once
// `--faults SPEC` (and the `faults` configuration key) of illm serve, illm gmanager and illm instance: the fault plan read
// and checked, announced loudly at start, and counted in illm:faults_injected_total{kind}.

#include <functional>
#include <string>

#include "actors/faults/control_faults.hpp"
#include "actors/faults/fault_plan.hpp"
#include "actors/metrics/metrics.hpp"

namespace illm::cli {

/// The plan of `text` for a process of `role`; a bad spec, or one with faults that role cannot inject, fails
/// (status 2) with the error, naming --faults.
actors::faults::fault_plan fault_plan_of(const std::string& text, actors::faults::fault_role role);

/// Says on stderr, loudly, that `who` injects the faults of `plan` (nothing when it is empty).
void announce_faults(const actors::faults::fault_plan& plan, const std::string& who);

/// Registers illm:faults_injected_total{kind} (under `prefix`) on `registry`, read from `injected` when scraped.
void add_faults_metric(actors::metrics::registry& registry, const std::string& prefix,
                       std::function<actors::faults::fault_counts()> injected);

}  // namespace illm::cli
