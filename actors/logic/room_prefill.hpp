#pragma once
// Room prefill, the owner's plan (plain C++, no CAF): a long prompt whose request has a room is prefilled
// by the room's holders, a chunk each in turn, so that its KV is written where it stays and its dense
// layers run on many GPUs at once instead of on the owner's alone. The chunks go out in prompt order, each
// once the step computing the one before it has started (every step then waits only for steps that
// started before it: no cycle), to the holder with the most of the room left that has no chunk of it
// under way; a holder's last chunk is what its room there still holds, if less than a chunk. The holders
// take as much of the prompt as the room holds; the owner keeps the rest, at least the last token (it
// samples the first token, after every chunk is committed). A holder that refuses a chunk's reservation
// gets no more of them; when no holder can take the next chunk, the holders' part ends there and the
// owner prefills the rest itself.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace illm::actors {

/// Room prefill goes ahead when at least this many chunks go out (an instance's default).
constexpr int default_room_prefill_min_chunks = 2;
/// How long younger, no larger rooms may go before a long request waiting for its room (the gManager's default,
/// gmanager_config::room_pass_limit).
constexpr std::chrono::milliseconds default_room_pass_limit{60000};

/// Which positions of one prompt go to which holder, and how far the chunks are.
class room_prefill_plan {
 public:
  /// A chunk to hand out: positions [pos0, end) to `holder`, `blocks` blocks of its room there.
  struct chunk {
    uint32_t holder = 0;
    int32_t pos0 = 0, end = 0;
    uint32_t blocks = 0;
  };

  /// The plan for positions [begin, prompt) of a prompt in chunks of up to `chunk_tokens` (a multiple of 16),
  /// over holders that keep the given blocks for its room; none when the holders' part would not pass
  /// `min_chunks` - 1 whole chunks (the owner then prefills it itself).
  static std::optional<room_prefill_plan> make(int32_t begin, int32_t prompt, int32_t chunk_tokens,
                                               const std::vector<std::pair<uint32_t, uint32_t>>& holders,
                                               int min_chunks);

  /// The chunk to hand out now, if any: none while a chunk asked for or handed out has not started, once
  /// the holders' part is covered, or while every holder that could take it has one under way.
  std::optional<chunk> next() const;
  /// Chunk `id` (what next() gave) is being reserved at its holder.
  void asked(uint64_t id, const chunk& c);
  /// Its reservation was refused, or its holder turned it down before it started: that holder takes no more
  /// chunks, and the next chunk has its positions (it was the last asked for).
  void refused(uint64_t id);
  /// The step computing it started at its holder.
  void started(uint64_t id);
  /// It is written and committed at its holder.
  void committed(uint64_t id);

  /// No chunk can go out any more (the holders' part is covered, or no holder can take the next one).
  bool stalled() const;
  /// Every chunk is committed and no more will go out: the owner prefills on from covered().
  bool finished() const { return stalled() && under_way_.empty(); }
  /// Positions [begin, covered()) are the holders' (handed out, or committed).
  int32_t covered() const { return next_pos_; }
  /// Chunks not yet committed.
  std::vector<uint64_t> under_way() const;
  /// Positions [begin, committed()) are written and committed at the holders (chunks go out in order).
  int32_t committed() const;
  /// The holder chunk `id` went to (0 for an unknown chunk).
  uint32_t holder_of(uint64_t id) const;
  /// The chunk `id` went to, if it is under way.
  std::optional<chunk> chunk_of(uint64_t id) const;
  /// Whether the step computing chunk `id` has started.
  bool has_started(uint64_t id) const;

 private:
  struct state {
    chunk c;
    bool started = false;
  };
  int32_t next_pos_ = 0, end_ = 0, chunk_tokens_ = 0;
  std::map<uint32_t, uint32_t> left_;  // per holder: room blocks not yet given to chunks
  std::set<uint32_t> refusing_;
  std::map<uint64_t, state> under_way_;
};

}  // namespace illm::actors
