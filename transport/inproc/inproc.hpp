#pragma once
// The in-process data plane: every instance of an embedded cluster has an endpoint on one fabric.
// A put is a copy into the peer's registered memory (checked against the region and the key), a
// message is handed to the peer's handler on the sender's thread. A peer that left the fabric fails
// every operation towards it, as an unreachable UCX endpoint would.

#include <map>
#include <memory>
#include <mutex>

#include "transport/registry.hpp"

namespace illm::transport {

class inproc_endpoint;

/// The shared medium of in-process endpoints.
class inproc_fabric : public plane_group, public std::enable_shared_from_this<inproc_fabric> {
 public:
  /// A new endpoint with id `id` (unique on this fabric).
  result<std::shared_ptr<inproc_endpoint>> connect(peer_id id);
  /// Removes a peer: later operations towards it fail.
  void disconnect(peer_id id);
  /// The endpoint of a peer, or nullptr when it is not connected.
  std::shared_ptr<inproc_endpoint> find(peer_id id) const;

 private:
  mutable std::mutex mutex_;
  std::map<peer_id, std::weak_ptr<inproc_endpoint>> endpoints_;
};

/// One peer on an inproc_fabric.
class inproc_endpoint final : public data_plane {
 public:
  inproc_endpoint(std::shared_ptr<inproc_fabric> fabric, peer_id id);
  ~inproc_endpoint() override;

  peer_id self() const override { return id_; }
  ILLM_DATA_PLANE_OPERATIONS;
  traffic counters() const override;

  /// Delivers a message from `from` to this endpoint's handler (called by the sender).
  status deliver(peer_id from, channel ch, std::vector<uint8_t> payload);
  /// Checks that [address, address + bytes) lies in a region registered here with this key.
  status check_region(const remote_region& region, uint64_t address, uint64_t bytes) const;

 private:
  std::shared_ptr<inproc_fabric> fabric_;
  peer_id id_;
  mutable std::mutex mutex_;
  std::vector<remote_region> regions_;
  message_handler handlers_[3];
  traffic traffic_;
};

}  // namespace illm::transport
