#pragma once
// The instance actor's state, and the functions its protocol files share. The behaviour is composed in
// instance.cpp from one file per protocol:
//   admission.cpp           requests in: queue, judge (actors/admission), backfill, start, start over, rooms
//   step_loop.cpp           plan a step, run it on the worker, stream its tokens, retire finished sequences
//   room_prefill_owner.cpp  a long prompt's chunks handed to its room's holders and committed there
//   hosted_chunks.cpp       other instances' chunks computed here into blocks reserved for them
//   block_moves.cpp         blocks picked for a move, switched to their new place when it is done
//   replicas.cpp            blocks picked for a second copy, where the copies are, copies lost
//   takeover.cpp            a dead owner's request taken over: its surviving blocks become its table's prefix
//   shared_prefix.cpp       a new request's prefix read where another member's cache holds it
// Internal to actors/instance/: nothing outside it includes this header.

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/instance/instance.hpp"
#include "actors/admission/admission_policy.hpp"
#include "gpu/batcher.hpp"

namespace illm::actors::instance_impl {

/// New tokens always go to local blocks; blocks elsewhere are released by the rManager per request. With a
/// prefix cache, a sequence starts on the cached blocks of its prefix and offers the full blocks it computes.
class local_blocks final : public gpu::block_source {
 public:
  /// `may_take`: whether a sequence may take one more block now (none: whenever one is free).
  local_blocks(std::shared_ptr<gpu::kv_pool> pool, instance_id id, std::shared_ptr<gpu::prefix_cache> cache,
               gpu::block_key root, std::function<bool(const gpu::sequence&)> may_take = nullptr);
  gpu::result<gpu::block_ref> allocate(const gpu::sequence& seq, uint32_t) override;
  gpu::status release(const gpu::block_ref& ref) override;
  int attach_prefix(gpu::sequence& seq) override;
  void blocks_computed(gpu::sequence& seq) override;
  void finishing(gpu::sequence& seq) override;

 private:
  std::shared_ptr<gpu::kv_pool> pool_;
  instance_id id_;
  std::shared_ptr<gpu::prefix_cache> cache_;  // none: no prefix caching
  gpu::block_key root_;
  std::function<bool(const gpu::sequence&)> may_take_;
};

/// A request while it runs here.
struct running_request {
  caf::actor client;
  std::shared_ptr<gpu::sequence> seq;
  size_t tokens_sent = 0;  ///< generated tokens already streamed
  std::vector<request_placement_entry> placement;
  int64_t first_token_ns = 0;
  uint32_t kv_losses = 0;  ///< times it started over because a holder of its KV failed
  std::map<uint32_t, instance_id> replicas;  ///< logical block -> the instance keeping its second copy
  int64_t lost_at_ns = 0;     ///< when a step lost some of its KV, until its next token (0: none lost)
  size_t tokens_at_loss = 0;  ///< its tokens then
};

/// Blocks picked for a move, until it ends.
struct picked_blocks {
  request_id req = 0;
  std::vector<uint32_t> logical, physical;
};

/// A chunk of another instance's request computed here, until its step has ended.
struct hosted_chunk {
  std::shared_ptr<gpu::sequence> seq;
  caf::typed_response_promise<chunk_done> done;  ///< answers the prefill_chunk
  instance_actor owner;                          ///< the owner's instance, which hears chunk_started
  bool started = false;
  uint32_t blocks = 0;  ///< that it fills
};

/// The blocks a queued request starts with, until it starts: what it took over from a dead owner, or the prefix of
/// its tokens the members' caches hold (read where it lies) for a new request or one that lost its KV.
struct adopted_prefix {
  enum class source { takeover, cached_prefix, restart };
  taken_over blocks;
  int64_t since_ns = 0;  ///< when its takeover began
  source from = source::takeover;
};

/// Everything an instance keeps.
struct instance_state {
  instance_config config;
  std::unique_ptr<local_blocks> blocks;
  std::unique_ptr<gpu::batcher> batcher;
  std::map<request_id, running_request> requests;
  std::deque<generate_request> waiting;
  std::deque<uint64_t> waiting_since;  ///< views_received when each waiting request arrived
  uint64_t views_received = 0;
  std::map<move_id, picked_blocks> picks;
  std::set<std::pair<request_id, uint32_t>> moving;  ///< (request, logical block) being moved
  std::shared_ptr<gpu::step_plan> in_flight;
  std::vector<std::function<void()>> after_step;  ///< table changes held while a step runs
  cluster_view view;
  bool have_view = false;
  bool loan_pending = false;
  bool loans_refused = false;   ///< until the next view: the last loan found no room
  request_id room_asked = 0;    ///< a long request whose room the gManager is asked for
  uint32_t room_keep = 0;       ///< ... the blocks it keeps here when it has its room (the rest go there)
  request_id room_too_big = 0;  ///< a request whose room (all but its working set) was refused: it keeps more here
  request_id room_granted = 0;  ///< ... and has granted: it starts at the next admission
  std::map<request_id, uint32_t> with_room;  ///< running requests with a room -> blocks they keep here
  /// Requests that lost KV with a failed holder and wait in the queue to start over: their sequences, with
  /// the tokens so far (the queue entry's prompt is prompt and answer so far).
  std::map<request_id, std::shared_ptr<gpu::sequence>> resuming;
  /// Those of them that lost KV again pause before they queue (a holder that failed once may still be cut
  /// off): their queue entries, until requeue_atom.
  std::map<request_id, generate_request> pausing;
  /// Those of them whose attention failed at known holders -> those holders: their lookup reads elsewhere.
  std::map<request_id, std::set<instance_id>> lost_at;
  bool look_again_pending = false;  ///< a recheck_atom is on its way (an idle instance with a queue)
  bool rooms_refused = false;  ///< until the next view
  std::vector<std::pair<instance_id, uint32_t>> granted_holders;  ///< the granted room's holders and their blocks
  std::map<request_id, room_prefill_plan> prefills;  ///< requests whose room's holders prefill their prompt
  std::map<move_id, request_id> chunk_requests;      ///< their chunks under way, to their request
  std::map<move_id, hosted_chunk> hosted_chunks;     ///< other instances' chunks computed here
  /// Requests of a dead owner whose blocks the rManager takes over, or new ones whose prefix it finds elsewhere.
  std::map<request_id, generate_request> taking_over;
  std::map<request_id, adopted_prefix> adopted;        ///< ... and, once it has, what they start with
  uint64_t next_chunk = 1;
  std::set<request_id> planted;  ///< requests a planted defect was put in (config.plant)
  gpu::prefix_cache_stats cache_published;  ///< the prefix cache's counters the metrics have
  static inline const char* name = "instance";
};

using self_ptr = instance_actor::stateful_pointer<instance_state>;

// ---- instance.cpp: what every protocol reads ----------------------------------------------------------------

/// The actor clock's time in nanoseconds (virtual in the simulator).
int64_t now_ns(caf::local_actor* self);
/// Where `seq`'s blocks are, per instance.
std::vector<request_placement_entry> placement_of(const gpu::sequence& seq, instance_id self_id);
/// Blocks of `seq` in this instance's pool.
uint32_t blocks_here(const instance_state& st, const gpu::sequence& seq);
/// Blocks the running sequences will still take here, beyond those they hold.
uint32_t promised_blocks(const instance_state& st);
/// Tells the rManager, through the shared promises, what is spoken for here.
void note_promised(const instance_state& st);
// ---- to_client.cpp ------------------------------------------------------------------------------------------

/// Tells a request's client (its request actor, not a typed actor) a token, as from this instance (through the
/// checker's tap, and with the defect it plants, when the config has them).
void tell_client(self_ptr self, const caf::actor& client, token_event e);
/// ... or its end.
void tell_client(self_ptr self, const caf::actor& client, request_finished e);
/// Counts `positions` computed again after their KV was lost (illm:positions_recomputed_total).
void note_recomputed(self_ptr self, int positions);
/// Sends the rManager the placement and load of this instance.
void publish_placement(self_ptr self);
/// Request `req` no longer holds blocks here as it did: its blocks elsewhere, room, moves and prefill go (its full
/// blocks elsewhere, keyed in `kept`, to their holders' caches).
void release_elsewhere(self_ptr self, request_id req, std::vector<gpu::keyed_block> kept = {});

// ---- admission.cpp -------------------------------------------------------------------------------------------

/// A new request from its request actor: queued (or refused).
void on_generate(self_ptr self, generate_request& r);
/// A request's client cancels it.
void on_cancel(self_ptr self, const cancel_request& c);
/// The gManager's answer to a room this instance asked for.
void on_room_answer(self_ptr self, const room_answer& a);
/// The rManager's answer to a loan.
void on_loan_result(self_ptr self, const loan_result& r);
/// Moves waiting requests into the batch, first come first served, while the policy lets them.
void admit(self_ptr self);
/// Asks the rManager to lend `blocks` of this instance's KV to others (false: no loan can be had now).
bool ask_loan(self_ptr self, request_id req, uint32_t blocks);
/// Whether `seq` may take one more block of this pool.
bool may_take_block(const instance_state& st, const gpu::sequence& seq);
/// Request `id` lost KV with a failed holder (those of `failed` known): it starts over from its tokens, first in the
/// queue.
void start_over(self_ptr self, request_id id, const std::string& why, const std::set<instance_id>& failed = {});
/// A request that paused before starting over queues now (requeue_atom).
void on_requeue(self_ptr self, request_id id);
/// Queues a request that goes on (it started over, or was taken over) first, but behind a head whose room is
/// under way.
void queue_first(self_ptr self, generate_request r);

// ---- takeover.cpp --------------------------------------------------------------------------------------------

/// A request that went on from a dead owner (r.takeover_generation): the rManager takes the blocks that survived
/// over before it queues (true); false for any other request.
bool begin_takeover(self_ptr self, generate_request& r);
/// Cancels a request whose takeover is under way (false: it is not one).
bool cancel_takeover(self_ptr self, request_id id);
/// The blocks a queued request took over: held here already, and held elsewhere.
struct adopted_count {
  uint32_t here = 0, elsewhere = 0;
};
/// The blocks a queued request took over, here and elsewhere (none of them is allocated again).
adopted_count adopted_blocks(const instance_state& st, request_id id);
/// A request taken over starts: its table begins with the blocks taken over, their positions cached.
void apply_adopted(self_ptr self, running_request& r);
/// A queued request taken over ends before it starts: the blocks taken over go back.
void drop_adopted(self_ptr self, request_id id);
/// Gives blocks taken over (or read where they are) back: this pool's at once, the holders' through the rManager.
void give_back(self_ptr self, request_id id, const taken_over& t);
/// The rManager answered with blocks for request `id` (taken over, or a prefix read elsewhere): the request, out of
/// taking_over, with `t` cleared (and given back) when it does not fit its prompt; none when it was cancelled
/// meanwhile (`t` given back).
std::optional<generate_request> answered_blocks(self_ptr self, request_id id, taken_over& t);

// ---- shared_prefix.cpp ---------------------------------------------------------------------------------------

/// A new request whose prompt's prefix another member's cache may hold further than this pool's: the rManager
/// finds it and has it attached where it lies before the request queues (true); false for any other request.
bool begin_prefix_lookup(self_ptr self, generate_request& r);
/// The same for a request that lost KV and starts over from its tokens (prompt and output so far): it queues first
/// once the rManager answers (false: nothing to ask; queue it now).
bool begin_restart_lookup(self_ptr self, generate_request& r);

// ---- step_loop.cpp -------------------------------------------------------------------------------------------

/// How often an idle instance with a queue looks at it again (recheck_atom).
inline constexpr std::chrono::milliseconds queue_recheck_period{100};
/// An idle instance looks at its queue again (recheck_atom).
void on_recheck(self_ptr self);

/// The batcher's options, with its shortage rule (loan, wait or preempt).
gpu::batcher_options batch_options(self_ptr self);
/// Plans and starts the next step unless one is running.
void maybe_step(self_ptr self);
/// A new cluster view from the rManager.
void on_view(self_ptr self, cluster_view& v);

// ---- room_prefill_owner.cpp ----------------------------------------------------------------------------------

/// Starts `req`'s room prefill (its room is granted) when enough of its prompt would go to the holders.
void begin_room_prefill(self_ptr self, request_id req);
/// The holder started the step computing chunk `id`: the next chunk may go.
void on_chunk_started(self_ptr self, move_id id);
/// Room prefills whose chunk went to an instance that left the view start over.
void check_prefill_holders(self_ptr self);

// ---- hosted_chunks.cpp ---------------------------------------------------------------------------------------

/// A chunk of another instance's request, from its owner: computed here into its reserved blocks.
caf::result<chunk_done> accept_chunk(self_ptr self, prefill_chunk& c);
/// The owner or the rManager stops chunk `c.id`.
void on_cancel_chunk(self_ptr self, const cancel_chunk& c);
/// Tells the owners of the chunks in `plan` that their step started (once each).
void tell_chunks_started(self_ptr self, const gpu::step_plan& plan);
/// A chunk computed here ended: its owner hears it, and its reservation goes back to the rManager.
void finish_hosted_chunk(self_ptr self, const gpu::sequence& seq);

// ---- block_moves.cpp -----------------------------------------------------------------------------------------

/// Chooses up to max full local blocks to move, oldest first, from req (or the longest request).
block_pick pick(self_ptr self, const pick_blocks& ask);
/// The copy is confirmed: switch the blocks (now, or after the step in flight).
caf::result<bool> on_blocks_moved(self_ptr self, const blocks_moved& m);
/// The move failed: its blocks are no longer marked as moving.
void unmark(self_ptr self, move_id id);

// ---- replicas.cpp --------------------------------------------------------------------------------------------

/// Chooses up to max_blocks full blocks without a copy of one long request, all at one holder, and marks them.
block_pick pick_replica_blocks(self_ptr self, const pick_replicas& ask);
/// The copies are made: noted, unless the request is gone or its blocks changed (false: they go back).
bool note_replicated(self_ptr self, const blocks_replicated& m);
/// Copies lost where they were kept.
void forget_replicas(self_ptr self, const replicas_lost& r);
/// Where the copies of `r`'s blocks are, per instance.
std::vector<request_placement_entry> replica_placement(const running_request& r);
/// Copies kept at instances the view no longer lists are gone.
void forget_departed_replicas(self_ptr self);
/// Request `id` lost the KV it had at `lost` holders: the lost blocks with a copy elsewhere are promoted where
/// they are (the request sits out meanwhile), those without one are computed again here, and only they (true);
/// false when it must start over (it is being prefilled or held, or this pool lacks blocks for them).
bool recover_from_replicas(self_ptr self, request_id id, const std::set<instance_id>& lost);
/// Notes that request `id` lost KV now (for the time to its next token).
void note_kv_lost(self_ptr self, request_id id);
/// A step gave `seq` tokens: the time since its KV was lost, if it was, is observed.
void note_recovered_token(self_ptr self, running_request& r, const gpu::sequence& seq);

}  // namespace illm::actors::instance_impl
