#include "actors/frontend/trace_replay.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

namespace illm::actors::frontend {

namespace {

using clock = std::chrono::steady_clock;
using json = nlohmann::json;

double seconds(clock::time_point from, clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

struct endpoint_address {
  std::string host;
  int port = 80;
};

gpu::result<endpoint_address> parse_url(const std::string& url) {
  const std::string prefix = "http://";
  if (url.rfind(prefix, 0) != 0)
    return gpu::status{gpu::status_code::invalid_argument, fmt::format("--url must start with http:// (got {})", url)};
  std::string rest = url.substr(prefix.size());
  rest = rest.substr(0, rest.find('/'));
  endpoint_address a;
  const auto colon = rest.rfind(':');
  a.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (colon != std::string::npos) {
    try {
      a.port = std::stoi(rest.substr(colon + 1));
    } catch (...) {
      return gpu::status{gpu::status_code::invalid_argument, fmt::format("bad port in --url {}", url)};
    }
  }
  if (a.host.empty() || a.port <= 0 || a.port > 65535)
    return gpu::status{gpu::status_code::invalid_argument, fmt::format("bad --url {}", url)};
  return a;
}

std::string request_body(const replay_options& o, const std::vector<int32_t>& prompt, int max_tokens) {
  return json{{"model", o.model},
              {"prompt", prompt},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}},
              {"ignore_eos", true},
              {"return_token_ids", true}}
      .dump();
}

/// Appends `n` random ids above the byte tokens to `prompt`.
void add_random_ids(std::vector<int32_t>& prompt, size_t n, std::mt19937_64& rng, int vocab_size) {
  for (size_t k = 0; k < n; ++k) prompt.push_back(int32_t(259 + rng() % uint64_t(vocab_size - 259)));
}

/// A blocking HTTP/1.1 client connection over a plain socket: it hands out response bytes as soon as
/// they arrive (so that streamed events are timed when they come, not when a buffer fills).
class http_client {
 public:
  ~http_client() {
    if (fd_ >= 0) ::close(fd_);
  }
  gpu::status connect(const endpoint_address& a, double timeout_s) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(a.host.c_str(), std::to_string(a.port).c_str(), &hints, &found) != 0 || !found)
      return {gpu::status_code::io_error, fmt::format("cannot resolve {}", a.host)};
    fd_ = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    const bool ok = fd_ >= 0 && ::connect(fd_, found->ai_addr, found->ai_addrlen) == 0;
    freeaddrinfo(found);
    if (!ok) return {gpu::status_code::io_error, fmt::format("cannot connect to {}:{}", a.host, a.port)};
    timeval tv{long(timeout_s), 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return gpu::status::ok();
  }
  bool send_all(const std::string& data) {
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += size_t(n);
    }
    return true;
  }
  /// Reads what has arrived (at least one byte); empty at the end or on a timeout.
  std::string receive() {
    char buffer[16384];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    return n > 0 ? std::string(buffer, size_t(n)) : std::string();
  }

 private:
  int fd_ = -1;
};

/// The body of a chunked or plain response, fed as bytes arrive; calls `on_data` with body bytes.
class body_decoder {
 public:
  explicit body_decoder(bool chunked) : chunked_(chunked) {}
  /// Adds raw bytes; returns false once the body is complete.
  template <class F>
  bool feed(const std::string& raw, F&& on_data) {
    if (!chunked_) {
      on_data(raw);
      return true;
    }
    pending_ += raw;
    for (;;) {
      if (chunk_left_ == 0) {
        const auto eol = pending_.find("\r\n");
        if (eol == std::string::npos) return true;
        const std::string size_line = pending_.substr(0, eol);
        pending_.erase(0, eol + 2);
        if (size_line.empty()) continue;  // the CRLF after a chunk
        chunk_left_ = std::strtoull(size_line.c_str(), nullptr, 16);
        if (chunk_left_ == 0) return false;  // the last chunk
      }
      if (pending_.empty()) return true;
      const size_t take = std::min<size_t>(chunk_left_, pending_.size());
      on_data(pending_.substr(0, take));
      pending_.erase(0, take);
      chunk_left_ -= take;
    }
  }

 private:
  bool chunked_;
  std::string pending_;
  uint64_t chunk_left_ = 0;
};

/// Handles the server-sent events of a streamed body; returns true at [DONE].
bool on_events(std::string& buffer, clock::time_point sent, std::optional<clock::time_point>& last_piece,
               request_outcome& out) {
  for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
    const std::string event = buffer.substr(0, end);
    if (event.rfind("data: ", 0) != 0) continue;  // comments (keep-alive)
    const std::string data = event.substr(6);
    if (data == "[DONE]") return true;
    const json j = gpu::parse_bounded_or_discarded(data, gpu::json_depth_outside_requests);
    if (j.is_discarded()) continue;
    if (j.contains("error")) out.error = j["error"].value("message", "error event");
    if (j.contains("usage") && j["usage"].is_object()) {
      out.output_tokens = j["usage"].value("completion_tokens", 0);
      const json details = j["usage"].value("prompt_tokens_details", json::object());
      out.cached_tokens = details.is_object() ? details.value("cached_tokens", 0) : 0;
    }
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const json& choice = j["choices"][0];
    if (choice.contains("token_ids") && choice["token_ids"].is_array())
      for (const json& id : choice["token_ids"])
        if (id.is_number_integer()) out.answer_ids.push_back(id.get<int32_t>());
    if (choice.value("text", "").empty()) continue;
    const auto now = clock::now();
    if (last_piece)
      out.itl_s.push_back(seconds(*last_piece, now));
    else
      out.ttft_s = seconds(sent, now);
    last_piece = now;
  }
  return false;
}

void run_one(const endpoint_address& address, const replay_options& o, const std::string& body, request_outcome& out,
             clock::time_point start) {
  const auto sent = clock::now();
  out.sent_s = seconds(start, sent);
  http_client client;
  if (gpu::status s = client.connect(address, o.timeout_s); !s.is_ok()) {
    out.error = s.message();
    return;
  }
  const std::string auth = o.api_key.empty() ? "" : "Authorization: Bearer " + o.api_key + "\r\n";
  if (!client.send_all(fmt::format("POST /v1/completions HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n{}"
                                   "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
                                   address.host, address.port, auth, body.size(), body))) {
    out.error = "the server closed the connection";
    return;
  }
  std::string head;  // status line and headers
  size_t head_end = std::string::npos;
  while (head_end == std::string::npos) {
    const std::string more = client.receive();
    if (more.empty()) {
      out.error = "no response";
      return;
    }
    head += more;
    head_end = head.find("\r\n\r\n");
  }
  out.status = std::atoi(head.c_str() + std::min<size_t>(9, head.size()));
  std::string lower_head = head.substr(0, head_end);
  std::transform(lower_head.begin(), lower_head.end(), lower_head.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  body_decoder decoder(lower_head.find("transfer-encoding: chunked") != std::string::npos);
  std::string text, events;
  std::optional<clock::time_point> last_piece;
  bool done = false;
  auto consume = [&](const std::string& data) {
    if (out.status != 200) return void(text += data);
    events += data;
    done = done || on_events(events, sent, last_piece, out);
  };
  bool more_body = decoder.feed(head.substr(head_end + 4), consume);
  while (more_body && !done) {
    const std::string raw = client.receive();
    if (raw.empty()) break;
    more_body = decoder.feed(raw, consume);
  }
  if (out.status != 200) {
    const json j = gpu::parse_bounded_or_discarded(text, gpu::json_depth_outside_requests);
    out.error = !j.is_discarded() && j.contains("error") ? j["error"].value("message", text) : text;
  } else if (!done && out.error.empty()) {
    out.error = "the stream ended before [DONE]";
  }
  out.e2e_s = seconds(sent, clock::now());
}

/// The model id the server at `address` serves: the first of GET /v1/models.
gpu::result<std::string> served_model_id(const endpoint_address& address, const replay_options& o) {
  auto failed = [&](const std::string& why) {
    return gpu::status{gpu::status_code::io_error, fmt::format("asking {} for its model (GET /v1/models): {} "
                                                               "(--model names one)", o.url, why)};
  };
  http_client client;
  if (gpu::status s = client.connect(address, o.timeout_s); !s.is_ok()) return failed(s.message());
  const std::string auth = o.api_key.empty() ? "" : "Authorization: Bearer " + o.api_key + "\r\n";
  if (!client.send_all(fmt::format("GET /v1/models HTTP/1.1\r\nHost: {}:{}\r\n{}Connection: close\r\n\r\n",
                                   address.host, address.port, auth)))
    return failed("the server closed the connection");
  std::string all;
  for (std::string more; !(more = client.receive()).empty();) all += more;
  const size_t head_end = all.find("\r\n\r\n");
  if (head_end == std::string::npos) return failed("no response");
  std::string lower_head = all.substr(0, head_end);
  std::transform(lower_head.begin(), lower_head.end(), lower_head.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  std::string body;
  body_decoder(lower_head.find("transfer-encoding: chunked") != std::string::npos)
      .feed(all.substr(head_end + 4), [&](const std::string& data) { body += data; });
  const json j = gpu::parse_bounded_or_discarded(body, gpu::json_depth_outside_requests);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    return failed("no model id in the answer: " + body.substr(0, 200));
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace

gpu::result<replay_result> replay(const std::vector<trace_row>& trace, const replay_options& o,
                                  const std::function<void(size_t, size_t, size_t)>& progress) {
  auto address = parse_url(o.url);
  if (!address.is_ok()) return address.error();
  if (!(o.rate_scale > 0)) return gpu::status{gpu::status_code::invalid_argument, "--rate-scale must be positive"};
  const size_t n = o.limit ? std::min(o.limit, trace.size()) : trace.size();
  if (o.concurrency < 0) return gpu::status{gpu::status_code::invalid_argument, "--concurrency must be positive"};
  replay_options asked = o;
  if (asked.model.empty()) {
    auto id = served_model_id(address.value(), o);
    if (!id.is_ok()) return id.error();
    asked.model = id.value();
  }
  if (o.turns < 0 || (o.turns > 0 && o.concurrency <= 0))
    return gpu::status{gpu::status_code::invalid_argument, "--turns needs --concurrency (a closed loop of sessions)"};
  replay_result result;
  result.requests.resize(n);
  std::mt19937_64 rng(o.seed);
  std::vector<std::string> bodies(n);
  for (size_t i = 0; i < n; ++i) {
    request_outcome& r = result.requests[i];
    r.index = i;
    r.scheduled_s = o.concurrency > 0 ? 0.0 : (trace[i].arrival_s - trace[0].arrival_s) / o.rate_scale;
    r.prompt_tokens = std::max(1, o.max_input_tokens ? std::min(trace[i].input_tokens, o.max_input_tokens)
                                                     : trace[i].input_tokens);
    r.max_tokens = std::max(1, o.max_output_tokens ? std::min(trace[i].output_tokens, o.max_output_tokens)
                                                   : trace[i].output_tokens);
    if (o.turns > 0) continue;  // a session's prompts grow with its answers: made as it goes
    std::vector<int32_t> prompt{1};  // BOS, then random ids above the byte tokens
    add_random_ids(prompt, size_t(r.prompt_tokens - 1), rng, o.vocab_size);
    bodies[i] = request_body(asked, prompt, r.max_tokens);
  }
  std::atomic<size_t> done{0}, failed{0}, next{0};
  const auto start = clock::now();
  auto send = [&](size_t i) {
    run_one(address.value(), o, bodies[i], result.requests[i], start);
    failed += !result.requests[i].ok();
    const size_t d = ++done;
    if (progress) progress(d, failed.load(), n);
  };
  // Session s: its turns one after another, each prompt the conversation so far and the turn's new ids.
  auto converse = [&](size_t s) {
    std::mt19937_64 session_rng(o.seed + s);
    std::vector<int32_t> conversation{1};
    bool broken = false;
    for (size_t i = s * size_t(o.turns); i < std::min(n, (s + 1) * size_t(o.turns)); ++i) {
      request_outcome& r = result.requests[i];
      add_random_ids(conversation, size_t(r.prompt_tokens) - (conversation.size() == 1), session_rng, o.vocab_size);
      r.prompt_tokens = int(conversation.size());
      if (broken) {
        r.error = "an earlier turn of its session failed";
        failed += 1;
        if (progress) progress(++done, failed.load(), n);
        continue;
      }
      bodies[i] = request_body(asked, conversation, r.max_tokens);
      send(i);
      broken = !r.ok();
      conversation.insert(conversation.end(), r.answer_ids.begin(), r.answer_ids.end());
    }
  };
  std::vector<std::thread> workers;
  if (o.turns > 0) {  // closed loop of sessions: each client runs its next session when its last one ends
    const size_t sessions = (n + size_t(o.turns) - 1) / size_t(o.turns);
    for (size_t c = 0; c < std::min(sessions, size_t(o.concurrency)); ++c)
      workers.emplace_back([&] {
        for (size_t s; (s = next++) < sessions;) converse(s);
      });
  } else if (o.concurrency > 0) {  // closed loop: each client sends its next request when its last one ends
    for (size_t c = 0; c < std::min(n, size_t(o.concurrency)); ++c)
      workers.emplace_back([&] {
        for (size_t i; (i = next++) < n;) send(i);
      });
  } else {
    for (size_t i = 0; i < n; ++i) {  // open loop: send at the arrival time, whatever is still running
      std::this_thread::sleep_until(start + std::chrono::duration_cast<clock::duration>(
                                                std::chrono::duration<double>(result.requests[i].scheduled_s)));
      workers.emplace_back([&, i] { send(i); });
    }
  }
  for (auto& w : workers) w.join();
  for (const auto& r : result.requests)
    result.duration_s = std::max(result.duration_s, r.sent_s + std::max(0.0, r.e2e_s));
  return result;
}

std::vector<trace_row> uniform_trace(size_t count, int prompt_tokens, int output_tokens) {
  return std::vector<trace_row>(count, trace_row{0.0, prompt_tokens, output_tokens});
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * double(values.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - double(lo));
}

}  // namespace illm::actors::frontend
