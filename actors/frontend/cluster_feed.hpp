#pragma once
// The cluster as GET /v1/cluster shows it, and the page at GET /status that draws it: snapshots of the
// gManager's cluster_status as JSON, each distinct one numbered by a seq that grows with every change, the
// latest of them kept so that a reader can fetch again the very snapshot a page showed (GET /v1/cluster?seq=N).

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "actors/cluster/request_router.hpp"

namespace illm::actors::frontend {

/// Numbered snapshots of one cluster.
class cluster_feed {
 public:
  /// `tokens_generated`: the output tokens the front end has sent so far (the page shows their rate).
  cluster_feed(request_router& router, std::function<uint64_t()> tokens_generated);

  /// The cluster now, as JSON: a new seq when it changed since the last snapshot; none when the gManager does
  /// not answer.
  std::optional<std::string> latest();
  /// Snapshot `seq`, while it is among the latest kept ones.
  std::optional<std::string> at(uint64_t seq) const;

  static constexpr size_t max_kept = 256;  ///< snapshots kept for at()

 private:
  using clock = std::chrono::steady_clock;
  /// Output tokens per second over the last few seconds of samples.
  double token_rate(clock::time_point now, uint64_t tokens);

  request_router& router_;
  std::function<uint64_t()> tokens_generated_;
  mutable std::mutex mutex_;
  uint64_t seq_ = 0;
  std::pair<uint64_t, uint64_t> last_key_{0, 0};  ///< the last snapshot's (epoch, version)
  std::deque<std::pair<uint64_t, std::string>> kept_;  ///< (seq, JSON), oldest first
  std::deque<std::pair<clock::time_point, uint64_t>> token_samples_;
};

/// The page at GET /status: actors/frontend/status_page.html, built into the program (cmake/embed_text.cmake). One
/// HTML document with its style and script inline (nothing fetched but /v1/cluster, twice a second): each instance
/// with its pool (owned, hosted for others, promised, free) and state, the running requests as lines from their
/// owner to the holders of their blocks, and the moves as they are reported. Every drawn value is also in a data-
/// attribute, which the browser test reads.
const std::string& status_page_html();

}  // namespace illm::actors::frontend
