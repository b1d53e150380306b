#include "gpu/batcher.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

#include "gpu/text.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::gpu {

const char* to_string(finish_reason r) {
  static constexpr const char* names[] = {"none", "length", "stop", "cancelled", "error"};  // in enum order
  return size_t(r) < std::size(names) ? names[size_t(r)] : "unknown";
}

int sequence::tokens_before_kept() const {
  return kept_ahead.empty() ? std::numeric_limits<int>::max() : int(kept_ahead.front() * kv_block_tokens) - n_cached;
}

void sequence::step_over_kept() {
  while (!kept_ahead.empty() && int(kept_ahead.front() * kv_block_tokens) <= n_cached) {
    n_cached = std::max(n_cached, int((kept_ahead.front() + 1) * kv_block_tokens));
    kept_ahead.erase(kept_ahead.begin());
  }
}

int sequence::note_computed(int from, int to) {
  const int again = std::max(0, std::min(to, lost_below) - from);
  recomputed += again;
  return again;
}

int sequence::forget_lost_blocks(std::span<const uint32_t> lost) {
  if (lost.empty()) return 0;
  const int had = kv_positions();
  // Every block up to the last that had KV was computed once: the lost ones among them are computed again.
  lost_below = std::max(lost_below, std::max(n_cached, kept_ahead.empty() ? 0 : int((kept_ahead.back() + 1) * kv_block_tokens)));
  std::vector<uint32_t> with_kv;  // full blocks with KV, lost ones left out
  for (uint32_t i = 0; i < full_blocks(); ++i) with_kv.push_back(i);
  with_kv.insert(with_kv.end(), kept_ahead.begin(), kept_ahead.end());
  std::erase_if(with_kv, [&](uint32_t i) { return std::binary_search(lost.begin(), lost.end(), i); });
  for (uint32_t i : lost)
    if (i < table.size()) table[i] = {block_ref::no_pool, 0};
  n_cached = std::min(n_cached, int(lost.front() * kv_block_tokens));
  kept_ahead.clear();
  for (uint32_t i : with_kv)
    if (int(i * kv_block_tokens) >= n_cached) kept_ahead.push_back(i);
  step_over_kept();
  return had - kv_positions();
}

uint32_t sequence::blocks_held() const {
  return uint32_t(std::count_if(table.begin(), table.end(), [](const block_ref& b) { return !b.absent(); }));
}

batcher::batcher(engine& e, block_source& blocks, batcher_options options)
    : engine_(&e), blocks_(blocks), options_(std::move(options)) {
  options_.max_batch_tokens = std::min(options_.max_batch_tokens, e.options().max_batch_tokens);
  options_.max_batch_seqs = std::min(options_.max_batch_seqs, e.options().max_batch_seqs);
  options_.max_scored_tokens = std::min(options_.max_scored_tokens, e.options().max_scored_tokens);
}

batcher::batcher(block_source& blocks, batcher_options options) : blocks_(blocks), options_(std::move(options)) {}

void batcher::add(std::shared_ptr<sequence> seq) {
  seq->wants_prefix = true;
  active_.push_back(std::move(seq));
}

void batcher::attach_prefix(sequence& s) {
  s.wants_prefix = false;
  if (s.finished() || s.foreign() || s.held || !s.table.empty() || s.n_cached > 0 || !s.kept_ahead.empty() ||
      s.prompt_logprobs >= 0)  // prompt log probabilities need every prompt position computed
    return;
  const int found = blocks_.attach_prefix(s);
  if (!s.prefix_looked_up) s.cached_prompt_tokens = std::min(found, s.n_prompt);
  s.prefix_looked_up = true;
}

bool batcher::cancel(uint64_t id) {
  for (const auto& s : active_)
    if (s->id == id && !s->finished()) {
      s->finish = finish_reason::cancelled;
      return true;
    }
  return false;
}

std::vector<std::shared_ptr<sequence>> batcher::take_finished() { return std::exchange(finished_, {}); }

std::vector<batcher::planned> batcher::pick(const std::vector<const sequence*>& waiting) const {
  std::vector<planned> batch;
  int budget = options_.max_batch_tokens;
  auto sits_out = [&](const sequence* s) { return std::find(waiting.begin(), waiting.end(), s) != waiting.end(); };
  auto runs = [&](const sequence& s) {
    return !s.finished() && !s.held && int(batch.size()) < options_.max_batch_seqs && !sits_out(&s);
  };
  // Decode tokens first (one per running sequence), then chunks for other instances (whole: the instances
  // after them wait for their blocks), then prefill chunks in arrival order.
  for (const auto& s : active_)
    if (runs(*s) && !s->foreign() && int(s->tokens.size()) - s->n_cached == 1 && budget > 0) {
      batch.push_back({s.get(), 1, s});
      --budget;
    }
  for (const auto& s : active_)
    if (const int pending = int(s->tokens.size()) - s->n_cached; runs(*s) && s->foreign() && pending <= budget) {
      batch.push_back({s.get(), pending, s});
      budget -= pending;
    }
  // A step with decode tokens prefills only up to mixed_step_tokens in all: a prompt spreads over the decode
  // steps instead of stalling them.
  const int taken = options_.max_batch_tokens - budget;
  const bool decodes = !batch.empty() && !batch.front().seq->foreign();
  if (decodes && options_.mixed_step_tokens > 0)
    budget = std::min(budget, std::max(0, options_.mixed_step_tokens - taken));
  if (decodes && steps_since_prefill_ + 1 < options_.prefill_every_steps) budget = 0;
  int scored = options_.max_scored_tokens;  // prompt tokens whose log probabilities the step may compute
  for (const auto& s : active_) {
    const int pending = int(s->tokens.size()) - s->n_cached;
    if (!runs(*s) || s->foreign() || pending <= 1 || budget == 0 || (s->scores_prompt() && scored <= 0)) continue;
    int n = std::min({pending, budget, s->tokens_before_kept()});
    if (s->scores_prompt()) scored -= n = std::min(n, scored);
    batch.push_back({s.get(), n, s});
    budget -= n;
  }
  return batch;
}

status batcher::release_all(sequence& seq) {
  status first = status::ok();
  if (seq.foreign()) seq.table.clear();  // the blocks are the request's, reserved for it here
  for (const block_ref& ref : seq.table)
    if (status s = ref.absent() ? status::ok() : blocks_.release(ref); !s.is_ok() && first.is_ok()) first = s;
  seq.table.clear();
  seq.n_cached = 0;
  seq.kept_ahead.clear();
  seq.keyed_blocks = 0;
  seq.last_key = {};
  return first;
}

void batcher::preempt(sequence& seq) {
  if (status s = release_all(seq); !s.is_ok()) {
    seq.finish = finish_reason::error;
    seq.error = s.message();
    return;
  }
  ++seq.preemptions;
  seq.wants_prefix = true;  // at its next plan: what the cache still holds of it is not computed again
}

std::vector<uint32_t> batcher::missing_blocks(const sequence& seq, uint32_t needed) {
  std::vector<uint32_t> out;
  for (uint32_t i = std::min<uint32_t>(seq.full_blocks(), uint32_t(seq.table.size())); i < needed; ++i)
    if (i >= seq.table.size() || seq.table[i].absent()) out.push_back(i);
  return out;
}

status batcher::reserve_blocks(std::vector<planned>& batch, std::vector<const sequence*>& sitting_out) {
  for (size_t i = 0; i < batch.size();) {
    sequence& seq = *batch[i].seq;
    const uint32_t needed = blocks_for_tokens(seq.n_cached + batch[i].n_tokens);
    const std::vector<uint32_t> missing = missing_blocks(seq, needed);
    bool waiting = false;
    for (size_t k = 0; k < missing.size() && !waiting && !seq.finished();) {
      auto block = blocks_.allocate(seq, missing[k]);
      if (block.is_ok()) {
        if (missing[k] < seq.table.size())
          seq.table[missing[k]] = block.value();
        else
          seq.table.push_back(block.value());  // past the table: ascending, each the next
        ++k;
        continue;
      }
      if (block.error().code() != status_code::out_of_blocks) return block.error();
      // The blocks a prompt's chunk has hold part of it: that part runs now (its full blocks may then be lent
      // out), the rest in a later step. A chunk larger than the pool could otherwise never run.
      if (const int fits = int(missing[k]) * kv_block_tokens - seq.n_cached;
          !seq.foreign() && fits > 0 && fits < batch[i].n_tokens) {
        batch[i].n_tokens = fits;
        break;
      }
      const uint32_t short_by = uint32_t(missing.size() - k);
      if (options_.on_shortage && options_.on_shortage(seq, short_by) == shortage_action::wait) {
        waiting = true;  // blocks are being found elsewhere: this sequence sits out the step
        sitting_out.push_back(&seq);
        break;
      }
      // Recompute the newest other sequence later; alone, this one cannot fit.
      auto victim = std::find_if(active_.rbegin(), active_.rend(), [&](const auto& s) {
        return s.get() != &seq && !s->finished() && !s->table.empty() && !s->held && !s->foreign();
      });
      if (victim == active_.rend()) {
        seq.finish = finish_reason::error;
        seq.error = text::format("the sequence needs {} KV blocks, more than the pool holds", needed);
        break;
      }
      sequence* evicted = victim->get();
      preempt(*evicted);
      batch.erase(std::remove_if(batch.begin(), batch.end(), [&](const planned& p) { return p.seq == evicted; }),
                  batch.end());
    }
    if (waiting)
      batch.erase(std::remove_if(batch.begin(), batch.end(), [&](const planned& p) { return p.seq == &seq; }),
                  batch.end());
    // Entries before this one may have been evicted: continue after this sequence's current place.
    const auto here = std::find_if(batch.begin(), batch.end(), [&](const planned& p) { return p.seq == &seq; });
    i = here == batch.end() ? i : size_t(here - batch.begin()) + 1;
  }
  batch.erase(std::remove_if(batch.begin(), batch.end(), [](const planned& p) { return p.seq->finished(); }),
              batch.end());
  return status::ok();
}

status batcher::plan(step_plan& out) {
  out = {};
  retire();
  // A sequence that waits for blocks sits out the step, and the tokens it would have had go to the others
  // (else a long request waiting at the head could leave the step empty while the others could run).
  std::vector<const sequence*> sitting_out;
  std::vector<planned> batch;
  for (const auto& s : active_)
    if (s->wants_prefix) attach_prefix(*s);
  for (size_t before = 0;; before = sitting_out.size()) {
    batch = pick(sitting_out);
    ILLM_RETURN_IF_ERROR(reserve_blocks(batch, sitting_out));
    if (sitting_out.size() == before) break;
  }
  retire();  // sequences that could never fit
  const bool prefills = std::any_of(batch.begin(), batch.end(), [](const planned& p) {
    return !p.seq->foreign() && int(p.seq->tokens.size()) - p.seq->n_cached > 1;
  });
  if (!batch.empty()) steps_since_prefill_ = prefills ? 0 : steps_since_prefill_ + 1;
  for (const planned& p : batch) {
    sequence& s = *p.seq;
    const bool completes = s.n_cached + p.n_tokens == int(s.tokens.size()) && !s.foreign();
    out.entries.push_back({s.id, s.tokens.data() + s.n_cached, p.n_tokens, s.n_cached, &s.table, completes,
                           s.foreign_request, s.foreign_owner, s.scores_prompt()});
    out.sequences.push_back(&s);
    out.held.push_back(p.owner);
    if (completes) {
      out.params.push_back(s.sampling);
      out.history.push_back(s.history());
      out.rng.push_back(s.rng);
    }
    out.decode_tokens += completes && p.n_tokens == 1;
  }
  return status::ok();
}

status batcher::execute(engine& e, step_plan& plan, const kv_pools& pools, attention_router* router) {
  ILLM_RETURN_IF_ERROR(e.step(plan.entries, pools, router));
  plan.partials = e.last_stats().partials;
  plan.sampled.assign(plan.params.size(), 0);
  plan.logprobs.assign(plan.params.size(), {});
  ILLM_RETURN_IF_ERROR(e.sample(plan.params, plan.history, plan.rng, plan.sampled, plan.logprobs));
  return score_prompts(e, plan);
}

status batcher::score_prompts(engine& e, step_plan& plan) {
  plan.prompt_scores.clear();
  std::vector<float> row(size_t(e.config().vocab_size));
  std::vector<double> logprobs;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const batch_entry& b = plan.entries[i];
    const sequence& s = *plan.sequences[i];
    if (!b.every_token) continue;
    for (int t = 0; t < b.n_tokens && b.pos0 + t + 1 < s.n_prompt; ++t) {  // the logits at t predict t + 1
      ILLM_RETURN_IF_ERROR(e.copy_logits(e.last_stats().logit_row[i] + t, row.data()));
      log_softmax(row.data(), int(row.size()), logprobs);
      token_logprobs lp;
      fill_logprobs(logprobs, s.tokens[size_t(b.pos0 + t + 1)], s.prompt_logprobs, lp);
      plan.prompt_scores.emplace_back(i, b.pos0 + t + 1, std::move(lp));
    }
  }
  return status::ok();
}

void batcher::complete(step_plan& plan) {
  last_tokens_ = 0;
  last_decodes_ = plan.decode_tokens;
  last_recomputed_ = 0;
  size_t sampled = 0;
  for (auto& [entry, position, lp] : plan.prompt_scores) {
    sequence& s = *plan.sequences[entry];
    s.prompt_scores.resize(size_t(s.n_prompt));
    s.prompt_scores[size_t(position)] = std::move(lp);
  }
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    sequence& s = *plan.sequences[i];
    if (!s.foreign()) last_recomputed_ += s.note_computed(s.n_cached, s.n_cached + plan.entries[i].n_tokens);
    s.n_cached += plan.entries[i].n_tokens;
    s.step_over_kept();
    if (!s.foreign()) blocks_.blocks_computed(s);
    last_tokens_ += plan.entries[i].n_tokens;
    if (i < plan.partials.size()) s.partials_per_layer = plan.partials[i];
    if (!plan.entries[i].sample) continue;
    const int32_t token = plan.sampled[sampled];
    s.rng = plan.rng[sampled++];
    if (s.finished()) continue;  // cancelled while the step ran
    if (!s.ignore_eos && std::find(s.stop_ids.begin(), s.stop_ids.end(), token) != s.stop_ids.end()) {
      s.finish = finish_reason::stop;
      continue;
    }
    s.tokens.push_back(token);
    if (s.sampling.logprobs >= 0 && sampled - 1 < plan.logprobs.size())
      s.logprobs.push_back(std::move(plan.logprobs[sampled - 1]));
    if (s.n_generated() >= s.max_new_tokens) s.finish = finish_reason::length;
    if (s.sampling.constraint) read_constrained(s, token);
  }
  retire();
}

void batcher::read_constrained(sequence& s, int32_t token) {
  if (!s.sampling.constraint->accept(s.constraint_state, token)) {
    s.finish = finish_reason::error;
    s.error = s.constraint_state.too_wide
                  ? text::format("the output's grammar holds more than {} parse states here (a schema whose "
                                 "alternatives read the same text, nested)", grammar::max_state_stacks)
                  : "a sampled token left the output's grammar";
  } else if (s.constraint_state.accepts() && !s.constraint_state.continues() && !s.finished()) {
    s.finish = finish_reason::stop;  // the grammar has read a whole output and allows nothing more
  }
}

bool sequence::start_constraint() {
  if (!sampling.constraint) return true;
  constraint_state = sampling.constraint->start();
  for (size_t i = size_t(std::max(n_prompt - output_before, 0)); i < tokens.size(); ++i)
    if (!sampling.constraint->accept(constraint_state, tokens[i])) return false;
  return true;
}

void batcher::discard(step_plan& plan) {
  last_tokens_ = 0;
  last_decodes_ = 0;
  last_recomputed_ = 0;
  plan = {};
  retire();  // those cancelled meanwhile
}

std::shared_ptr<sequence> batcher::take_back(uint64_t id) {
  auto it = std::find_if(active_.begin(), active_.end(), [&](const auto& s) { return s->id == id && !s->finished(); });
  if (it == active_.end()) return nullptr;
  std::shared_ptr<sequence> seq = *it;
  active_.erase(it);
  if (status s = release_all(*seq); !s.is_ok()) {
    seq->finish = finish_reason::error;
    seq->error = s.message();
    finished_.push_back(seq);
    return nullptr;
  }
  ++seq->preemptions;
  return seq;
}

status batcher::step(const kv_pools& pools, attention_router* router) {
  if (!engine_) return status(status_code::invalid_argument, "batcher: step() needs an engine");
  step_plan next;
  ILLM_RETURN_IF_ERROR(plan(next));
  if (!next.empty()) ILLM_RETURN_IF_ERROR(execute(*engine_, next, pools, router));
  complete(next);
  return status::ok();
}

void batcher::retire() {
  for (auto it = active_.begin(); it != active_.end();) {
    sequence& s = **it;
    const bool done = s.foreign() ? s.n_cached == int(s.tokens.size()) : s.n_generated() >= s.max_new_tokens;
    if (!s.finished() && done) s.finish = finish_reason::length;
    if (!s.finished()) {
      ++it;
      continue;
    }
    if (!s.foreign()) blocks_.finishing(s);
    if (status r = release_all(s); !r.is_ok() && s.finish != finish_reason::error) {
      s.finish = finish_reason::error;
      s.error = r.message();
    }
    finished_.push_back(*it);
    it = active_.erase(it);
  }
}

}  // namespace illm::gpu
