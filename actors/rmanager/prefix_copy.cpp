// A run of a shared prefix cached on another instance is read where it lies (shared_prefix.cpp) unless the
// performance model finds a copy cheaper (placement::copy_beats_reading_in_place): attending it in place costs the
// reading request a round trip per layer per decode step; a copy costs its bytes once, and memory here that nobody
// needs. The holder copies the run as it copies a replica (reserve, put, flush, commit, the blocks' readers held
// while they travel), from blocks of this pool's free list that no one has spoken for; at the commit this pool's
// cache takes them under their keys, and the request attaches them here like any local hit. The round trips are
// measured by the prefix reads, the rate by the copies.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "actors/placement/perf_model.hpp"
#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

/// The rate the model assumes until a copy into this pool measured one: 1 GB/s, what TCP between hosts reaches.
constexpr double prior_copy_bytes_per_s = 1e9;
/// The weight of a new measurement in the smoothed round trips and rate.
constexpr double smoothing = 0.3;

double smoothed(double old, double measured) { return old > 0 ? (1 - smoothing) * old + smoothing * measured : measured; }

}  // namespace

void note_round_trip(rmanager_state& st, instance_id peer, double seconds) {
  if (seconds > 0) st.round_trip_s[peer] = smoothed(st.round_trip_s[peer], seconds);
}

bool copy_run_here(const rmanager_state& st, instance_id holder, uint32_t blocks, uint32_t decode_tokens,
                   bool reads_elsewhere) {
  if (st.config.prefix_copy == prefix_copy_never || holder == st.config.id || blocks == 0 ||
      blocks > replica_batch_blocks || blocks > replica_room(st) || !st.config.prefix_cache)
    return false;
  if (st.config.prefix_copy == prefix_copy_always) return true;
  const auto rtt = st.round_trip_s.find(holder);
  placement::prefix_copy_inputs in;
  in.blocks = blocks;
  in.block_bytes = st.config.pool->layout().block_bytes();
  in.layers = st.config.pool->layout().n_layers;
  in.decode_steps = decode_tokens;
  in.round_trip_s = rtt == st.round_trip_s.end() ? 0.0 : rtt->second;
  in.copy_bytes_per_s = st.copy_bytes_per_s > 0 ? st.copy_bytes_per_s : prior_copy_bytes_per_s;
  in.holder_read_anyway = reads_elsewhere;
  return placement::copy_beats_reading_in_place(in);
}

void ask_copy(self_ptr self, instance_id holder_id, rmanager_actor holder, copy_prefix ask,
              std::function<void(bool)> done) {
  auto& st = self->state;
  st.prefix_copies[ask.id] = {holder_id, ask.root, ask.keys, ask.tokens, self->clock().now()};
  const move_id id = ask.id;
  auto ended = [self, id, done](bool ok) {
    auto& s = self->state;
    if (!ok && !s.incoming.count(id)) s.prefix_copies.erase(id);  // nothing reserved here: nothing may commit
    done(ok);
  };
  self->request(holder, 2 * st.config.answer_timeout, std::move(ask))
      .then([=](const replica_result& r) { ended(r.ok); }, [=](const caf::error&) { ended(false); });
}

caf::result<replica_result> copy_cached_run(self_ptr self, const copy_prefix& c) {
  auto& st = self->state;
  const instance_view* reader = st.view.find(c.reader);
  if (!st.config.prefix_cache || c.reader == st.config.id || !reader || !reader->rmanager || !reachable(st, c.reader))
    return replica_result{c.id, false, fmt::format("instance {} is not a reader to copy to", c.reader)};
  if (std::string why = st.config.kv.mismatch(c.kv); !why.empty())
    return replica_result{c.id, false, fmt::format("instance {}'s pool holds {}: no copy for it", c.reader, why)};
  if (st.outgoing.count(c.id)) return replica_result{c.id, false, "a copy with this id is under way"};
  std::vector<uint32_t> blocks = st.config.prefix_cache->attach_run(c.root, c.keys, c.tokens);
  if (blocks.empty()) return replica_result{c.id, false, "the run is not cached here"};
  outgoing_move& move = st.outgoing[c.id];
  move.req = c.req_id;
  move.dst = c.reader;
  move.dst_rmanager = reader->rmanager;
  move.asked = uint32_t(blocks.size());
  move.replica = true;  // nothing switches here: the reader hears the result
  move.owner = c.reader;
  move.cache_readers = blocks;
  move.replica_answer = self->make_response_promise<replica_result>();
  auto answer = move.replica_answer;
  std::vector<uint32_t> logical(blocks.size());
  std::iota(logical.begin(), logical.end(), 0u);
  reserve(self, c.id, block_pick{c.id, c.req_id, std::move(logical), std::move(blocks), st.config.id});
  return answer;
}

bool cache_copied_run(self_ptr self, move_id id, incoming_move& move) {
  auto& st = self->state;
  auto it = st.prefix_copies.find(id);
  if (it == st.prefix_copies.end() || !st.config.prefix_cache) return false;
  const prefix_copy& copy = it->second;
  const size_t n = std::min(move.blocks.size(), copy.keys.size());
  for (size_t i = 0; i < move.blocks.size(); ++i) {
    const uint32_t b = move.blocks[i];
    if (i < n) {
      const gpu::block_key& parent = i == 0 ? copy.parent : copy.keys[i - 1];
      const std::span<const int32_t> tokens(copy.tokens.data() + i * gpu::kv_block_tokens, gpu::kv_block_tokens);
      (void)st.config.prefix_cache->offer(copy.keys[i], parent, tokens, b);  // false: cached already, freed below
    }
    free_block(st, b);  // the cache's now, idle until the request attaches it; else back to the pool
  }
  const double seconds = std::chrono::duration<double>(self->clock().now() - copy.asked).count();
  const auto rtt = st.round_trip_s.find(copy.holder);
  const double overhead = rtt == st.round_trip_s.end() ? 0.0 : 3 * rtt->second;
  const double bytes = double(move.blocks.size()) * double(st.config.pool->layout().block_bytes());
  st.copy_bytes_per_s = smoothed(st.copy_bytes_per_s, bytes / std::max(seconds - overhead, seconds / 4));
  if (auto* m = st.config.metrics.get())
    m->prefix_cache_copied.with({std::to_string(st.config.id)}).add(double(move.blocks.size()));
  move.blocks.clear();  // nothing of the move's is left to give back
  move.replica = false;
  st.prefix_copies.erase(it);
  return true;
}

}  // namespace illm::actors::rmanager_impl
