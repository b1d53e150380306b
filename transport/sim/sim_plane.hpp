#pragma once
// The data plane of the simulator: the pools there have no memory behind them, so a put copies nothing.
// A put completes when its timer says its bytes would have arrived (at once without one); messages
// complete at once; both are counted, as the inproc plane counts them.

#include <functional>
#include <mutex>

#include "transport/registry.hpp"

namespace illm::transport {

/// A data plane that moves no bytes (the simulator's).
class sim_plane final : public data_plane {
 public:
  explicit sim_plane(peer_id id, put_timer timer = nullptr) : id_(id), timer_(std::move(timer)) {}
  peer_id self() const override { return id_; }
  result<remote_region> register_memory(void* base, uint64_t bytes) override {
    return remote_region{reinterpret_cast<uint64_t>(base), bytes, {}};
  }
  void put(peer_id peer, const void*, uint64_t bytes, const remote_region&, uint64_t, completion done) override {
    count_put(bytes);
    if (timer_) return timer_(id_, peer, bytes, std::move(done));
    done(status::ok());
  }
  void flush(peer_id, completion done) override { done(status::ok()); }
  void send(peer_id, channel ch, std::span<const uint8_t> payload, completion done) override {
    {
      std::lock_guard lock(mutex_);
      traffic_.message_bytes[uint8_t(ch) % 3] += payload.size();
      ++traffic_.messages;
    }
    done(status::ok());
  }
  void on_message(channel, message_handler) override {}
  traffic counters() const override {
    std::lock_guard lock(mutex_);
    return traffic_;
  }

 private:
  void count_put(uint64_t bytes) {
    std::lock_guard lock(mutex_);
    traffic_.put_bytes += bytes;
  }
  peer_id id_;
  put_timer timer_;
  mutable std::mutex mutex_;
  traffic traffic_;
};

}  // namespace illm::transport
