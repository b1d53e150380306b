#pragma once
// `illm bench --url`: sends requests to an OpenAI-compatible server, streamed, with prompts of random token
// ids, and measures time to first token, inter-token latency and end-to-end latency. Open loop: a trace's
// requests, each sent at its arrival time (scaled) whether or not earlier ones have finished. Closed loop
// (`--concurrency C`): C clients, each sending its next request when its last one ends, as a service's users
// at a fixed concurrency do.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/frontend/trace_file.hpp"
#include "gpu/status.hpp"

namespace illm::actors::frontend {

/// How to replay.
struct replay_options {
  std::string url;             ///< http://host:port
  std::string model;            ///< the model id to ask for (empty: the server's, from GET /v1/models)
  std::string api_key;         ///< sent as Bearer when set
  double rate_scale = 1.0;     ///< arrivals come this many times faster
  size_t limit = 0;            ///< first N rows (0: all)
  int max_input_tokens = 0;    ///< clamp prompts (0: as in the trace)
  int max_output_tokens = 0;   ///< clamp outputs (0: as in the trace)
  int vocab_size = 32000;      ///< random prompt token ids are below this
  uint64_t seed = 1;
  double timeout_s = 600;      ///< per request
  int concurrency = 0;         ///< closed loop with this many clients (0: open loop at the trace's arrivals)
  /// Closed loop of conversations: each client runs sessions of this many turns, one after another; a turn's
  /// prompt is the last turn's prompt, its answer and the row's input tokens of new ids (0: requests stand alone).
  int turns = 0;
};

/// `count` rows of `prompt_tokens` and `output_tokens` each, for a closed loop without a trace.
std::vector<trace_row> uniform_trace(size_t count, int prompt_tokens, int output_tokens);

/// What one request did.
struct request_outcome {
  size_t index = 0;
  double scheduled_s = 0;  ///< arrival, scaled, from the start
  double sent_s = 0;
  int prompt_tokens = 0;
  int max_tokens = 0;
  int output_tokens = 0;  ///< from the usage the server reported
  int cached_tokens = 0;  ///< ... its prompt tokens found in the server's prefix cache
  std::vector<int32_t> answer_ids;  ///< the generated ids, as the stream returned them (token_ids)
  double ttft_s = -1;     ///< to the first text; -1 when none came
  double e2e_s = -1;
  std::vector<double> itl_s;  ///< between streamed pieces
  int status = 0;             ///< HTTP status (0: no answer)
  std::string error;
  bool ok() const { return status == 200 && error.empty(); }
};

/// The whole run.
struct replay_result {
  std::vector<request_outcome> requests;
  double duration_s = 0;  ///< first send to last completion
};

/// Replays; `progress(done, failed, total)` is called as requests end (from worker threads). With turns, request i
/// is turn i % turns of session i / turns.
gpu::result<replay_result> replay(const std::vector<trace_row>& trace, const replay_options& options,
                                  const std::function<void(size_t, size_t, size_t)>& progress);

/// p-th percentile (0..100) with linear interpolation, as numpy's default; NaN when empty.
double percentile(std::vector<double> values, double p);

}  // namespace illm::actors::frontend
