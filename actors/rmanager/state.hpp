#pragma once
// The rManager actor's state, and the functions its protocol files share. The behaviour is composed in
// rmanager.cpp from one file per protocol:
//   view.cpp                the cluster view: join, heartbeats, data-plane peers connected, departed owners
//   move_source.cpp         moves out of this pool: the gManager's orders and this instance's loans
//   move_destination.cpp    moves into this pool: reservations granted as leases, commits, releases
//   rooms.cpp               a long request's room: asked of the gManager, kept by its holders, released
//   chunk_reservations.cpp  room prefill at the owner: a chunk's blocks reserved at its holder, committed
//   replicas.cpp            second copies of long requests' blocks: asked for, copied from here, kept here
//   takeover.cpp            a dead owner's requests: kept here for a lease, taken over by a new owner
//   shared_prefix.cpp       the cluster-wide prefix cache: prefixes found for its requests, read here for peers'
//   prefix_copy.cpp         ... a remote run copied here when the performance model finds it cheaper than reading it
// Internal to actors/rmanager/: nothing outside it includes this header.

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/rmanager/rmanager.hpp"

namespace illm::actors::rmanager_impl {

/// A data-plane peer whose endpoint failed. At a new address (a restarted process) it is connected again at
/// once; at the same one (a timeout: the peer was slow, or cut off) after a pause that doubles with every
/// failure, up to 30 s, while views (or the last one, without a gManager) name it.
struct failed_peer {
  std::vector<uint8_t> address;
  std::chrono::steady_clock::time_point retry_at;
  std::chrono::milliseconds pause{0};
};

/// A move this instance executes as the source.
struct outgoing_move {
  request_id req = 0;
  instance_id dst = 0;
  rmanager_actor dst_rmanager;
  uint32_t asked = 0;
  bool self_initiated = false;
  bool cancelled = false;  // the request ended meanwhile: give everything back
  block_pick picked;
  move_reservation reservation;
  uint32_t copies_left = 0;
  uint32_t staged = 0;  // of the picked blocks, how many were read into staging buffers and put (device pools)
  bool checksummed = false;
  uint64_t checksum = 0;  // of the picked blocks as they were put
  bool in_place = false;  // copied device to device into the reserved blocks (a pool of this process on this GPU)
  bool replica = false;   // a second copy: the request's table does not change, its owner hears the result
  instance_id owner = 0;  // ... the request's owner (this instance, or the one whose blocks are hosted here)
  caf::typed_response_promise<replica_result> replica_answer;  // ... answers the owner's replicate_blocks
  std::vector<uint32_t> cache_readers;  // a copy of cached blocks (copy_prefix): the readers it holds here until it ends
  const char* path = "";  // how its bytes travel, once the copy starts: "device", "staged" or "host" (copy_blocks)
  std::chrono::steady_clock::time_point copy_started;  // the reservation granted, the copy begun
};

/// A reservation this instance granted as the destination.
struct incoming_move {
  enum class state { reserved, committed, given_back, expired };
  request_id req = 0;
  instance_id src = 0;
  std::vector<uint32_t> blocks;
  std::vector<uint32_t> landing;  // slots of the landing arena its bytes arrive in (a device pool's), until the commit
  state stage = state::reserved;
  uint32_t promised = 0;  // of them, blocks that were promised to the request's room
  caf::actor_clock::time_point lease_end;  // a reservation not committed by then expires
  bool computing = false;      // a room's chunk is being computed into it here: it neither expires nor goes back
  bool abort_pending = false;  // ... and goes back once the chunk has stopped
  bool replica = false;        // a second copy: kept as spare blocks of the pool once committed
  std::vector<gpu::spare_block> spare;  // ... their names (in the order of blocks)
  std::vector<uint32_t> logical;        // ... their logical places
};

/// A chunk of one of this instance's requests that a holder computes (room prefill), until it is committed.
struct outgoing_chunk {
  request_id req = 0;
  instance_id dst = 0;
  rmanager_actor dst_rmanager;
  uint32_t blocks = 0;
};

/// A request handed over here to a new owner (owner takeover): the generation, the new owner and the answer.
struct adoption {
  uint32_t generation = 0;
  instance_id owner = 0;
  orphan_adopted answer;
};

/// A copy of a cached run into this pool for one of its instance's requests (copy_prefix), until it commits: what
/// this pool's cache takes the blocks as.
struct prefix_copy {
  instance_id holder = 0;
  gpu::block_key parent;  ///< the key of the block before the run
  std::vector<gpu::block_key> keys;
  std::vector<int32_t> tokens;
  caf::actor_clock::time_point asked;  ///< when it was asked for (its rate is measured at the commit)
};

/// Everything an rManager keeps.
struct rmanager_state {
  rmanager_config config;
  instance_actor instance;
  cluster_view view;
  /// Every member of the views since the last settled one: a member that a settled view leaves out departed
  /// (the views of a gManager that just started may not list every member yet).
  std::set<instance_id> known_members;
  /// The rManager of every member seen in a view, until a settled view leaves the member out: a release
  /// reaches a holder that the current view does not list (a gManager that just started, a late heartbeat).
  std::map<instance_id, rmanager_actor> member_rmanagers;
  uint64_t heartbeat_seq = 0;
  uint64_t ticks = 0;  // heartbeat periods since the start (with or without a gManager)
  placement_update placement;
  std::map<move_id, outgoing_move> outgoing;
  std::deque<move_id> waiting_for_staging;  // moves whose next chunk waits for a free staging buffer
  std::map<move_id, incoming_move> incoming;
  std::map<move_id, outgoing_chunk> chunks;  // reserved for this instance's requests' chunks, not yet committed
  std::map<request_id, std::map<instance_id, uint32_t>> lent;  // this instance's requests' blocks elsewhere
  std::map<request_id, std::map<instance_id, uint32_t>> rooms;  // blocks others keep for our long requests
  std::set<std::pair<request_id, instance_id>> room_refused;  // our rooms' holders that refused a move, until the next view
  std::map<instance_id, std::vector<uint8_t>> connected;  // data-plane peers connected, by their address
  std::map<instance_id, failed_peer> failed;              // peers whose endpoint failed, and when to retry
  std::map<request_id, std::set<instance_id>> replica_holders;  // where this instance's requests have copies
  bool replica_in_flight = false;                               // a copy of this instance's blocks is under way
  uint32_t replica_pause = 0;                                   // heartbeats to wait before the next copy
  std::map<std::pair<uint32_t, uint64_t>, move_id> replica_index;  // spare (block, generation) kept here -> its move
  std::map<uint64_t, std::function<void()>> deferred;  // put off by injected delays, by their timer's id
  uint64_t next_deferred = 1;
  std::vector<caf::response_promise> swallowed;  // answers lost by injected faults: never delivered
  std::set<move_id> orders_seen;                 // the gManager's latest orders, so that one sent twice runs once
  std::deque<move_id> orders_seen_in_turn;       // the same, oldest first (the set keeps the last 4096)
  std::set<std::pair<instance_id, request_id>> orphans;  // departed owners' requests kept here until a takeover or their lease ends
  std::map<request_id, adoption> adoptions;               // requests handed to a new owner here, by their latest generation
  bool loan_in_flight = false;
  bool draining = false;
  bool cache_resync = false;    ///< the gManager's index lost track of this cache: the next heartbeat lists every key
  uint64_t cache_reported = 0;  ///< the heartbeat whose cache changes went last
  uint64_t next_move = 1;
  std::map<move_id, prefix_copy> prefix_copies;  // copies of cached runs coming here, by their move
  std::map<instance_id, double> round_trip_s;    // measured to peers by prefix reads, smoothed
  double copy_bytes_per_s = 0;                   // measured by copies into this pool, smoothed (0: none yet)
  static inline const char* name = "rmanager";

  /// Free blocks not spoken for by this instance's running requests (some may be promised to rooms).
  uint32_t unpromised_blocks() const {
    const uint32_t running = std::max(placement.promised_blocks, config.promises->running());
    return config.pool->free_blocks() - std::min(config.pool->free_blocks(), running);
  }
  /// Free blocks not spoken for by this instance's running requests nor promised to rooms nor needed by the
  /// request first in its queue: what others may have. While this instance holds blocks back for a long
  /// request waiting for its room, that room comes before its queue.
  uint32_t spare_blocks() const {
    const instance_view* me = view.find(config.id);
    const uint32_t queued = me && me->held_for_room > 0 ? 0 : config.promises->queued();
    return unroomed_blocks() - std::min(unroomed_blocks(), queued);
  }
  /// Free blocks not spoken for by this instance's running requests nor promised to rooms nor kept for the
  /// queued request whose room is granted: what a room the gManager granted may have (its grant came while
  /// this instance held blocks back for it). Moves into rooms promised before may take kept blocks.
  uint32_t unroomed_blocks() const {
    const uint64_t spoken = uint64_t(config.promises->rooms_total()) + config.promises->kept();
    return unpromised_blocks() - uint32_t(std::min<uint64_t>(unpromised_blocks(), spoken));
  }
  /// The room promises are covered again once the unpromised blocks hold them all.
  void check_promises() {
    if (config.promises->overdrawn() && unpromised_blocks() >= config.promises->rooms_total())
      config.promises->set_overdrawn(false);
  }

  instance_stats stats() const {
    instance_stats s;
    s.total_blocks = config.pool->total_blocks();
    s.free_blocks = spare_blocks();
    s.hosted_blocks = config.hosted->count();
    for (const auto& [req, holders] : lent)
      for (const auto& [inst, n] : holders) s.borrowed_blocks += n;
    s.batch_size = placement.batch_size;
    s.waiting = placement.waiting;
    s.waiting_blocks = placement.waiting_blocks;
    s.draining = draining;
    s.replica_blocks = config.pool->spare_blocks(gpu::spare_user::replicas);
    const uint32_t in_use = s.total_blocks - std::min(s.total_blocks, config.pool->free_blocks());
    s.owned_blocks = in_use - std::min(in_use, s.hosted_blocks);
    s.promised_blocks = config.pool->free_blocks() - std::min(config.pool->free_blocks(), s.free_blocks);
    if (config.prefix_cache) {
      const gpu::prefix_cache_stats cache = config.prefix_cache->stats();
      s.cached_blocks = cache.cached_blocks;
      s.shared_blocks = cache.shared_blocks;
      s.cache_root = config.prefix_root;
      s.cache_shared = config.shared_prefixes;
    }
    return s;
  }
};

using self_ptr = rmanager_actor::stateful_pointer<rmanager_state>;

// ---- limits.cpp -----------------------------------------------------------------------------------------------

/// Why a peer's message goes beyond the limits of the protocol (empty: within them).
std::string over_limit(const rmanager_state& st, const try_move_kvcache& m);
std::string over_limit(const rmanager_state& st, const commit_move& m);
std::string over_limit(const rmanager_state& st, const keep_blocks& m);
std::string over_limit(const rmanager_state& st, const replicate_blocks& m);
std::string over_limit(const rmanager_state& st, const replicas_lost& m);
std::string over_limit(const rmanager_state& st, const promote_replicas& m);
std::string over_limit(const rmanager_state& st, const adopt_orphan& m);
std::string over_limit(const rmanager_state& st, const read_prefix& m);
std::string over_limit(const rmanager_state& st, const copy_prefix& m);

/// True when `why` is empty. Otherwise the current message broke a limit: it is logged and counted
/// (illm:peer_limit_violations_total), and its sender, when it is a member, is reported to the gManager, which
/// expels it; the caller refuses the message.
bool within_limits(self_ptr self, const std::string& why);

// ---- rmanager.cpp ---------------------------------------------------------------------------------------------

/// Writes a line of the rManager's data-plane log.
void plane_log(const rmanager_state& st, const std::string& line);
/// Whether the data plane reaches `peer` (always, for an in-process plane).
bool reachable(const rmanager_state& st, instance_id peer);

/// The rManager of the member `id` (this one for itself), if known.
std::optional<rmanager_actor> rmanager_of(self_ptr self, instance_id id);

/// Runs `action` on the rManager's thread `delay` from now.
void defer(self_ptr self, std::chrono::milliseconds delay, std::function<void()> action);

/// Whether this rManager dies at crash point `point` now (rmanager_config::faults): its process's crash hook
/// runs and the rManager exits as a killed actor would; the caller then does nothing more.
bool crashes_at(self_ptr self, faults::crash_point point);

/// An answer at control-plane fault point `point`, made by `make`: as it is, lost (made, never delivered:
/// the asker times out), made twice as for a request that arrived twice (the first goes back), or delivered
/// late (rmanager_config::faults; without it, as it is).
template <class T, class Make>
caf::result<T> answer(self_ptr self, faults::control_point point, Make make) {
  const auto& faults = self->state.config.faults;
  const faults::fate f = faults ? faults->draw(point) : faults::fate::pass;
  if (f == faults::fate::pass) return make();
  T first = make();
  if (f == faults::fate::duplicate) {
    (void)make();
    return first;
  }
  auto promise = self->template make_response_promise<T>();
  if (f == faults::fate::drop)
    self->state.swallowed.push_back(promise);
  else
    defer(self, faults->delay(), [promise, first]() mutable { promise.deliver(std::move(first)); });
  return promise;
}

// ---- view.cpp -------------------------------------------------------------------------------------------------

/// A newer view: keep it, release what departed owners kept here, and connect to its new peers.
void adopt_view(self_ptr self, cluster_view v);
/// Sends a heartbeat (and schedules the next); the answer is the gManager's view.
void send_heartbeat(self_ptr self);
/// Joins the gManager, with the instance actor once it is attached.
void join(self_ptr self);
/// Joins `gm` from now on (a gManager that started, or that was reached again), and reports to it.
void switch_gmanager(self_ptr self, gmanager_actor gm);
/// The data plane's endpoint to a peer failed: moves and chunks to it fail.
void on_peer_failed(self_ptr self, const peer_failed& p);

// ---- move_source.cpp ------------------------------------------------------------------------------------------

/// `blocks` of request `req` are committed at `holder`: they count as lent, and as taken from its room there.
void note_placed(rmanager_state& st, request_id req, instance_id holder, uint32_t blocks);
/// Ends a move: reports it, undoes what it held, and answers a pending loan (a replica copy: finish_replica).
void finish_move(self_ptr self, move_id id, bool ok, std::string reason);
/// A move (or a replica copy) has its blocks: reserve room at the destination, then copy.
void reserve(self_ptr self, move_id id, block_pick pick);
/// A put or the flush of a move completed.
void on_transfer(self_ptr self, const transfer_done& done);
/// The instance is short of blocks: lend some of them to a room's holder or the sparest instance.
void start_loan(self_ptr self, const need_blocks& need);
/// The gManager's order to move blocks of a request out.
void order_move(self_ptr self, const move_kvcache& m);

// ---- move_destination.cpp -------------------------------------------------------------------------------------

/// Reserves blocks for a move into this pool, or says why not.
move_reservation grant(self_ptr self, const try_move_kvcache& ask);
/// The source's commit: the reserved blocks hold the request's KV now.
commit_result accept_commit(self_ptr self, const commit_move& c);
/// The source gives a reservation (or committed blocks) back.
void on_abort_move(self_ptr self, const abort_move& a);
/// A reservation's lease may be over.
void on_lease_check(self_ptr self, move_id id);
/// The instance computes a chunk into reservation `t.id`: its blocks, if it is that request's and still reserved.
std::vector<uint32_t> take_for_chunk(self_ptr self, const take_reservation& t);
/// The instance stopped computing the chunk of reservation `id`.
void chunk_returned(self_ptr self, move_id id);
/// Frees every block held for req and forgets its room's promise (the owner's request ended).
void release_hosted(self_ptr self, const release_blocks& r);
/// A request lets go of block `b` of this pool: the prefix cache's loses a reader, any other is freed.
void free_block(rmanager_state& st, uint32_t b);
/// How long a move into this pool that was given back or expired is remembered after its lease (a duplicate of
/// its reservation or commit gets the same answer meanwhile).
inline constexpr std::chrono::seconds finished_move_memory{60};
/// Forgets the moves into this pool that ended more than finished_move_memory after their lease.
void forget_finished_moves(self_ptr self);

// ---- rooms.cpp ------------------------------------------------------------------------------------------------

/// Asks the gManager for room elsewhere for a long request; the instance hears the answer.
void ask_room(self_ptr self, const reserve_room& r);
/// A holder's side of a room: promise the blocks, all or none.
uint32_t keep(self_ptr self, const keep_blocks& k);
/// This instance's request ended: free its blocks elsewhere (their holders' caches keep the `kept` ones), its room,
/// and stop its moves.
void release_everywhere(self_ptr self, request_id req, const std::vector<gpu::keyed_block>& kept = {});

// ---- replicas.cpp ---------------------------------------------------------------------------------------------

/// Blocks one replica copy takes at most.
inline constexpr uint32_t replica_batch_blocks = 32;
/// Asks the instance for blocks of a long request that lack a copy, and has them copied (one copy at a time).
void maybe_replicate(self_ptr self);
/// A holder's side: copies blocks of a request (its owner's own, or hosted here) to another instance as a replica.
caf::result<replica_result> copy_replica(self_ptr self, const replicate_blocks& r);
/// Ends a replica copy made from here: answers its owner, gives the reservation back when it failed.
void finish_replica(self_ptr self, move_id id, bool ok, std::string reason);
/// Blocks free for a replica here: free blocks nobody else has spoken for, and not spare already.
uint32_t replica_room(const rmanager_state& st);
/// A replica's commit here: its blocks become spare blocks of the pool (given up first when memory is needed).
void keep_replica(self_ptr self, move_id id, incoming_move& move, const std::vector<uint32_t>& logical);
/// Gives a kept replica's spare blocks back to the pool.
void drop_replica(self_ptr self, incoming_move& move);
/// The pool took spare blocks: the replicas in them are gone, and their owners hear it.
void on_spare_reclaimed(self_ptr self, const spare_reclaimed& r);
/// Copies of this instance's request were lost where they were kept: its instance hears it.
void on_replicas_lost(self_ptr self, const replicas_lost& r);
/// Promotes the copies kept here and has their holders promote the others: all of them, or none.
caf::result<replicas_promoted> promote(self_ptr self, const promote_replicas& p);
/// Promotes the copies of `p` kept here, all or none: their spare blocks become used blocks of the request
/// (hosted for its owner, or its owner's own), no longer copies.
replicas_promoted promote_here(self_ptr self, const promote_replicas& p);
/// The logical blocks of (owner, req) kept here as copies.
std::vector<uint32_t> copies_kept(const rmanager_state& st, instance_id owner, request_id req);

// ---- takeover.cpp ---------------------------------------------------------------------------------------------

/// Owner `owner` departed: what is kept here for its `requests` waits a lease for a new owner (freed at once
/// without a lease).
void keep_orphans(self_ptr self, instance_id owner, const std::set<request_id>& requests);
/// What this instance keeps for a request of an owner: primaries and copies, by logical block.
orphan_report report(self_ptr self, const report_orphan& r);
/// Hands a request's blocks kept here to its new owner, once per takeover generation; all of them or none.
orphan_adopted adopt(self_ptr self, const adopt_orphan& a);
/// At the new owner: takes the surviving prefix of a request's blocks over from every member that keeps them.
caf::result<taken_over> take_over_request(self_ptr self, const take_over& t);

// ---- chunk_reservations.cpp -----------------------------------------------------------------------------------

/// Reserves a chunk's blocks at its holder, out of the request's room there.
caf::result<move_reservation> reserve_for_chunk(self_ptr self, const reserve_chunk& c);
/// Commits a written chunk at its holder: its blocks become hosted blocks of the request there.
caf::result<bool> commit_written_chunk(self_ptr self, const commit_chunk& c);
/// Gives a chunk's reservation back at its holder.
void abort_outgoing_chunk(self_ptr self, move_id id);

// ---- shared_prefix.cpp ----------------------------------------------------------------------------------------

/// Its instance's request asks for the longest prefix of its prompt the members' caches hold between them: found
/// through the gManager's index and attached where it lies (none: they hold no more than this pool).
caf::result<taken_over> find_shared_prefix(self_ptr self, const find_prefix& f);
/// A peer's request reads the longest cached prefix of a chain here: attached and hosted for it.
prefix_read read_for_peer(self_ptr self, const read_prefix& r);

// ---- prefix_copy.cpp ------------------------------------------------------------------------------------------

/// Whether the run of `blocks` cached blocks at `holder` is copied here rather than read where it lies, for a request
/// that generates up to `decode_tokens` (`reads_elsewhere`: it reads blocks in place at some holder already, whose
/// round trips its steps pay anyway).
bool copy_run_here(const rmanager_state& st, instance_id holder, uint32_t blocks, uint32_t decode_tokens,
                   bool reads_elsewhere);
/// Asks `holder` to copy a run of cached blocks into this pool's cache (copy_prefix, its id a move of this pool's); `done` hears
/// whether the copy committed here.
void ask_copy(self_ptr self, instance_id holder_id, rmanager_actor holder, copy_prefix ask,
              std::function<void(bool)> done);
/// A holder's side: copies the cached run of a peer's copy_prefix to it, from this cache (the answer once the reader
/// committed it).
caf::result<replica_result> copy_cached_run(self_ptr self, const copy_prefix& c);
/// A commit of move `id` here: when it is a copy of a cached run, this pool's cache takes its blocks (true).
bool cache_copied_run(self_ptr self, move_id id, incoming_move& move);
/// A round trip to `peer` measured by a prefix read: the smoothed estimate the copy decisions use.
void note_round_trip(rmanager_state& st, instance_id peer, double seconds);

}  // namespace illm::actors::rmanager_impl
