#include "actors/cli/fault_flags.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "actors/cli/commands.hpp"

namespace illm::cli {

actors::faults::fault_plan fault_plan_of(const std::string& text, actors::faults::fault_role role) {
  auto plan = actors::faults::parse_fault_plan(text);
  if (!plan.is_ok()) fail("--faults " + text + ": " + plan.error().message(), 2);
  if (auto fits = check_role(plan.value(), role); !fits.is_ok()) fail("--faults " + text + ": " + fits.message(), 2);
  return std::move(plan).value();
}

void announce_faults(const actors::faults::fault_plan& plan, const std::string& who) {
  if (plan.empty()) return;
  fmt::print(stderr, "{}: WARNING: FAULT INJECTION IS ON ({}): {}\n", who, plan.text, describe(plan));
  std::fflush(stderr);
}

void add_faults_metric(actors::metrics::registry& registry, const std::string& prefix,
                       std::function<actors::faults::fault_counts()> injected) {
  registry.add_sampled_counter(prefix + "faults_injected_total", "Faults injected by --faults, by kind.", {"kind"},
                               [injected = std::move(injected)] {
                                 std::vector<std::pair<actors::metrics::label_values, double>> out;
                                 for (const auto& [kind, n] : injected()) out.push_back({{kind}, double(n)});
                                 return out;
                               });
}

}  // namespace illm::cli
