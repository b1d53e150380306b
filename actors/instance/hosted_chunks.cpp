// Room prefill, at a holder: chunks of other instances' prompts (prefill_chunk) computed here, as part of this
// instance's own steps, into the blocks the owner's rManager reserved here (take_reservation while it runs,
// return_reservation after). The owner hears when the chunk's step starts (chunk_started) and when its KV is
// written (chunk_done); cancel_chunk stops one.
#include <fmt/format.h>

#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

namespace {

/// Why chunk `c` cannot be computed here (empty: it can): its positions, block table and size must fit.
std::string chunk_refusal(const instance_state& st, const prefill_chunk& c) {
  const int64_t b = gpu::kv_block_tokens, end = int64_t(c.pos0) + int64_t(c.tokens.size());
  if (c.tokens.empty() || c.pos0 < 0 || c.pos0 % b != 0 || end % b != 0 || c.owner == st.config.id)
    return "a chunk must cover whole blocks of another instance's request";
  if (!c.owner_instance) return "a chunk must name its owner's instance";
  if (int64_t(c.tokens.size()) > st.config.batch.max_batch_tokens)
    return fmt::format("a chunk of {} tokens exceeds this instance's {} per step", c.tokens.size(),
                       st.config.batch.max_batch_tokens);
  if (c.table_pools.size() != size_t(end / b) || c.table_blocks.size() != c.table_pools.size())
    return "the chunk's block table does not cover its positions";
  for (int32_t t : c.tokens)
    if (t < 0) return "the chunk has a negative token id";
  return {};
}

/// Whether `blocks` (the reservation here) are the blocks the chunk's table places here after its start.
bool reservation_matches(const instance_state& st, const prefill_chunk& c, const std::vector<uint32_t>& blocks) {
  const size_t first = size_t(c.pos0 / gpu::kv_block_tokens);
  bool matches = !blocks.empty() && first + blocks.size() == c.table_blocks.size();
  for (size_t i = 0; matches && i < blocks.size(); ++i)
    matches = c.table_pools[first + i] == st.config.id && c.table_blocks[first + i] == blocks[i];
  return matches;
}

/// The sequence that computes chunk `c`: placeholders for the positions before it, whose KV is elsewhere.
std::shared_ptr<gpu::sequence> chunk_sequence(const prefill_chunk& c) {
  auto seq = std::make_shared<gpu::sequence>();
  seq->id = c.id;
  seq->foreign_request = c.req_id;
  seq->foreign_owner = c.owner;
  seq->tokens.assign(size_t(c.pos0), 0);
  seq->tokens.insert(seq->tokens.end(), c.tokens.begin(), c.tokens.end());
  seq->n_prompt = int(seq->tokens.size());
  seq->n_cached = c.pos0;
  for (size_t i = 0; i < c.table_pools.size(); ++i) seq->table.push_back({c.table_pools[i], c.table_blocks[i]});
  return seq;
}

/// Starts computing chunk `c` into `blocks` (its reservation here), if they are the chunk's own blocks.
void start_hosted_chunk(self_ptr self, const prefill_chunk& c, const std::vector<uint32_t>& blocks,
                        caf::typed_response_promise<chunk_done> done) {
  auto& st = self->state;
  if (!reservation_matches(st, c, blocks)) {
    if (!blocks.empty()) self->send(st.config.rmanager, return_reservation{c.id});
    done.deliver(chunk_done{c.id, false, fmt::format("instance {} has no reservation {} for these blocks of "
                                                     "request {}", st.config.id, c.id, c.req_id)});
    return;
  }
  auto seq = chunk_sequence(c);
  st.hosted_chunks[c.id] = {seq, std::move(done), c.owner_instance, false, uint32_t(blocks.size())};
  st.batcher->add(std::move(seq));
  maybe_step(self);
}

}  // namespace

caf::result<chunk_done> accept_chunk(self_ptr self, prefill_chunk& c) {
  auto& st = self->state;
  if (std::string why = chunk_refusal(st, c); !why.empty()) return chunk_done{c.id, false, std::move(why)};
  if (st.hosted_chunks.count(c.id)) return chunk_done{c.id, false, "that chunk is already being computed here"};
  auto done = self->make_response_promise<chunk_done>();
  auto chunk = std::make_shared<prefill_chunk>(std::move(c));
  self->request(st.config.rmanager, caf::infinite, take_reservation{chunk->id, chunk->owner, chunk->req_id})
      .then([=](const std::vector<uint32_t>& blocks) mutable { start_hosted_chunk(self, *chunk, blocks, done); },
            [=](const caf::error& e) mutable {
              done.deliver(chunk_done{chunk->id, false, "no reservation: " + self->system().render(e)});
            });
  return done;
}

void on_cancel_chunk(self_ptr self, const cancel_chunk& c) {
  auto& st = self->state;
  if (auto it = st.hosted_chunks.find(c.id); it != st.hosted_chunks.end() && st.batcher->cancel(c.id)) maybe_step(self);
}

void tell_chunks_started(self_ptr self, const gpu::step_plan& plan) {
  for (const gpu::sequence* s : plan.sequences) {
    auto it = s->foreign() ? self->state.hosted_chunks.find(s->id) : self->state.hosted_chunks.end();
    if (it == self->state.hosted_chunks.end() || it->second.started) continue;
    it->second.started = true;
    self->send(it->second.owner, chunk_started{s->id});
  }
}

/// Written, failed or cancelled; the reservation waits for the owner's commit at the rManager.
void finish_hosted_chunk(self_ptr self, const gpu::sequence& seq) {
  auto& st = self->state;
  auto it = st.hosted_chunks.find(seq.id);
  if (it == st.hosted_chunks.end()) return;
  const bool ok = seq.finish == gpu::finish_reason::length;
  const std::string why = seq.finish == gpu::finish_reason::cancelled ? "cancelled" : seq.error;
  if (auto* m = st.config.metrics.get(); m && ok)
    m->blocks_prefilled.with({std::to_string(st.config.id)}).add(double(it->second.blocks));
  it->second.done.deliver(chunk_done{seq.id, ok, ok ? "" : why});
  self->send(st.config.rmanager, return_reservation{seq.id});
  st.hosted_chunks.erase(it);
}

}  // namespace illm::actors::instance_impl
