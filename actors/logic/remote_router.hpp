#pragma once
// The attention_router of an instance in a cluster: remote MicroAttention jobs go to the holders'
// attention servers as `attend` messages on the data plane, and the engine's worker waits for their
// `partials`. Only queries and partials travel; the blocks stay where they are. A long step's queries to
// several holders on another node go there once, to one of them, which relays them and answers with all
// their partials merged (the others' jobs then get an empty partial, which the merge passes over).

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/metrics/metrics.hpp"
#include "actors/logic/peer_nodes.hpp"
#include "gpu/attention_router.hpp"
#include "transport/transport.hpp"

namespace illm::actors {

/// Sends attend messages and collects partials for one engine (one step's layer at a time, per lane).
class remote_router final : public gpu::attention_router {
 public:
  /// `n_heads` and `head_dim` size the answers; a holder that does not answer within `timeout` fails the step.
  /// With `nodes`, a sequence's jobs of at least `relay_min_rows` queries to several holders on another node
  /// go as one attend to the first of them, which relays them to the others there (attend::forwards).
  remote_router(std::shared_ptr<transport::data_plane> plane, int n_heads, int head_dim,
                std::chrono::milliseconds timeout, metrics::histogram* latency = nullptr,
                std::shared_ptr<peer_nodes> nodes = nullptr, int relay_min_rows = 64);

  gpu::status begin(int lane, std::span<const gpu::remote_attention_job> jobs) override;
  gpu::status finish(int lane) override;
  void cancel() override;
  std::vector<gpu::failed_attention> take_failed() override;

  /// Transport handler of the partials channel: an answer from a holder.
  void on_partials(transport::peer_id from, std::vector<uint8_t> payload);

  /// The data plane lost `peer`: the jobs waiting for its partials fail now (not at the timeout).
  void peer_failed(transport::peer_id peer, const std::string& why);

 private:
  struct pending {
    gpu::remote_attention_job job;
    int lane = 0;
    bool done = false;
    std::vector<gpu::remote_attention_job> relayed;  // answered through job's holder, merged into its partial
    std::vector<uint8_t> payload;  // the attend as sent: sent again while no answer came
  };
  /// Sends again the attends of `lane` that have no answer yet (a lost message; a holder answers a repeated
  /// attend again, and the router takes the first answer). Called with `lock` held; sends without it.
  void resend_unanswered(int lane, std::unique_lock<std::mutex>& lock);
  /// The lane's jobs as attends go out: one per job, or per sequence and other node where they relay.
  std::vector<std::vector<gpu::remote_attention_job>> group(std::span<const gpu::remote_attention_job> jobs) const;
  /// Sends one attend for a group of jobs (the first's holder relays to the others).
  void send_group(int lane, std::vector<gpu::remote_attention_job> group);
  /// One lane's round of jobs.
  struct round {
    size_t outstanding = 0;
    gpu::status first_error;
    std::chrono::steady_clock::time_point started, answered;  // queries sent; the last job settled
  };
  void fail(uint64_t tag, gpu::status why);
  /// Marks `p` answered; `why` (if not ok) becomes its lane's error unless one came first, and `p` failed at
  /// `at` (its holder when none is named). Holds mutex_.
  void settle(pending& p, gpu::status why, std::optional<uint32_t> at = std::nullopt);

  std::shared_ptr<transport::data_plane> plane_;
  std::shared_ptr<peer_nodes> nodes_;
  int relay_min_rows_;
  int n_heads_, head_dim_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable answered_;
  std::map<uint64_t, pending> pending_;
  std::array<round, lanes> rounds_;
  std::set<gpu::failed_attention> failed_;  // sequences whose jobs failed and where, until take_failed()
  uint64_t next_tag_ = 1;
  metrics::histogram* latency_;  // queries sent to the last partial in, per layer and lane
};

}  // namespace illm::actors
