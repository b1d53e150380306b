#include "actors/frontend/service.hpp"

#include "actors/frontend/logprobs_json.hpp"
#include "actors/frontend/service_answer.hpp"
#include "gpu/grammar/constraint_cache.hpp"

#include <condition_variable>
#include <charconv>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "gpu/backend.hpp"
#include "gpu/block_key.hpp"

namespace illm::actors::frontend {

namespace {

using clock = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// 64 bits from the operating system's randomness (through OpenSSL's generator, seeded by it).
uint64_t os_random_u64() {
  uint64_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1)
    v = uint64_t(std::random_device{}()) << 32 ^ std::random_device{}();
  return v;
}

}  // namespace


namespace {

/// Counts a request in flight while it lives.
class in_flight_guard {
 public:
  explicit in_flight_guard(std::atomic<int>& n) : n_(n) { ++n_; }
  ~in_flight_guard() { --n_; }

 private:
  std::atomic<int>& n_;
};

}  // namespace

service::service(request_router& router, std::shared_ptr<const gpu::tokenizer> vocab,
                 std::shared_ptr<metrics::registry> registry, std::shared_ptr<metrics::runtime_metrics> metrics,
                 service_options options)
    : router_(router),
      vocab_(std::move(vocab)),
      registry_(std::move(registry)),
      metrics_(std::move(metrics)),
      options_(std::move(options)),
      feed_(router_, [this] { return tokens_out_.load(std::memory_order_relaxed); }),
      call_id_salt_(os_random_u64()),
      started_(unix_now()) {
  if (metrics_)
    http_.on_refusal([m = metrics_](const char* reason) { m->http_connections_refused.with({reason}).add(); });
  http_.route("/health", {"GET"}, [this](const http_request&, http_reply& reply) {
    const serving_capacity c = capacity_of(router_.view());
    const bool ok = !draining_ && c.instances >= std::max(1, router_.instances_needed());
    reply.send(ok ? 200 : 503, json_type,
               fmt::format(R"({{"status":"{}","instances":{}}})", ok ? "ok" : "unavailable", c.instances));
  });
  http_.route("/metrics", {"GET"}, [this](const http_request&, http_reply& reply) {
    reply.send(200, "text/plain; version=0.0.4; charset=utf-8", registry_->expose());
  });
  http_.route("/status", {"GET"}, [](const http_request&, http_reply& reply) {
    reply.send(200, "text/html; charset=utf-8", status_page_html());
  });
  http_.route("/v1/cluster", {"GET"}, [this](const http_request& req, http_reply& reply) { cluster_snapshot(req, reply); });
  http_.route("/v1/models", {"GET"}, [this](const http_request& req, http_reply& reply) {
    if (!authorized(req, reply)) return;
    reply.send(200, json_type, models_body(options_.model_name, started_, options_.max_model_len));
  });
  http_.route("/tokenize", {"POST"}, [this](const http_request& req, http_reply& reply) {
    if (!authorized(req, reply)) return;
    answer_helper(reply, tokenize_body(req.body, *vocab_, options_.chat.get(), options_.limits, options_.model_name));
  });
  http_.route("/detokenize", {"POST"}, [this](const http_request& req, http_reply& reply) {
    if (!authorized(req, reply)) return;
    answer_helper(reply, detokenize_body(req.body, *vocab_, options_.limits, options_.model_name));
  });
  // vLLM's name: empties the prefix caches (an operator's reset).
  http_.route("/reset_prefix_cache", {"POST"}, [this](const http_request& req, http_reply& reply) {
    if (!authorized(req, reply)) return;
    if (const std::optional<uint64_t> freed = router_.reset_prefix_cache())
      return reply.send(200, json_type, fmt::format(R"({{"status":"ok","blocks_freed":{}}})", *freed));
    reply.send(501, json_type,
               error_body(make_error(501, "a front end of a cluster of processes cannot reset its instances' prefix "
                                          "caches; restart them",
                                     "server_error")));
  });
  http_.route("/v1/completions", {"POST"},
              [this](const http_request& req, http_reply& reply) { generate(endpoint::completions, req, reply); });
  http_.route("/v1/chat/completions", {"POST"},
              [this](const http_request& req, http_reply& reply) { generate(endpoint::chat_completions, req, reply); });
}

service::~service() {
  http_.stop();
}

gpu::status service::start(const std::string& host, uint16_t port) {
  // A thread for every request that may run, and some: the in-flight limit answers the next ones (429) at once.
  const int threads = std::max(options_.http_threads, options_.max_requests_in_flight + 16);
  return http_.start(host, port, threads, options_.limits.max_body_bytes, options_.http);
}

void service::answer_helper(http_reply& reply, const std::variant<std::string, api_error>& answer) {
  if (const auto* body = std::get_if<std::string>(&answer)) return reply.send(200, json_type, *body);
  const api_error& e = std::get<api_error>(answer);
  reply.send(e.status, json_type, error_body(e));
}

void service::cluster_snapshot(const http_request& req, http_reply& reply) {
  const std::optional<std::string> wanted = req.query_value("seq");
  if (!wanted) {
    std::optional<std::string> now = feed_.latest();
    if (now) return reply.send(200, json_type, *now);
    return reply.send(503, json_type, error_body(make_error(503, "the gManager does not answer", "unavailable", "", "")));
  }
  uint64_t seq = 0;
  const char* end = wanted->data() + wanted->size();
  if (wanted->empty() || std::from_chars(wanted->data(), end, seq).ptr != end)
    return reply.send(400, json_type, error_body(make_error(400, "seq must be a number", "invalid_request_error", "seq", "")));
  if (std::optional<std::string> kept = feed_.at(seq)) return reply.send(200, json_type, *kept);
  reply.send(404, json_type,
             error_body(make_error(404, "snapshot " + *wanted + " is not kept (only the latest " +
                                            std::to_string(cluster_feed::max_kept) + " are)",
                                   "not_found_error", "seq", "")));
}

void service::refuse(http_reply& reply, const api_error& e, const std::string& reason) {
  if (metrics_) metrics_->request_refused.with({reason}).add();
  // A client told it is too busy retries after a second (OpenAI's SDKs read Retry-After).
  std::vector<http_header> headers;
  if (e.status == 429 || e.status == 503) headers.push_back({"Retry-After", "1"});
  reply.send(e.status, json_type, error_body(e), headers);
}

namespace {

/// Whether two secrets are equal, in a time that depends on neither's contents: their SHA-256 digests are
/// compared with CRYPTO_memcmp (a wrong key's time says nothing of how much of it was right).
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(a.data()), a.size(), da);
  SHA256(reinterpret_cast<const unsigned char*>(b.data()), b.size(), db);
  return CRYPTO_memcmp(da, db, sizeof da) == 0;
}

}  // namespace

bool service::authorized(const http_request& req, http_reply& reply) {
  if (options_.api_keys.empty()) return true;
  auto it = req.headers.find("authorization");
  const std::string given = it == req.headers.end() ? "" : it->second;
  bool accepted = false;
  for (const std::string& key : options_.api_keys)  // every key compared: the time says not which one matched
    accepted = same_secret(given, "Bearer " + key) || accepted;
  if (accepted) return true;
  refuse(reply,
         make_error(401, given.empty() ? "missing API key (Authorization: Bearer <key>)" : "incorrect API key",
                    "invalid_request_error", "", "invalid_api_key"),
         "unauthorized");
  return false;
}

std::optional<completion_request> service::accept(endpoint kind, const http_request& req, http_reply& reply,
                                                  const cluster_view& view) {
  if (draining_)
    return refuse(reply, make_error(503, "the server is shutting down", "server_error"), "draining"), std::nullopt;
  if (!authorized(req, reply)) return std::nullopt;
  if (req.body_too_large)
    return refuse(
               reply,
               make_error(413, fmt::format("the request body is larger than {} bytes", options_.limits.max_body_bytes)),
               "too_large"),
           std::nullopt;
  auto parsed = parse_request(kind, req.body, *vocab_, options_.limits, options_.model_name, options_.chat.get());
  if (auto* e = std::get_if<api_error>(&parsed)) return refuse(reply, *e, "invalid"), std::nullopt;
  completion_request r = std::get<completion_request>(std::move(parsed));
  if (!r.constraint.empty()) {  // the schema compiles here before it runs: the instances find it cached
    auto made = options_.constraints ? options_.constraints->get(r.constraint)
                                     : gpu::result<std::shared_ptr<const gpu::grammar::constraint>>(
                                           gpu::status{gpu::status_code::unsupported, "structured outputs are off"});
    if (!made.is_ok())
      return refuse(reply, make_error(400, made.error().message(), "invalid_request_error",
                                      r.tool_call_required ? "tools" : "response_format"),
                    "invalid"),
             std::nullopt;
  }
  const serving_capacity capacity = capacity_of(view);
  if (capacity.instances == 0)
    return refuse(reply, make_error(503, "no instance of the cluster takes requests now; retry later", "server_error"),
                  "unavailable"),
           std::nullopt;
  if (r.prompt_ids.size() + size_t(r.max_tokens) > capacity.kv_tokens)
    return refuse(reply,
                  make_error(400,
                             fmt::format("prompt and max_tokens need {} tokens of KV; the cluster holds {}",
                                         r.prompt_ids.size() + size_t(r.max_tokens), capacity.kv_tokens),
                             "invalid_request_error", "max_tokens", "context_length_exceeded"),
                  "too_long"),
           std::nullopt;
  return r;
}


namespace {

/// The request as the cluster runs it: a client's stop_token_ids end it whatever ignore_eos says, the model's
/// end ids unless ignore_eos.
generate_params cluster_params(const completion_request& r, uint64_t seed, const std::vector<int32_t>& end_ids) {
  generate_params p{r.prompt_ids, r.max_tokens, 0.0f, 1.0f, seed, false, r.ignore_eos ? std::vector<int32_t>{} : end_ids};
  p.stop_ids.insert(p.stop_ids.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  set_sampling(p, r.sampling);
  p.constraint = r.constraint;
  if (r.echo && r.sampling.logprobs >= 0) p.prompt_logprobs = r.sampling.logprobs;
  if (r.prompt_logprobs >= 0) p.prompt_logprobs = r.prompt_logprobs;  // the same N with echo (openai_api checks)
  return p;
}

}  // namespace

void service::generate(endpoint kind, const http_request& req, http_reply& reply) {
  const cluster_view view = router_.view();  // one look: the limits and the routing
  std::optional<completion_request> accepted = accept(kind, req, reply, view);
  if (!accepted) return;
  in_flight_guard guard(in_flight_);
  if (in_flight_.load() > options_.max_requests_in_flight)
    return refuse(
        reply,
        make_error(429, "too many requests in flight; retry later", "rate_limit_error", "", "rate_limit_exceeded"),
        "busy");
  const std::string id = fmt::format("{}-{}", kind == endpoint::completions ? "cmpl" : "chatcmpl", next_id_++);
  const completion_request& r = *accepted;
  auto channel = std::make_shared<event_channel>(size_t(r.best_of));
  std::vector<answer> answers = submit_choices(r, id, view, *channel, cache_scope(req));
  const bool gone = r.stream && !reply.start_stream("text/event-stream");
  const std::vector<std::optional<request_finished>> ends = relay_until_ended(answers, *channel, gone, reply, view);
  for (size_t i = 0; i < answers.size(); ++i) settle(answers[i], *ends[i]);
  respond(answers, ends, reply);
}

std::string service::cache_scope(const http_request& req) const {
  if (!options_.prefix_cache_per_key) return {};
  auto it = req.headers.find("authorization");
  const std::string given = it == req.headers.end() ? "" : it->second;
  unsigned char digest[SHA256_DIGEST_LENGTH];  // the key itself never leaves the front end
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), digest);
  std::string hex;
  for (size_t i = 0; i < 16; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

std::vector<service::answer> service::submit_choices(const completion_request& r, const std::string& id,
                                                     const cluster_view& view, event_channel& channel,
                                                     const std::string& scope) {
  const uint64_t seed = r.seed ? *r.seed : os_random_u64();  // unseeded: unpredictable, across restarts too
  std::vector<answer> answers;
  for (int i = 0; i < r.best_of; ++i) {  // a choice each, with a sampling stream of its own
    completion_request choice = r;
    choice.choice = i;
    answers.push_back({choice, id, unix_now(), clock::now(), text_stream(*vocab_, r.prompt_ids.back(), r.stop), {}});
    answer& a = answers.back();
    a.result.prompt_tokens = int(r.prompt_ids.size());
    if (r.call_syntax != tool_syntax::none)
      a.calls.emplace(r.call_syntax, r.tool_names,
                      fmt::format("call_{:016x}_{}_", call_id_salt_ ^ std::hash<std::string>{}(id), i),
                      r.parallel_tool_calls ? SIZE_MAX : 1);
    generate_params params = cluster_params(r, seed + uint64_t(i), options_.end_ids);
    params.cache_scope = gpu::cache_namespace(scope, r.cache_salt);
    if (r.best_of > r.n) params.logprobs = std::max(params.logprobs, 0);  // the choices are ranked by them
    if (i > 0 && shares_prompt(params, view))
      a.held = std::move(params);
    else
      a.cluster_id = router_.submit(params, channel.callbacks(size_t(i)), view);
    if (metrics_) metrics_->prompt_tokens.with().add(double(r.prompt_ids.size()));
  }
  return answers;
}

bool service::shares_prompt(const generate_params& p, const cluster_view& view) {
  const bool caches = std::any_of(view.instances.begin(), view.instances.end(),
                                  [](const instance_view& i) { return i.cache_root != gpu::block_key{}; });
  return caches && p.prompt.size() > size_t(gpu::kv_block_tokens) && p.prompt_logprobs < 0;
}

void service::release_held(std::vector<answer>& answers, event_channel& channel, const cluster_view& view,
                           std::optional<instance_id> first_at) {
  cluster_view there = view;
  if (first_at) std::erase_if(there.instances, [&](const instance_view& i) { return i.inst_id != *first_at; });
  if (there.instances.empty()) there = view;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (!answers[i].held) continue;
    answers[i].cluster_id = router_.submit(*answers[i].held, channel.callbacks(i), there);
    answers[i].held.reset();
  }
}

void service::drain(std::chrono::milliseconds grace) {
  draining_ = true;
  const auto deadline = clock::now() + grace;
  while (in_flight_.load() > 0 && clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  router_.cancel_all();
  while (in_flight_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http_.stop();
}

}  // namespace illm::actors::frontend
