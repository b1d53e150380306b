#include "actors/checker_hooks.hpp"

#include <array>
#include <utility>

namespace illm::actors {

namespace {

constexpr std::array<std::pair<planted_defect, const char*>, 6> defect_names{{
    {planted_defect::none, "none"},
    {planted_defect::second_end, "second-end"},
    {planted_defect::wrong_token, "wrong-token"},
    {planted_defect::token_past_max, "token-past-max"},
    {planted_defect::leaked_block, "leaked-block"},
    {planted_defect::failed_fitting, "failed-fitting"},
}};

}  // namespace

const char* to_string(planted_defect d) {
  for (const auto& [defect, name] : defect_names)
    if (defect == d) return name;
  return "?";
}

std::optional<planted_defect> planted_defect_named(const std::string& name) {
  for (const auto& [defect, n] : defect_names)
    if (name == n) return defect;
  return std::nullopt;
}

}  // namespace illm::actors
