#include "actors/logic/hosted_blocks.hpp"

#include <algorithm>
#include <map>
#include <numeric>

namespace illm::actors {

namespace {
constexpr int32_t tokens_per_block = 16;
}

void hosted_blocks::add(uint32_t owner, uint64_t req, const std::vector<uint32_t>& logical,
                        const std::vector<uint32_t>& physical) {
  std::lock_guard lock(mutex_);
  by_request_[{owner, req}].push_back({logical, physical});
}

std::vector<uint32_t> hosted_blocks::remove_request(uint32_t owner, uint64_t req) {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> out;
  auto it = by_request_.find({owner, req});
  if (it == by_request_.end()) return out;
  for (const move_blocks& m : it->second) out.insert(out.end(), m.physical.begin(), m.physical.end());
  by_request_.erase(it);
  return out;
}

void hosted_blocks::remove_blocks(uint32_t owner, uint64_t req, const std::vector<uint32_t>& physical) {
  std::lock_guard lock(mutex_);
  auto it = by_request_.find({owner, req});
  if (it == by_request_.end()) return;
  auto& moves = it->second;
  moves.erase(std::remove_if(moves.begin(), moves.end(), [&](const move_blocks& m) { return m.physical == physical; }),
              moves.end());
  if (moves.empty()) by_request_.erase(it);
}

std::optional<hosted_blocks::blocks> hosted_blocks::find(uint32_t owner, uint64_t req, uint32_t count) const {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<uint32_t, uint32_t>> chosen;  // (logical, physical)
  if (count == 0) return blocks{};
  auto it = by_request_.find({owner, req});
  if (it == by_request_.end()) return std::nullopt;
  for (const move_blocks& m : it->second) {
    for (size_t i = 0; i < m.logical.size(); ++i) chosen.emplace_back(m.logical[i], m.physical[i]);
    if (chosen.size() >= count) break;
  }
  if (chosen.size() != count) return std::nullopt;
  std::sort(chosen.begin(), chosen.end());
  blocks out;
  for (const auto& [logical, physical] : chosen) {
    out.physical.push_back(physical);
    out.first_token.push_back(int32_t(logical) * tokens_per_block);
  }
  return out;
}

std::optional<hosted_blocks::blocks> hosted_blocks::find_logical(uint32_t owner, uint64_t req,
                                                                 const std::vector<uint32_t>& runs) const {
  std::lock_guard lock(mutex_);
  auto it = by_request_.find({owner, req});
  if (it == by_request_.end()) return runs.empty() ? std::optional<blocks>(blocks{}) : std::nullopt;
  std::map<uint32_t, uint32_t> physical_of;  // logical -> physical, later moves over earlier ones
  for (const move_blocks& m : it->second)
    for (size_t i = 0; i < m.logical.size(); ++i) physical_of[m.logical[i]] = m.physical[i];
  blocks out;
  for (size_t r = 0; r + 1 < runs.size(); r += 2)
    for (uint32_t logical = runs[r]; logical < runs[r] + runs[r + 1]; ++logical) {
      auto found = physical_of.find(logical);
      if (found == physical_of.end()) return std::nullopt;
      out.physical.push_back(found->second);
      out.first_token.push_back(int32_t(logical) * tokens_per_block);
    }
  return out;
}

std::map<uint32_t, uint32_t> hosted_blocks::logical_map(uint32_t owner, uint64_t req) const {
  std::lock_guard lock(mutex_);
  std::map<uint32_t, uint32_t> out;
  if (auto it = by_request_.find({owner, req}); it != by_request_.end())
    for (const move_blocks& m : it->second)
      for (size_t i = 0; i < m.logical.size(); ++i) out[m.logical[i]] = m.physical[i];
  return out;
}

uint32_t hosted_blocks::count() const {
  std::lock_guard lock(mutex_);
  uint32_t n = 0;
  for (const auto& [key, moves] : by_request_)
    for (const move_blocks& m : moves) n += uint32_t(m.physical.size());
  return n;
}

std::vector<uint64_t> hosted_blocks::requests_of(uint32_t owner) const {
  std::lock_guard lock(mutex_);
  return requests_of_owner(by_request_, owner);
}

}  // namespace illm::actors
