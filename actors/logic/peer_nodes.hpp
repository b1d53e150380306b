#pragma once
// Which node (host) each instance of the cluster runs on, as the latest view says (plain C++, thread-safe):
// the rManager keeps it up to date, and the remote router relays a long step's queries through one holder
// per other node, so that they cross the network once per node.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace illm::actors {

/// Instance -> node name.
class peer_nodes {
 public:
  /// Replaces what is known with the latest view's.
  void update(std::map<uint32_t, std::string> nodes) {
    std::lock_guard lock(mutex_);
    nodes_ = std::move(nodes);
  }
  /// Whether instances a and b are known to run on different nodes (a name each, not the same).
  bool apart(uint32_t a, uint32_t b) const {
    std::lock_guard lock(mutex_);
    const auto x = nodes_.find(a), y = nodes_.find(b);
    return x != nodes_.end() && y != nodes_.end() && !x->second.empty() && !y->second.empty() && x->second != y->second;
  }
  /// The node instance `id` runs on (empty: unknown).
  std::string of(uint32_t id) const {
    std::lock_guard lock(mutex_);
    const auto it = nodes_.find(id);
    return it == nodes_.end() ? std::string() : it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<uint32_t, std::string> nodes_;
};

}  // namespace illm::actors
