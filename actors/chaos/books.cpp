// The judgement of one request: its deliveries replayed segment by segment (a segment: the instance serving it
// from a token on), each token placed at its position and compared with the fault-free answer, each end counted
// against the segment that sent it; then what the client saw, which must agree.
#include "actors/chaos/books.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace illm::actors::chaos {

namespace {

/// The instance that served a request from token `start` on, and what it sent.
struct segment {
  instance_id at = 0;
  int32_t start = 0;
  int32_t sent = 0;
  int ends = 0;
};

/// Replays the deliveries of one request.
class replay {
 public:
  replay(int32_t max_tokens, const std::vector<int32_t>& reference)
      : max_tokens_(max_tokens), reference_(reference), answer_(size_t(std::max(0, max_tokens))) {}

  void add(const delivery& d, bool at_shutdown) {
    switch (d.what) {
      case delivery::kind::served_by: segments_.push_back({d.at, d.position, 0, 0}); return;
      case delivery::kind::token: return token(d);
      case delivery::kind::end:
        if (at_shutdown && d.reason == "cancelled") return;  // the harness's stop, not the runtime's answer
        return end(d);
    }
  }

  verdict finish(const client_view& client) {
    if (answers_.empty()) {
      out_.lost = true;
      problem("never answered");
    } else if (answers_.size() > 1) {
      out_.duplicated = true;
      problem(fmt::format("answered {} times", answers_.size()));
    }
    if (!answers_.empty()) judge_answer(answers_.front());
    judge_client(client);
    return std::move(out_);
  }

 private:
  /// The latest segment served by `at` (none: it never served the request).
  segment* segment_of(instance_id at) {
    for (auto it = segments_.rbegin(); it != segments_.rend(); ++it)
      if (it->at == at) return &*it;
    return nullptr;
  }

  void token(const delivery& d) {
    segment* s = segment_of(d.at);
    if (!s) return extra(fmt::format("a token from instance {}, which never served it", d.at));
    const int32_t position = s->start + s->sent++;
    if (s->ends > 0) return extra(fmt::format("a token from instance {} after it ended the request", d.at));
    if (position >= max_tokens_) return extra(fmt::format("token {} of {} asked for", position + 1, max_tokens_));
    if (size_t(position) >= reference_.size() || reference_[size_t(position)] != d.token) {
      out_.mismatched = true;
      problem(fmt::format("token {} is {} from instance {}, the fault-free answer has {}", position, d.token, d.at,
                          size_t(position) < reference_.size() ? reference_[size_t(position)] : -1));
    }
    if (s == &segments_.back() && !answer_[size_t(position)]) answer_[size_t(position)] = d.token;
  }

  void end(const delivery& d) {
    segment* s = d.at == delivery::front_end ? nullptr : segment_of(d.at);
    if (!s && d.at != delivery::front_end) {
      out_.duplicated = true;
      problem(fmt::format("an end from instance {}, which never served it", d.at));
      return;
    }
    if (s && ++s->ends > 1) {
      out_.duplicated = true;
      problem(fmt::format("instance {} ended it {} times", d.at, s->ends));
    }
    const bool left_behind = s && s != &segments_.back();
    if (left_behind && d.reason == "cancelled") return;  // the cancel it was sent when the request went on elsewhere
    answers_.push_back(d);
  }

  void judge_answer(const delivery& a) {
    const bool length = a.reason == "length";
    if (!length && a.reason != "stop") {
      out_.failed = true;
      return;
    }
    out_.completed = true;
    const auto given = std::count_if(answer_.begin(), answer_.end(), [](const auto& t) { return t.has_value(); });
    const auto first_gap = std::find_if(answer_.begin(), answer_.end(), [](const auto& t) { return !t; });
    if (length && given != max_tokens_) {
      out_.mismatched = true;
      problem(fmt::format("answered length with {} of {} tokens (the first missing: {})", given, max_tokens_,
                          first_gap - answer_.begin()));
    }
  }

  /// The client saw one end and, for an answer, a prefix of the fault-free tokens (all of them for length).
  void judge_client(const client_view& c) {
    if (c.ends == 0 && !out_.lost) {
      out_.lost = true;
      problem("its client never saw it end");
    }
    if (c.ends > 1 && !out_.duplicated) {
      out_.duplicated = true;
      problem(fmt::format("its client saw it end {} times", c.ends));
    }
    const bool prefix = c.tokens.size() <= reference_.size() &&
                        std::equal(c.tokens.begin(), c.tokens.end(), reference_.begin());
    const bool whole = c.reason != "length" || c.tokens.size() == size_t(max_tokens_);
    if ((!prefix || !whole) && !out_.mismatched) {
      out_.mismatched = true;
      problem(fmt::format("its client saw {} tokens, {}", c.tokens.size(),
                          prefix ? "fewer than asked for" : "not those of the fault-free answer"));
    }
  }

  void extra(std::string what) {
    ++out_.extra_tokens;
    problem(std::move(what));
  }
  void problem(std::string what) { out_.problems.push_back(std::move(what)); }

  const int32_t max_tokens_;
  const std::vector<int32_t>& reference_;
  std::vector<segment> segments_;
  std::vector<std::optional<int32_t>> answer_;  ///< what the serving segments sent, by position
  std::vector<delivery> answers_;
  verdict out_;
};

}  // namespace

verdict judge(const std::vector<delivery>& deliveries, const client_view& client, int32_t max_tokens,
              const std::vector<int32_t>& reference, size_t shutdown_from) {
  replay r(max_tokens, reference);
  for (size_t i = 0; i < deliveries.size(); ++i) r.add(deliveries[i], i >= shutdown_from);
  return r.finish(client);
}

const std::vector<std::pair<const char*, uint64_t books::*>>& books::counts() {
  static const std::vector<std::pair<const char*, uint64_t books::*>> all = {
      {"runs", &books::runs},
      {"accepted", &books::accepted},
      {"completed", &books::completed},
      {"failed", &books::failed},
      {"unjustified_failed", &books::unjustified_failed},
      {"lost", &books::lost},
      {"duplicated", &books::duplicated},
      {"mismatched", &books::mismatched},
      {"extra_tokens", &books::extra_tokens},
      {"leaked_blocks", &books::leaked_blocks},
      {"missed", &books::missed},
      {"faults_injected", &books::faults_injected},
      {"recovered_by_replica", &books::recovered_by_replica},
      {"recovered_by_takeover", &books::recovered_by_takeover},
      {"recovered_by_recompute", &books::recovered_by_recompute},
      {"positions_recomputed", &books::positions_recomputed},
  };
  return all;
}

books& books::operator+=(const books& o) {
  for (const auto& [name, count] : counts()) this->*count += o.*count;
  for (const auto& [kind, n] : o.faults) faults[kind] += n;
  return *this;
}

}  // namespace illm::actors::chaos
