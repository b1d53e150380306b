#include "actors/logic/room_prefill.hpp"

#include <algorithm>

namespace illm::actors {

namespace {
constexpr int32_t block_tokens = 16;
}

std::optional<room_prefill_plan> room_prefill_plan::make(int32_t begin, int32_t prompt, int32_t chunk_tokens,
                                                         const std::vector<std::pair<uint32_t, uint32_t>>& holders,
                                                         int min_chunks) {
  if (chunk_tokens < block_tokens || chunk_tokens % block_tokens != 0 || begin % block_tokens != 0 ||
      begin >= prompt)
    return std::nullopt;
  room_prefill_plan plan;
  plan.chunk_tokens_ = chunk_tokens;
  plan.next_pos_ = begin;
  int64_t room = 0;  // tokens the holders keep room for
  for (const auto& [holder, blocks] : holders) {
    plan.left_[holder] += blocks;
    room += int64_t(blocks) * block_tokens;
  }
  // Whole blocks, the owner keeping at least the last token; no more than the room holds.
  const int64_t whole = (int64_t(prompt) - 1 - begin) / block_tokens * block_tokens;
  plan.end_ = begin + int32_t(std::min(whole, room));
  // Worth it once more than min_chunks - 1 full chunks go out.
  if (plan.end_ - begin <= int64_t(std::max(1, min_chunks) - 1) * chunk_tokens || plan.end_ == begin)
    return std::nullopt;
  return plan;
}

std::optional<room_prefill_plan::chunk> room_prefill_plan::next() const {
  if (next_pos_ >= end_) return std::nullopt;
  for (const auto& [id, s] : under_way_)
    if (!s.started) return std::nullopt;  // the one before has not started: its step must come first
  std::optional<chunk> best;
  uint32_t best_left = 0;
  for (const auto& [holder, left] : left_) {
    if (left == 0 || refusing_.count(holder)) continue;
    const bool busy = std::any_of(under_way_.begin(), under_way_.end(),
                                  [&](const auto& u) { return u.second.c.holder == holder; });
    if (busy || (best && left <= best_left)) continue;
    // A chunk, or what is left of the prompt or of the holder's room if less.
    const int32_t tokens = std::min({chunk_tokens_, int32_t(left) * block_tokens, end_ - next_pos_});
    best = chunk{holder, next_pos_, next_pos_ + tokens, uint32_t(tokens / block_tokens)};
    best_left = left;
  }
  return best;
}

void room_prefill_plan::asked(uint64_t id, const chunk& c) {
  under_way_[id] = {c, false};
  left_[c.holder] -= std::min(left_[c.holder], c.blocks);
  next_pos_ = c.end;
}

void room_prefill_plan::refused(uint64_t id) {
  auto it = under_way_.find(id);
  if (it == under_way_.end()) return;
  refusing_.insert(it->second.c.holder);
  // Its positions go to the next chunk (the chunks are asked for one at a time, in order).
  next_pos_ = it->second.c.pos0;
  under_way_.erase(it);
}

void room_prefill_plan::started(uint64_t id) {
  if (auto it = under_way_.find(id); it != under_way_.end()) it->second.started = true;
}

void room_prefill_plan::committed(uint64_t id) { under_way_.erase(id); }

bool room_prefill_plan::stalled() const {
  if (next_pos_ >= end_) return true;
  return std::none_of(left_.begin(), left_.end(),
                      [&](const auto& h) { return h.second > 0 && !refusing_.count(h.first); });
}

int32_t room_prefill_plan::committed() const {
  int32_t out = next_pos_;
  for (const auto& [id, s] : under_way_) out = std::min(out, s.c.pos0);
  return out;
}

std::vector<uint64_t> room_prefill_plan::under_way() const {
  std::vector<uint64_t> out;
  for (const auto& [id, s] : under_way_) out.push_back(id);
  return out;
}

uint32_t room_prefill_plan::holder_of(uint64_t id) const {
  auto it = under_way_.find(id);
  return it == under_way_.end() ? 0 : it->second.c.holder;
}

bool room_prefill_plan::has_started(uint64_t id) const {
  auto it = under_way_.find(id);
  return it != under_way_.end() && it->second.started;
}

std::optional<room_prefill_plan::chunk> room_prefill_plan::chunk_of(uint64_t id) const {
  auto it = under_way_.find(id);
  if (it == under_way_.end()) return std::nullopt;
  return it->second.c;
}

}  // namespace illm::actors
