#pragma once
// Which instances are members and which node (host) each runs on, as the latest view says (plain C++,
// thread-safe): the rManager keeps it up to date; the remote router relays a long step's queries through one
// holder per other node, so that they cross the network once per node, and the data plane's message handlers
// drop what a sender that is no member sends.

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace illm::actors {

/// Instance -> node name.
class peer_nodes {
 public:
  /// Replaces what is known with the latest view's: the node of each instance it lists, and every member (those
  /// it leaves out for a while too).
  void update(std::map<uint32_t, std::string> nodes, std::set<uint32_t> members) {
    std::lock_guard lock(mutex_);
    nodes_ = std::move(nodes);
    members_ = std::move(members);
  }
  /// Whether instance `id` is a member as the latest view says.
  bool member(uint32_t id) const {
    std::lock_guard lock(mutex_);
    return members_.count(id) > 0;
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
  std::set<uint32_t> members_;
};

}  // namespace illm::actors
