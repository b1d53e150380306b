#pragma once
// What the service keeps while it answers a request (service.cpp admits it and submits its choices,
// service_relay.cpp relays what the cluster says back to the client): the channel the cluster's callbacks fill, and
// each choice's answer so far.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "actors/frontend/service.hpp"

namespace illm::actors::frontend {

/// The content type of the service's JSON answers.
inline constexpr const char* json_type = "application/json";

/// What the cluster tells a request's choices, queued for the thread that answers the client.
struct service::event_channel : std::enable_shared_from_this<event_channel> {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::pair<size_t, token_event>> tokens;  ///< by choice
  std::vector<std::optional<request_finished>> ends;  ///< one per choice

  explicit event_channel(size_t choices) : ends(choices) {}

  /// The callbacks of choice `i`'s request, which fill the channel.
  request_callbacks callbacks(size_t i) {
    auto self = shared_from_this();
    request_callbacks c;
    c.on_token_event = [self, i](const token_event& token) {
      std::lock_guard lock(self->mutex);
      self->tokens.emplace_back(i, token);
      self->changed.notify_all();
    };
    c.on_finished = [self, i](const request_finished& finished) {
      std::lock_guard lock(self->mutex);
      self->ends[i] = finished;
      self->changed.notify_all();
    };
    return c;
  }

  bool all_ended() const {
    return std::all_of(ends.begin(), ends.end(), [](const auto& e) { return e.has_value(); });
  }

  /// Whether choice `i` has ended.
  bool ended(size_t i) {
    std::lock_guard lock(mutex);
    return ends[i].has_value();
  }

  /// Ends choice `i`, which never ran, as `end`.
  void end_unsubmitted(size_t i, request_finished end) {
    std::lock_guard lock(mutex);
    ends[i] = std::move(end);
    changed.notify_all();
  }

  /// Waits up to a second for tokens or the ends; returns the tokens, or none and copies the ends once all ended.
  std::deque<std::pair<size_t, token_event>> wait(std::vector<std::optional<request_finished>>& ended) {
    std::deque<std::pair<size_t, token_event>> out;
    std::unique_lock lock(mutex);
    changed.wait_for(lock, std::chrono::seconds(1), [&] { return !tokens.empty() || all_ended(); });
    out.swap(tokens);
    if (out.empty() && all_ended()) ended = ends;
    return out;
  }
};

/// One request being answered: what it asked, what it produced so far, and what the client has seen.
struct service::answer {
  completion_request r;
  std::string id;
  int64_t created = 0;
  std::chrono::steady_clock::time_point arrived;
  text_stream text;
  completion_result result;
  request_id cluster_id = 0;
  bool first_chunk = true, client_gone = false, cancelled_by_us = false;
  std::optional<std::chrono::steady_clock::time_point> last_token;
  std::vector<int32_t> unsent_ids;  ///< tokens whose text no chunk has carried yet (half a character, a stop's start)
  size_t logprobs_offset = 0;  ///< completions' text_offset of the first unsent token
  std::optional<tool_call_parser> calls;  ///< with tools: splits the text into content and calls
  tool_call_parser::piece rest;           ///< what the end released (the last chunk's)
  double cumulative_logprob = 0;          ///< of the tokens sampled (best_of ranks the choices by it)
  /// A choice after the first, held until the first's prompt is computed: then it runs where the first does, on the
  /// prompt's cached blocks (read by reference, not computed again).
  std::optional<generate_params> held;
};

}  // namespace illm::actors::frontend
