#include "gpu/batcher.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "gpu/tokenizer.hpp"

namespace illm::gpu {

const char* to_string(finish_reason r) {
  switch (r) {
    case finish_reason::none: return "none";
    case finish_reason::length: return "length";
    case finish_reason::stop: return "stop";
    case finish_reason::error: return "error";
  }
  return "unknown";
}

batcher::batcher(engine& e, block_source& blocks, const batcher_options& options)
    : engine_(e), blocks_(blocks), options_(options) {
  options_.max_batch_tokens = std::min(options_.max_batch_tokens, e.options().max_batch_tokens);
  options_.max_batch_seqs = std::min(options_.max_batch_seqs, e.options().max_batch_seqs);
}

void batcher::add(std::shared_ptr<sequence> seq) { active_.push_back(std::move(seq)); }

std::vector<std::shared_ptr<sequence>> batcher::take_finished() { return std::exchange(finished_, {}); }

std::vector<batcher::planned> batcher::plan() const {
  std::vector<planned> batch;
  int budget = options_.max_batch_tokens;
  // Decode tokens first (one per running sequence), then prefill chunks in arrival order.
  for (const auto& s : active_)
    if (int(s->tokens.size()) - s->n_cached == 1 && budget > 0 && int(batch.size()) < options_.max_batch_seqs) {
      batch.push_back({s.get(), 1});
      --budget;
    }
  for (const auto& s : active_) {
    const int pending = int(s->tokens.size()) - s->n_cached;
    if (pending <= 1 || budget == 0 || int(batch.size()) >= options_.max_batch_seqs) continue;
    const int n = std::min(pending, budget);
    batch.push_back({s.get(), n});
    budget -= n;
  }
  return batch;
}

status batcher::release_all(sequence& seq) {
  for (const block_ref& ref : seq.table) ILLM_RETURN_IF_ERROR(blocks_.release(ref));
  seq.table.clear();
  seq.n_cached = 0;
  return status::ok();
}

void batcher::preempt(sequence& seq) {
  if (status s = release_all(seq); !s.is_ok()) {
    finish(seq, finish_reason::error, s.message());
    return;
  }
  ++seq.preemptions;
}

void batcher::finish(sequence& seq, finish_reason why, std::string error) {
  seq.finish = why;
  seq.error = std::move(error);
}

status batcher::reserve_blocks(std::vector<planned>& batch) {
  for (size_t i = 0; i < batch.size();) {
    sequence& seq = *batch[i].seq;
    const uint32_t needed = blocks_for_tokens(seq.n_cached + batch[i].n_tokens);
    while (seq.table.size() < needed) {
      auto block = blocks_.allocate(seq, uint32_t(seq.table.size()));
      if (block.is_ok()) {
        seq.table.push_back(block.value());
        continue;
      }
      if (block.error().code() != status_code::out_of_blocks) return block.error();
      // Out of blocks: recompute the newest other sequence later; alone, this one cannot fit.
      auto victim = std::find_if(active_.rbegin(), active_.rend(), [&](const auto& s) {
        return s.get() != &seq && !s->finished() && !s->table.empty();
      });
      if (victim == active_.rend()) {
        finish(seq, finish_reason::error,
               fmt::format("the sequence needs {} KV blocks, more than the pool holds", needed));
        ILLM_RETURN_IF_ERROR(release_all(seq));
        break;
      }
      sequence* evicted = victim->get();
      preempt(*evicted);
      batch.erase(std::remove_if(batch.begin(), batch.end(), [&](const planned& p) { return p.seq == evicted; }),
                  batch.end());
    }
    // Entries before this one may have been evicted: continue after this sequence's current place.
    i = size_t(std::find_if(batch.begin(), batch.end(), [&](const planned& p) { return p.seq == &seq; }) -
               batch.begin()) + 1;
  }
  batch.erase(std::remove_if(batch.begin(), batch.end(), [](const planned& p) { return p.seq->finished(); }),
              batch.end());
  return status::ok();
}

status batcher::step(const kv_pools& pools, attention_router* router) {
  std::vector<planned> batch = plan();
  ILLM_RETURN_IF_ERROR(reserve_blocks(batch));
  last_tokens_ = last_decodes_ = 0;
  if (batch.empty()) {
    retire();
    return status::ok();
  }
  std::vector<batch_entry> entries;
  for (const planned& p : batch) {
    sequence& s = *p.seq;
    const bool completes = s.n_cached + p.n_tokens == int(s.tokens.size());
    entries.push_back({s.id, s.tokens.data() + s.n_cached, p.n_tokens, s.n_cached, &s.table, completes});
    last_tokens_ += p.n_tokens;
    last_decodes_ += completes && p.n_tokens == 1;
  }
  ILLM_RETURN_IF_ERROR(engine_.step(entries, pools, router));

  std::vector<sampling_params> params;
  std::vector<uint64_t> rng;
  std::vector<sequence*> sampled;
  for (size_t i = 0; i < batch.size(); ++i) {
    sequence& s = *batch[i].seq;
    s.n_cached += batch[i].n_tokens;
    s.partials_per_layer.push_back(engine_.last_stats().partials[i]);
    if (entries[i].sample) {
      params.push_back(s.sampling);
      rng.push_back(s.rng);
      sampled.push_back(&s);
    }
  }
  std::vector<int32_t> tokens(sampled.size());
  ILLM_RETURN_IF_ERROR(engine_.sample(params, rng, tokens));
  for (size_t i = 0; i < sampled.size(); ++i) {
    sequence& s = *sampled[i];
    s.rng = rng[i];
    if (!s.ignore_eos && (tokens[i] == token_bos || tokens[i] == token_eos)) {
      finish(s, finish_reason::stop);
      continue;
    }
    s.tokens.push_back(tokens[i]);
    if (s.n_generated() >= s.max_new_tokens) finish(s, finish_reason::length);
  }
  retire();
  return status::ok();
}

void batcher::retire() {
  for (auto it = active_.begin(); it != active_.end();) {
    if ((*it)->finished() || (*it)->max_new_tokens <= (*it)->n_generated()) {
      if ((*it)->finish == finish_reason::none) finish(**it, finish_reason::length);
      if (status s = release_all(**it); !s.is_ok() && (*it)->finish != finish_reason::error)
        finish(**it, finish_reason::error, s.message());
      finished_.push_back(*it);
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace illm::gpu
