#pragma once
// The HTTP front end of a cluster: the OpenAI-compatible API (completions and chat completions, whole
// or streamed as server-sent events), models, health, Prometheus metrics, the cluster's status (GET
// /v1/cluster and the page GET /status), with optional API keys
// and limits on body size, prompt length, max_tokens and requests in flight. A client that goes away
// mid-stream has its request cancelled (and its blocks freed).

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/cluster/request_router.hpp"
#include "actors/frontend/cluster_feed.hpp"
#include "actors/frontend/http_server.hpp"
#include "actors/frontend/openai_api.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "gpu/grammar/forward.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::actors::frontend {

/// How the service behaves.
struct service_options {
  std::string model_name;             ///< the id clients must ask for
  std::vector<int32_t> end_ids{gpu::token_bos, gpu::token_eos};  ///< the model's: a generation stops at them
  int max_model_len = 0;  ///< the longest context (prompt and output) the model serves, shown by /v1/models (0: none)
  std::shared_ptr<const jinja::chat_template> chat;  ///< the model's chat template; none: messages joined by newlines
  std::vector<std::string> api_keys;  ///< empty: no key needed
  /// Each API key (each Authorization header) its own prefix-cache namespace: one tenant's requests never read
  /// another's cached blocks, so timing cannot tell one what another's prompts start with.
  bool prefix_cache_per_key = false;
  api_limits limits;
  int max_requests_in_flight = 64;  ///< beyond: 429
  int http_threads = 80;
  http_limits http;  ///< connections, deadlines and head sizes of the HTTP server
  /// The grammars of structured outputs (response_format), compiled here to refuse a schema before it runs (none:
  /// response_format json_object and json_schema are refused).
  std::shared_ptr<gpu::grammar::constraint_cache> constraints;
};

/// The front end; routes requests to a running cluster (embedded or of processes).
class service {
 public:
  service(request_router& router, std::shared_ptr<const gpu::tokenizer> vocab, std::shared_ptr<metrics::registry> registry,
          std::shared_ptr<metrics::runtime_metrics> metrics, service_options options);
  ~service();

  /// Listens on host:port.
  gpu::status start(const std::string& host, uint16_t port);
  uint16_t port() const { return http_.port(); }

  /// Stops taking requests (503), lets the running ones finish for up to `grace`, cancels the rest,
  /// then stops listening.
  void drain(std::chrono::milliseconds grace);

  /// Requests being served now.
  int in_flight() const { return in_flight_.load(); }

 private:
  struct answer;
  struct event_channel;
  /// Serves one completion or chat completion request, whole or streamed.
  void generate(endpoint kind, const http_request& req, http_reply& reply);
  /// The request, when it may be served on `view`; otherwise refuses it with its reason (and nullopt).
  std::optional<completion_request> accept(endpoint kind, const http_request& req, http_reply& reply,
                                           const cluster_view& view);
  /// Submits each choice of `r` (best_of of them) to the cluster, its events to `channel`: the first at once, the
  /// others too unless they share its prompt's cached blocks (shares_prompt): those are held until it has a token.
  std::vector<answer> submit_choices(const completion_request& r, const std::string& id, const cluster_view& view,
                                     event_channel& channel, const std::string& scope);
  /// Whether a choice after the first reads the first's prompt by reference: the instances of `view` cache prefixes,
  /// the prompt has a full block, and its log probabilities are not asked for (they compute every position).
  static bool shares_prompt(const generate_params& p, const cluster_view& view);
  /// Submits the held choices: to instance `first_at`, where the first choice computed the prompt, when `view` lists
  /// it (they read its cached blocks there), otherwise wherever the router sends them.
  void release_held(std::vector<answer>& answers, event_channel& channel, const cluster_view& view,
                    std::optional<instance_id> first_at);
  /// Relays the choices' tokens until every one ended (a client gone cancels them all), submitting the held choices
  /// once the first has its first token (or ended); their ends.
  std::vector<std::optional<request_finished>> relay_until_ended(std::vector<answer>& answers, event_channel& channel,
                                                                 bool gone, http_reply& reply, const cluster_view& view);
  /// A token of `a`: metrics, its text (and log probabilities) to a streaming client, and a stop sequence's cancel.
  void relay_token(answer& a, const token_event& token, http_reply& reply);
  /// The log probabilities of the tokens a chunk of `a` carries now (its unsent ids); none when not asked.
  std::optional<logprobs_part> unsent_logprobs(const answer& a) const;
  /// The first token of `a` came: keeps the prompt's log probabilities (echo's or prompt_logprobs), streams an echoed
  /// prompt's text.
  void echo_prompt(answer& a, const token_event& first, http_reply& reply);
  /// The token before the first of `a`'s unsent ids: the last sent, or the prompt's last.
  static int32_t token_before_unsent(const answer& a);
  /// The unsent ids of `a` went out in a chunk.
  void mark_sent(answer& a);
  /// Passes released text of `a` through its tool-call parser (when it has tools); a stream gets the content and
  /// the calls completed.
  tool_call_parser::piece split_calls(answer& a, const std::string& text, bool last);
  /// The end of `a`: the text held back, the finish reason, metrics.
  void settle(answer& a, const request_finished& end);
  /// The whole response of the choices (the best n of best_of), or the stream's last chunks, usage and [DONE].
  void respond(std::vector<answer>& answers, const std::vector<std::optional<request_finished>>& ends,
               http_reply& reply);
  bool authorized(const http_request& req, http_reply& reply);
  /// The prefix-cache namespace of a request (service_options::prefix_cache_per_key; empty: the shared one).
  std::string cache_scope(const http_request& req) const;
  /// The answer of a helper endpoint (/tokenize, /detokenize): its body, or its error.
  void answer_helper(http_reply& reply, const std::variant<std::string, api_error>& answer);
  /// GET /v1/cluster: the cluster now, or with ?seq=N the snapshot N if it is still kept.
  void cluster_snapshot(const http_request& req, http_reply& reply);
  void refuse(http_reply& reply, const api_error& e, const std::string& reason);

  request_router& router_;
  std::shared_ptr<const gpu::tokenizer> vocab_;
  std::shared_ptr<metrics::registry> registry_;
  std::shared_ptr<metrics::runtime_metrics> metrics_;
  service_options options_;
  http_server http_;
  std::atomic<uint64_t> tokens_out_{0};  ///< output tokens sent so far (the status page shows their rate)
  cluster_feed feed_;
  std::atomic<int> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  const uint64_t call_id_salt_;  ///< random per process: tool call ids differ across restarts
  const int64_t started_ = 0;
};

}  // namespace illm::actors::frontend
