#pragma once
// What a front end needs of a cluster, however it runs: an embedded cluster (cluster) or a cluster of
// processes reached through its gManager (remote_cluster). Requests go to the instance of the gManager's
// view where they cost least (route_request: its load and the prompt it would compute there, which the prefix
// caches may hold); their tokens come back through request actors of the caller's process.

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "actors/messages.hpp"
#include "actors/request.hpp"

namespace illm::actors {

/// Where a new request goes: the instance of the view, not draining, with the most free blocks (the
/// first such one when none has any); null when the view has none.
const instance_view* most_free_instance(const cluster_view& view);

/// Blocks (prompt and max tokens) of the requests a router sent to each instance that have not ended: its own part
/// of their load, known before any heartbeat reports it (a burst routed within one heartbeat sees it).
using routed_blocks = std::map<instance_id, uint64_t>;

/// The work on instance `i` in blocks: those in use or spoken for, and those its queued requests need, or what this
/// router sent it when that is more (the view is a heartbeat old).
double instance_load(const instance_view& i, const routed_blocks& routed);

/// How many of a new request's first prompt blocks each instance's cache holds, as the gManager's index has it.
using prefix_hits = std::vector<std::pair<instance_id, uint32_t>>;

/// What a prompt block read where another instance's cache holds it costs, against one computed (its attention's
/// query and partials travel each step, its KV does not).
inline constexpr double remote_read_weight = 0.25;

/// Where a new request of `prompt_blocks` full prompt blocks goes: the instance of the view, not draining, where it
/// costs least, as NVIDIA Dynamo's KV router weighs a worker: its load (instance_load: running and queued work),
/// plus the prompt blocks the request would compute there (those its cache lacks). An instance that reads other
/// caches (cache_shared) computes only what no cache holds (the first `covered` blocks are held between them), and
/// pays remote_read_weight for each block it reads elsewhere. Of equal costs, the one with the most free blocks.
const instance_view* cheapest_instance(const cluster_view& view, uint32_t prompt_blocks, const prefix_hits& hits,
                                       uint32_t covered = 0, const routed_blocks& routed = {});

/// What gManager `gm`'s index says of `p`'s prompt blocks (none when no instance of `view` caches, the prompt has
/// no full block to find, or the gManager does not answer).
std::optional<prefix_holders> look_up_prefix(caf::actor_system& sys, const gmanager_actor& gm,
                                             const cluster_view& view, const generate_params& p);

/// The blocks of `p`'s prompt the instances' caches hold, by gManager `gm`'s index (none when no instance of
/// `view` caches, or the gManager does not answer).
prefix_hits cached_prefix_of(caf::actor_system& sys, const gmanager_actor& gm, const cluster_view& view,
                             const generate_params& p);

/// Where a new request goes: the cheapest instance of `view` (cheapest_instance) for what the index said of its
/// prompt (`prefix`) and the blocks the router has sent each instance; null when the view has none.
const instance_view* route_request(const cluster_view& view, const generate_params& p,
                                   const std::optional<prefix_holders>& prefix, const routed_blocks& routed);

/// Picks where a request goes from the blocks a router has sent each instance.
using target_chooser = std::function<serving_instance(const routed_blocks&)>;

/// The instances of a view that take new requests, and the tokens of KV their pools hold in all.
struct serving_capacity {
  int instances = 0;
  uint64_t kv_tokens = 0;
};
/// What `view` can serve (draining instances left out).
serving_capacity capacity_of(const cluster_view& view);

/// Asks gManager `gm` for its cluster_status (none when it does not answer within a few seconds).
std::optional<cluster_status> ask_status(caf::actor_system& sys, const gmanager_actor& gm);

/// The requests a router has in flight: their actors, each forgotten when it ends. It must outlive
/// the actors it spawned (the owner awaits them before destroying it).
class request_table {
 public:
  /// With `resume_elsewhere`, a request whose instance left the cluster goes on on another one.
  explicit request_table(bool resume_elsewhere = false) : resume_elsewhere_(resume_elsewhere) {}
  /// Spawns the request actor of `id`, which submits it to the instance `choose` picks from `chosen_from` and the
  /// blocks this table's requests were sent, and records it, under one lock: submits that race each see those
  /// before them (a burst spreads over the instances). A view told before that is newer than `chosen_from` is told
  /// to it too (its target may have died meanwhile). `prefix` (what the index said of its prompt) goes with it: its
  /// instance reads the runs named without asking again.
  void spawn(caf::actor_system& sys, request_id id, const generate_params& params, const target_chooser& choose,
             request_callbacks callbacks, const cluster_view& chosen_from, std::optional<prefix_holders> prefix = {});
  void cancel(request_id id);
  void cancel_all();
  /// Sends every request actor an exit.
  void exit_all();
  /// Tells every request actor the cluster's view (those whose instance is not in it go on elsewhere, or end
  /// with an error), and keeps it for requests spawned later from an older view.
  void tell_view(const cluster_view& view);
  /// Requests still in flight.
  size_t size();
  /// Drops every handle (after the actors are done).
  void clear();

 private:
  bool resume_elsewhere_;
  std::mutex mutex_;
  /// A request in flight: its actor, and the instance it was sent to with the blocks it needs there.
  struct in_flight {
    caf::actor actor;
    instance_id instance = 0;
    uint32_t blocks = 0;
  };
  std::map<request_id, in_flight> requests_;
  /// The blocks of the requests in flight, by the instance each was sent to (the caller holds mutex_).
  routed_blocks routed_locked() const;
  std::optional<cluster_view> latest_;  ///< the newest view told
};

/// A cluster as a front end sees it.
class request_router {
 public:
  /// With `resume_elsewhere`, a request whose instance left the cluster goes on on another one.
  explicit request_router(bool resume_elsewhere) : requests_(resume_elsewhere) {}
  virtual ~request_router() = default;
  request_router(const request_router&) = delete;  ///< a router owns its requests' actors: never copied
  request_router& operator=(const request_router&) = delete;
  /// Submits a request to the instance of `view` with the most free blocks; the callbacks run on an
  /// actor thread, tokens in order, then on_finished exactly once. Returns the request's id.
  virtual request_id submit(const generate_params& params, request_callbacks callbacks, const cluster_view& view) = 0;
  /// The same on the gManager's current view.
  request_id submit(const generate_params& params, request_callbacks callbacks) {
    return submit(params, std::move(callbacks), view());
  }
  /// Stops a request (its on_finished reports "cancelled").
  void cancel(request_id id) { requests_.cancel(id); }
  /// Stops every request in flight.
  void cancel_all() { requests_.cancel_all(); }
  /// The gManager's current view (no instances when it does not answer).
  virtual cluster_view view() = 0;
  /// The gManager's cluster_status (none when it does not answer): what GET /v1/cluster shows.
  virtual std::optional<cluster_status> status() = 0;
  /// How many instances the view must list for the router to be ready (all of an embedded cluster;
  /// one of a cluster of processes, whose members come and go).
  virtual int instances_needed() const = 0;
  /// Empties the instances' prefix caches (blocks requests read are freed when they end); the blocks freed now, or
  /// none where the router cannot reach the caches (a cluster of processes).
  virtual std::optional<uint64_t> reset_prefix_cache() { return std::nullopt; }

 protected:
  request_table requests_;  ///< the requests in flight, spawned by submit
};

}  // namespace illm::actors
