#pragma once
// Every message of the runtime, in one place. The paper's messages (heartbeat, move_kvcache,
// try_move_kvcache and request_placement_entry) keep its names and fields; around them are what a
// real system needs: membership, leases (commit/abort), block release, the attention data-plane
// payloads, and the messages between an instance, its rManager, its worker and its requests.
// Structs with `inspect` overloads, registered by register_messages() so that they can cross
// process boundaries; CAF 0.17 atoms hold at most 10 characters, so only timers use atoms.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/attention_wire.hpp"
#include "actors/placement/types.hpp"

namespace illm::gpu {
struct step_plan;
}

namespace illm::actors {

// ---- the paper's protocol (request_placement_entry and instance_stats: actors/placement/types.hpp) ------

/// rManager -> gManager, every period: stats and the placement of the instance's requests.
struct heartbeat {
  instance_id inst_id = 0;
  uint64_t seq = 0;
  instance_stats stats;
  std::vector<request_placement_entry> placement;
};

/// gManager -> source rManager: move num_blocks of req_id's blocks to dst_inst.
struct move_kvcache {
  move_id id = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;
  instance_id dst_inst = 0;
};

/// source rManager -> destination rManager: reserve num_blocks for req_id (answer: move_reservation,
/// granted or refused), first come first served against the blocks free at that moment.
struct try_move_kvcache {
  move_id id = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;
  instance_id src_inst = 0;
};

// ---- around the protocol -----------------------------------------------------------------------------

/// The answer to try_move_kvcache: granted (blocks reserved at the destination until the lease ends,
/// and where to put them) or refused (a result, not an error: the destination is full or draining).
struct move_reservation {
  move_id id = 0;
  instance_id dst_inst = 0;
  bool granted = false;
  std::string reason;            ///< why not, when refused
  uint32_t free_blocks = 0;      ///< free at the destination when it answered
  std::vector<uint32_t> blocks;  ///< physical blocks at the destination
  uint64_t region_address = 0;   ///< the destination pool's registered memory
  uint64_t region_bytes = 0;
  std::vector<uint8_t> region_key;
  uint64_t block_bytes = 0;
  int64_t lease_ms = 0;
};

/// source -> destination after the copy: the reserved blocks now hold req_id's KV at these logical
/// places (answer: commit_result, refused when the lease is over).
struct commit_move {
  move_id id = 0;
  request_id req_id = 0;
  instance_id src_inst = 0;
  std::vector<uint32_t> logical;  ///< one per reserved block, in the reservation's order
  bool checksummed = false;       ///< the source sends a checksum: the destination verifies it
  uint64_t checksum = 0;          ///< of the blocks as the source sent them (kv_pool::checksum), in that order
};

/// The answer to commit_move.
struct commit_result {
  move_id id = 0;
  bool committed = false;
  std::string reason;
};

/// source -> destination: give the reservation (or the committed blocks) of a move back.
struct abort_move {
  move_id id = 0;
};

/// owner -> holder: req_id ended; free every block held for it and forget its room's promise.
struct release_blocks {
  request_id req_id = 0;
  instance_id owner = 0;
};

/// rManager -> gManager and the event log: how a move ended.
struct move_report {
  move_id id = 0;
  request_id req_id = 0;
  instance_id src_inst = 0;
  instance_id dst_inst = 0;
  uint32_t blocks = 0;
  bool ok = false;
  bool self_initiated = false;  ///< a loan the rManager asked for, not a gManager order
  std::string reason;
  bool computed = false;  ///< a room's chunk, computed at the destination (nothing was copied)
};

/// One instance as the cluster view shows it.
struct instance_view {
  instance_id inst_id = 0;
  uint32_t total_blocks = 0;
  uint32_t free_blocks = 0;  ///< spare: free, not promised to its requests nor to a room
  bool draining = false;
  caf::actor rmanager;
  caf::actor instance;
  std::vector<uint8_t> plane_address;  ///< its data plane's worker address; empty: in-process (already connected)
  /// Blocks it keeps free for a long request that waits for room: it starts no new request in them.
  uint32_t held_for_room = 0;
  std::string node;  ///< the node (host) it runs on; empty: the same as every other's
  /// What other instances may move into: its spare blocks less those held for the waiting room (it refuses
  /// moves into them).
  uint32_t movable_into() const { return free_blocks - std::min(free_blocks, held_for_room); }
};

/// gManager -> rManager (answer to join and heartbeat): the cluster as of the last heartbeats.
struct cluster_view {
  uint64_t epoch = 0;
  std::vector<instance_view> instances;  ///< the members heard from lately
  /// Every member's id, those silent for a while (left out of `instances`) too: an id missing here has
  /// left the cluster or died, one only missing from `instances` may come back.
  std::vector<instance_id> members;
  /// Whether instance `id` is a member (heard from lately or not).
  bool has_member(instance_id id) const { return std::find(members.begin(), members.end(), id) != members.end(); }
  /// Instance `id` as the view has it (none: left out of this view).
  const instance_view* find(instance_id id) const {
    auto it = std::find_if(instances.begin(), instances.end(), [id](const instance_view& i) { return i.inst_id == id; });
    return it == instances.end() ? nullptr : &*it;
  }
  uint32_t free_blocks() const {
    uint32_t n = 0;
    for (const auto& i : instances) n += i.free_blocks;
    return n;
  }
};

/// rManager -> gManager: a new instance and its actors.
struct join_cluster {
  instance_id inst_id = 0;
  caf::actor rmanager;
  caf::actor instance;
  instance_stats stats;
  std::vector<uint8_t> plane_address;  ///< its data plane's worker address (UCX); empty: in-process
  std::string node;                    ///< the node (host) it runs on; empty: the same as every other's
};

/// -> gManager: stop lending to inst_id and stop routing requests to it.
struct drain_instance {
  instance_id inst_id = 0;
};

/// instance -> rManager -> gManager: keep num_blocks spare blocks on other instances for a request longer
/// than this instance can hold (a room), so that it can start; its blocks move there as it grows.
struct reserve_room {
  instance_id owner = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;
};

/// gManager -> rManager -> instance: the room, as blocks to keep per holder, or why there is none now. The
/// owner's rManager has each holder keep them (keep_blocks) before the instance hears that it may start.
struct room_answer {
  request_id req_id = 0;
  bool granted = false;
  std::string reason;
  std::vector<std::pair<instance_id, uint32_t>> holders;
};

/// owner's rManager -> a holder's rManager: promise num_blocks to (owner, req) until its blocks move in (a
/// room's moves may have them; nobody else's may) or it ends (release_blocks). The blocks stay in the pool
/// meanwhile (actors/room_promises.hpp). Answer: the blocks promised, all or none.
struct keep_blocks {
  instance_id owner = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;
};

/// rManager -> gManager: the request ended; its room (what is left of it) is free again.
struct release_room {
  instance_id owner = 0;
  request_id req_id = 0;
};

/// rManager -> gManager: inst_id leaves the cluster.
struct leave_cluster {
  instance_id inst_id = 0;
};

// ---- room prefill: a long prompt prefilled by its room's holders, where its KV stays ------------------------
//
// The owner hands its prompt out in chunks, each to a holder of its room: the owner's rManager reserves the
// chunk's blocks there (a move's reservation, taken from the room's promise), the holder's instance computes
// the chunk into them as part of its own steps, attending the blocks before it wherever they are (those of
// chunks still being computed elsewhere once their layer is written: kv_pool::mark_written), and the owner
// commits them as hosted blocks of its request. A chunk goes out only once the step computing the one
// before it has started, so every step waits only for steps that started before it.

/// owner instance -> its rManager: reserve num_blocks at `holder` for a chunk of req_id that the holder will
/// compute (answer: move_reservation, granted or refused).
struct reserve_chunk {
  move_id id = 0;
  request_id req_id = 0;
  instance_id holder = 0;
  uint32_t num_blocks = 0;
};

/// owner instance -> holder instance: compute the KV of positions [pos0, pos0 + tokens.size()) of req_id into
/// the blocks that move `id` reserved there, the blocks before them being where the table places them
/// (answer: chunk_done once that KV is written, or why not).
struct prefill_chunk {
  move_id id = 0;
  instance_id owner = 0;
  request_id req_id = 0;
  int32_t pos0 = 0;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> table_pools;   ///< per logical block of [0, pos0 + tokens.size()): its instance
  std::vector<uint32_t> table_blocks;  ///< ... and its physical block there
};

/// holder instance -> owner instance: the step computing chunk `id` has started; the next chunk may go.
struct chunk_started {
  move_id id = 0;
};

/// The answer to prefill_chunk.
struct chunk_done {
  move_id id = 0;
  bool ok = false;
  std::string error;
};

/// owner instance -> its rManager: chunk `id` of req_id is written: commit its blocks at their holder as these
/// logical blocks of the request (answer: bool, whether the holder committed them).
struct commit_chunk {
  move_id id = 0;
  request_id req_id = 0;
  std::vector<uint32_t> logical;
};

/// owner instance -> its rManager: give chunk `id`'s reservation back (its request starts over or ended).
struct abort_chunk {
  move_id id = 0;
};

/// holder instance -> its rManager: chunk `id` of (owner, req_id) is being computed here: its reservation does
/// not expire nor go back until return_reservation (answer: its blocks; none when there is no such reservation).
struct take_reservation {
  move_id id = 0;
  instance_id owner = 0;
  request_id req_id = 0;
};

/// holder instance -> its rManager: chunk `id` ended here (written, failed or cancelled): its reservation waits
/// for the owner's commit for a lease again, or goes back now if it was aborted meanwhile.
struct return_reservation {
  move_id id = 0;
};

/// holder rManager -> its instance: stop computing chunk `id` (its request ended, or the owner gave it up).
struct cancel_chunk {
  move_id id = 0;
};

// ---- attention data-plane payloads ---------------------------------------------------------------------

// attend and partials: actors/attention_wire.hpp (they travel through the transport, encoded there).

// ---- an instance and its rManager -------------------------------------------------------------------

/// instance -> rManager: a request needs num_blocks more than the local pool has (a loan).
struct need_blocks {
  request_id req_id = 0;
  uint32_t num_blocks = 0;
};

/// rManager -> instance: the loan is done (blocks were freed here) or cannot be had.
struct loan_result {
  bool ok = false;
  std::string reason;
};

/// rManager -> instance: choose up to max_blocks full local blocks of req_id to move (answer: block_pick).
/// A request id of 0 lets the instance choose the request (its longest).
struct pick_blocks {
  move_id id = 0;
  request_id req_id = 0;
  uint32_t max_blocks = 0;
  bool only_this = false;  ///< blocks of req_id or none (else, when it has none, the request with the most)
};

/// instance -> rManager: the blocks chosen (oldest first), now marked as moving.
struct block_pick {
  move_id id = 0;
  request_id req_id = 0;
  std::vector<uint32_t> logical;
  std::vector<uint32_t> physical;
};

/// rManager -> instance: the copy is confirmed; switch these logical blocks to dst and free the local ones.
struct blocks_moved {
  move_id id = 0;
  request_id req_id = 0;
  instance_id dst_inst = 0;
  std::vector<uint32_t> logical;
  std::vector<uint32_t> dst_blocks;
};

/// rManager -> instance: the move failed; the request keeps reading these local blocks.
struct move_abandoned {
  move_id id = 0;
  request_id req_id = 0;
  std::vector<uint32_t> logical;
};

/// instance -> rManager: req_id ended; its blocks elsewhere can be released.
struct request_released {
  request_id req_id = 0;
};

/// instance -> rManager, after every change: placement and load for the heartbeat.
struct placement_update {
  std::vector<request_placement_entry> placement;
  uint32_t batch_size = 0;
  uint32_t waiting = 0;
  uint32_t waiting_blocks = 0;
  uint32_t promised_blocks = 0;  ///< blocks the running requests will still take (free, but spoken for)
};

/// The data plane's completion of a move's copy, turned into a message for the rManager.
struct transfer_done {
  move_id id = 0;
  bool ok = false;
  std::string error;
};

/// The data plane -> rManager: the endpoint to a peer failed (the peer is treated as a failed destination).
struct peer_failed {
  instance_id peer = 0;
  std::string reason;
};

/// An attend payload that arrived on the data plane, for the attention server.
struct incoming_attend {
  instance_id from = 0;
  std::vector<uint8_t> payload;
};

/// A partials payload answering an attend that the attention server relayed, for it.
struct incoming_partials {
  instance_id from = 0;
  std::vector<uint8_t> payload;
};

// ---- requests --------------------------------------------------------------------------------------------

/// A generation request, as a request actor hands it to an instance.
struct generate_request {
  request_id id = 0;
  std::vector<int32_t> prompt;  ///< BOS first
  int32_t max_tokens = 0;
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  caf::actor client;  ///< the request actor that receives the tokens
};

/// instance -> request actor: the next generated token.
struct token_event {
  request_id req_id = 0;
  int32_t token = 0;
};

/// instance -> request actor: the request ended.
struct request_finished {
  request_id req_id = 0;
  std::string reason;  ///< length, stop, cancelled, error
  std::string error;
  int32_t preemptions = 0;
  std::vector<request_placement_entry> placement;  ///< where its blocks were at its last step
  int32_t generated = 0;       ///< tokens generated
  int64_t first_token_ns = 0;  ///< the instance's clock (virtual in the simulator) at the first token; 0: none
  int64_t finished_ns = 0;     ///< ... and at the end
};

/// -> request actor or instance: stop generating req_id.
struct cancel_request {
  request_id req_id = 0;
};

// ---- an instance and its worker (same process only) ------------------------------------------------------

/// instance -> worker: run this step (plan and sequences stay owned by the instance meanwhile).
struct run_step {
  std::shared_ptr<gpu::step_plan> plan;
};

/// worker -> instance: the step ran (error empty) or failed.
struct step_done {
  std::shared_ptr<gpu::step_plan> plan;
  std::string error;
  /// With an error: the sequences it is due to, when the router could tell (their remote attention
  /// failed); the others of the plan run the step again. Empty: the error is every sequence's.
  std::vector<uint64_t> failed;
};

// ---- timers ---------------------------------------------------------------------------------------------

using heartbeat_tick_atom = caf::atom_constant<caf::atom("hb_tick")>;
using policy_tick_atom = caf::atom_constant<caf::atom("pol_tick")>;
using lease_check_atom = caf::atom_constant<caf::atom("lease_chk")>;
using liveness_tick_atom = caf::atom_constant<caf::atom("live_tick")>;
/// (attach_atom, actor): tells an rManager which instance it manages.
using attach_atom = caf::atom_constant<caf::atom("attach")>;
/// (view_atom): asks the gManager for its cluster_view.
using view_atom = caf::atom_constant<caf::atom("view")>;
/// (moves_atom, request_id) -> gManager: the reports of that request's moves it has (the latest ones).
using moves_atom = caf::atom_constant<caf::atom("moves")>;

/// Registers every message type with a configuration (call before creating the actor system).
void register_messages(caf::actor_system_config& cfg);

/// Sets the scheduler of a serving process to go to sleep soon when it has nothing to do: CAF's workers
/// otherwise poll for about 25 ms after every message (every heartbeat and policy tick), which keeps an
/// idle process at a quarter of a core. A sleeping worker is woken when a job arrives for it.
void quiet_idle_scheduler(caf::actor_system_config& cfg);

// ---- inspect overloads ------------------------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_placement_entry& x) {
  return f(caf::meta::type_name("request_placement_entry"), x.req_id, x.inst_id, x.num_blocks, x.local);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, instance_stats& x) {
  return f(caf::meta::type_name("instance_stats"), x.total_blocks, x.free_blocks, x.hosted_blocks,
           x.borrowed_blocks, x.batch_size, x.waiting, x.waiting_blocks, x.draining);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, heartbeat& x) {
  return f(caf::meta::type_name("heartbeat"), x.inst_id, x.seq, x.stats, x.placement);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, move_kvcache& x) {
  return f(caf::meta::type_name("move_kvcache"), x.id, x.req_id, x.num_blocks, x.dst_inst);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, try_move_kvcache& x) {
  return f(caf::meta::type_name("try_move_kvcache"), x.id, x.req_id, x.num_blocks, x.src_inst);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, move_reservation& x) {
  return f(caf::meta::type_name("move_reservation"), x.id, x.dst_inst, x.granted, x.reason, x.free_blocks, x.blocks,
           x.region_address, x.region_bytes, x.region_key, x.block_bytes, x.lease_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, commit_move& x) {
  return f(caf::meta::type_name("commit_move"), x.id, x.req_id, x.src_inst, x.logical, x.checksummed, x.checksum);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, commit_result& x) {
  return f(caf::meta::type_name("commit_result"), x.id, x.committed, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, abort_move& x) {
  return f(caf::meta::type_name("abort_move"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_blocks& x) {
  return f(caf::meta::type_name("release_blocks"), x.req_id, x.owner);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, move_report& x) {
  return f(caf::meta::type_name("move_report"), x.id, x.req_id, x.src_inst, x.dst_inst, x.blocks, x.ok,
           x.self_initiated, x.reason, x.computed);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reserve_chunk& x) {
  return f(caf::meta::type_name("reserve_chunk"), x.id, x.req_id, x.holder, x.num_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prefill_chunk& x) {
  return f(caf::meta::type_name("prefill_chunk"), x.id, x.owner, x.req_id, x.pos0, x.tokens, x.table_pools,
           x.table_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chunk_started& x) {
  return f(caf::meta::type_name("chunk_started"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chunk_done& x) {
  return f(caf::meta::type_name("chunk_done"), x.id, x.ok, x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, commit_chunk& x) {
  return f(caf::meta::type_name("commit_chunk"), x.id, x.req_id, x.logical);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, abort_chunk& x) {
  return f(caf::meta::type_name("abort_chunk"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, take_reservation& x) {
  return f(caf::meta::type_name("take_reservation"), x.id, x.owner, x.req_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, return_reservation& x) {
  return f(caf::meta::type_name("return_reservation"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cancel_chunk& x) {
  return f(caf::meta::type_name("cancel_chunk"), x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, instance_view& x) {
  return f(caf::meta::type_name("instance_view"), x.inst_id, x.total_blocks, x.free_blocks, x.draining, x.rmanager,
           x.instance, x.plane_address, x.held_for_room, x.node);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_view& x) {
  return f(caf::meta::type_name("cluster_view"), x.epoch, x.instances, x.members);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_cluster& x) {
  return f(caf::meta::type_name("join_cluster"), x.inst_id, x.rmanager, x.instance, x.stats, x.plane_address,
           x.node);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, drain_instance& x) {
  return f(caf::meta::type_name("drain_instance"), x.inst_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, leave_cluster& x) {
  return f(caf::meta::type_name("leave_cluster"), x.inst_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attend& x) {
  return f(caf::meta::type_name("attend"), x.tag, x.req_id, x.owner, x.layer, x.n_q, x.num_blocks, x.q, x.q_pos);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, partials& x) {
  return f(caf::meta::type_name("partials"), x.tag, x.ok, x.error, x.m, x.e, x.ma);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_done& x) {
  return f(caf::meta::type_name("transfer_done"), x.id, x.ok, x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_failed& x) {
  return f(caf::meta::type_name("peer_failed"), x.peer, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, incoming_attend& x) {
  return f(caf::meta::type_name("incoming_attend"), x.from, x.payload);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, incoming_partials& x) {
  return f(caf::meta::type_name("incoming_partials"), x.from, x.payload);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reserve_room& x) {
  return f(caf::meta::type_name("reserve_room"), x.owner, x.req_id, x.num_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_answer& x) {
  return f(caf::meta::type_name("room_answer"), x.req_id, x.granted, x.reason, x.holders);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, keep_blocks& x) {
  return f(caf::meta::type_name("keep_blocks"), x.owner, x.req_id, x.num_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_room& x) {
  return f(caf::meta::type_name("release_room"), x.owner, x.req_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, need_blocks& x) {
  return f(caf::meta::type_name("need_blocks"), x.req_id, x.num_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, loan_result& x) {
  return f(caf::meta::type_name("loan_result"), x.ok, x.reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pick_blocks& x) {
  return f(caf::meta::type_name("pick_blocks"), x.id, x.req_id, x.max_blocks, x.only_this);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block_pick& x) {
  return f(caf::meta::type_name("block_pick"), x.id, x.req_id, x.logical, x.physical);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, blocks_moved& x) {
  return f(caf::meta::type_name("blocks_moved"), x.id, x.req_id, x.dst_inst, x.logical, x.dst_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, move_abandoned& x) {
  return f(caf::meta::type_name("move_abandoned"), x.id, x.req_id, x.logical);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_released& x) {
  return f(caf::meta::type_name("request_released"), x.req_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, placement_update& x) {
  return f(caf::meta::type_name("placement_update"), x.placement, x.batch_size, x.waiting, x.waiting_blocks,
           x.promised_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generate_request& x) {
  return f(caf::meta::type_name("generate_request"), x.id, x.prompt, x.max_tokens, x.temperature, x.top_p, x.seed,
           x.ignore_eos, x.client);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_event& x) {
  return f(caf::meta::type_name("token_event"), x.req_id, x.token);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_finished& x) {
  return f(caf::meta::type_name("request_finished"), x.req_id, x.reason, x.error, x.preemptions, x.placement,
           x.generated, x.first_token_ns, x.finished_ns);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cancel_request& x) {
  return f(caf::meta::type_name("cancel_request"), x.req_id);
}

}  // namespace illm::actors

// The worker's messages carry a shared step plan: they never leave the process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(illm::actors::run_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(illm::actors::step_done)
