#include "transport/inproc/inproc.hpp"

#include <cstring>

#include <fmt/format.h>

namespace illm::transport {

result<std::shared_ptr<inproc_endpoint>> inproc_fabric::connect(peer_id id) {
  std::lock_guard lock(mutex_);
  if (auto it = endpoints_.find(id); it != endpoints_.end() && !it->second.expired())
    return status{status_code::invalid_argument, fmt::format("peer {} is already on the fabric", id)};
  auto endpoint = std::make_shared<inproc_endpoint>(shared_from_this(), id);
  endpoints_[id] = endpoint;
  return endpoint;
}

void inproc_fabric::disconnect(peer_id id) {
  std::lock_guard lock(mutex_);
  endpoints_.erase(id);
}

std::shared_ptr<inproc_endpoint> inproc_fabric::find(peer_id id) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(id);
  return it == endpoints_.end() ? nullptr : it->second.lock();
}

inproc_endpoint::inproc_endpoint(std::shared_ptr<inproc_fabric> fabric, peer_id id)
    : fabric_(std::move(fabric)), id_(id) {}

inproc_endpoint::~inproc_endpoint() = default;

namespace {

std::vector<uint8_t> pack_region_id(uint32_t region) {
  return {uint8_t(region), uint8_t(region >> 8), uint8_t(region >> 16), uint8_t(region >> 24)};
}

status unreachable(peer_id peer) {
  return {status_code::io_error, fmt::format("peer {} is not reachable", peer)};
}

}  // namespace

result<remote_region> inproc_endpoint::register_memory(void* base, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  remote_region r{reinterpret_cast<uint64_t>(base), bytes, pack_region_id(uint32_t(regions_.size()))};
  regions_.push_back(r);
  return r;
}

status inproc_endpoint::check_region(const remote_region& region, uint64_t address, uint64_t bytes) const {
  std::lock_guard lock(mutex_);
  for (const remote_region& r : regions_)
    if (r.packed_key == region.packed_key && r.address == region.address)
      return address >= r.address && bytes <= r.bytes && address - r.address <= r.bytes - bytes
                 ? status::ok()
                 : status{status_code::invalid_argument,
                          fmt::format("put of {} bytes at {:#x} outside the region of peer {}", bytes, address, id_)};
  return {status_code::invalid_argument, fmt::format("no region with that key at peer {}", id_)};
}

void inproc_endpoint::put(peer_id peer, const void* local, uint64_t bytes, const remote_region& region,
                          uint64_t remote_address, completion done) {
  auto target = fabric_->find(peer);
  if (!target) return done(unreachable(peer));
  if (status s = target->check_region(region, remote_address, bytes); !s.is_ok()) return done(s);
  std::memcpy(reinterpret_cast<void*>(remote_address), local, bytes);
  {
    std::lock_guard lock(mutex_);
    traffic_.put_bytes += bytes;
  }
  done(status::ok());
}

void inproc_endpoint::flush(peer_id peer, completion done) {
  // Copies are complete when put returns: a flush only checks that the peer is still there.
  done(fabric_->find(peer) ? status::ok() : unreachable(peer));
}

void inproc_endpoint::send(peer_id peer, channel ch, std::span<const uint8_t> payload, completion done) {
  auto target = fabric_->find(peer);
  if (!target) return done(unreachable(peer));
  {
    std::lock_guard lock(mutex_);
    traffic_.message_bytes[uint8_t(ch) % 3] += payload.size();
    ++traffic_.messages;
  }
  done(target->deliver(id_, ch, std::vector<uint8_t>(payload.begin(), payload.end())));
}

status inproc_endpoint::deliver(peer_id from, channel ch, std::vector<uint8_t> payload) {
  message_handler handler;
  {
    std::lock_guard lock(mutex_);
    handler = handlers_[uint8_t(ch) % 3];
  }
  if (!handler) return {status_code::unsupported, fmt::format("peer {} has no handler for channel {}", id_, int(ch))};
  handler(from, std::move(payload));
  return status::ok();
}

void inproc_endpoint::on_message(channel ch, message_handler handler) {
  std::lock_guard lock(mutex_);
  handlers_[uint8_t(ch) % 3] = std::move(handler);
}

traffic inproc_endpoint::counters() const {
  std::lock_guard lock(mutex_);
  return traffic_;
}

}  // namespace illm::transport
