#pragma once
// A data plane that injects faults into another one ("faulty:ucx", "faulty:inproc"): by its fault_spec,
// puts and messages fail, are dropped, duplicated or delayed, and partitioned peers are cut off both ways.
// The faults are drawn from the spec's seed in the order operations come, so a run whose operations come
// in the same order (the simulator's, CAF's test coordinator) injects the same faults again.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "transport/faulty/fault_spec.hpp"

namespace illm::transport {

/// Faults injected so far, by kind ("put_fail", "send_drop", "partition", ...).
using fault_counts = std::map<std::string, uint64_t>;

/// A plane around `inner` that injects the faults of a spec.
class faulty_plane final : public data_plane {
 public:
  faulty_plane(std::shared_ptr<data_plane> inner, fault_spec spec);
  /// Runs what is still delayed at once, then stops the delay thread.
  ~faulty_plane() override;

  peer_id self() const override { return inner_->self(); }
  ILLM_DATA_PLANE_OPERATIONS;
  traffic counters() const override { return inner_->counters(); }
  std::vector<uint8_t> address() const override { return inner_->address(); }
  status connect(peer_id peer, std::span<const uint8_t> address) override { return inner_->connect(peer, address); }
  status disconnect(peer_id peer) override { return inner_->disconnect(peer); }
  void on_peer_error(peer_error_handler handler) override { inner_->on_peer_error(std::move(handler)); }
  status start_progress_thread() override { return inner_->start_progress_thread(); }

  /// The faults injected so far, by kind.
  fault_counts injected() const;
  std::map<std::string, uint64_t> faults_injected() const override { return injected(); }
  const fault_spec& spec() const { return spec_; }
  /// Cuts `peers` off both ways for `duration` from now, besides the spec's partitioned peers (a partition
  /// that a test or the chaos suite starts while the plane runs, and that heals by itself).
  void partition_for(const std::vector<peer_id>& peers, std::chrono::milliseconds duration);

 private:
  enum class fate { pass, fail, drop, duplicate, delay };
  /// Draws what happens to one operation (`kind` names it in the counts: "put" or "send").
  fate draw(const char* kind, double fail, double drop, double duplicate, double delay);
  /// Whether `peer` is cut off (counted as a partition fault when it is).
  bool cut_off(peer_id peer);
  /// Runs `action` on the delay thread after the spec's delay.
  void later(std::function<void()> action);
  void run_delayed();

  std::shared_ptr<data_plane> inner_;
  const fault_spec spec_;
  mutable std::mutex mutex_;
  std::mt19937_64 random_;
  fault_counts injected_;
  std::map<peer_id, std::chrono::steady_clock::time_point> cut_until_;  // partition_for's peers, until when
  std::condition_variable delayed_changed_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> delayed_;
  bool stopping_ = false;
  std::thread delay_thread_;
};

}  // namespace illm::transport
