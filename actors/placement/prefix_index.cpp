#include "actors/placement/prefix_index.hpp"

#include <algorithm>

namespace illm::actors::placement {

void prefix_index::add(instance_id member, member_keys& m, const gpu::block_key& key) {
  if (m.keys.insert(key).second) holders_[key].push_back(member);
}

void prefix_index::remove(instance_id member, member_keys& m, const gpu::block_key& key) {
  if (!m.keys.erase(key)) return;
  auto at = holders_.find(key);
  if (at == holders_.end()) return;
  std::erase(at->second, member);
  if (at->second.empty()) holders_.erase(at);
}

void prefix_index::clear(instance_id member, member_keys& m) {
  for (const gpu::block_key& key : std::vector<gpu::block_key>(m.keys.begin(), m.keys.end())) remove(member, m, key);
}

bool prefix_index::apply(instance_id member, uint64_t seq, uint64_t base, const gpu::prefix_changes& changes) {
  member_keys& m = members_[member];
  if (changes.full) {
    clear(member, m);
    for (const gpu::block_key& key : changes.added) add(member, m, key);
    m.synced = true;
  } else if (!m.synced || m.applied != base) {
    clear(member, m);
    m.synced = false;
    return false;
  } else {
    for (const gpu::block_key& key : changes.removed) remove(member, m, key);
    for (const gpu::block_key& key : changes.added) add(member, m, key);
  }
  m.applied = seq;
  return true;
}

void prefix_index::drop(instance_id member) {
  auto at = members_.find(member);
  if (at == members_.end()) return;
  clear(member, at->second);
  members_.erase(at);
}

bool prefix_index::needs_full(instance_id member) const {
  auto at = members_.find(member);
  return at != members_.end() && !at->second.synced;
}

std::vector<std::pair<instance_id, uint32_t>> prefix_index::lookup(std::span<const gpu::block_key> keys) const {
  std::vector<std::pair<instance_id, uint32_t>> out;
  if (keys.empty()) return out;
  auto first = holders_.find(keys[0]);
  if (first == holders_.end()) return out;
  for (instance_id member : first->second) {
    const member_keys& m = members_.at(member);
    uint32_t n = 1;
    while (n < keys.size() && m.keys.count(keys[n])) ++n;
    out.push_back({member, n});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  return out;
}

std::vector<prefix_segment> prefix_index::cover(std::span<const gpu::block_key> keys) const {
  std::vector<prefix_segment> out;
  for (size_t at = 0; at < keys.size();) {
    auto holders = holders_.find(keys[at]);
    if (holders == holders_.end()) break;
    prefix_segment longest;
    for (instance_id member : holders->second) {
      const member_keys& m = members_.at(member);
      uint32_t run = 1;
      while (at + run < keys.size() && m.keys.count(keys[at + run])) ++run;
      if (run > longest.count || (run == longest.count && member < longest.holder))
        longest = {member, uint32_t(at), run};
    }
    out.push_back(longest);
    at += longest.count;
  }
  return out;
}

size_t prefix_index::keys_of(instance_id member) const {
  auto at = members_.find(member);
  return at == members_.end() ? 0 : at->second.keys.size();
}

}  // namespace illm::actors::placement
