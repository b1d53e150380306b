// Relaying a request's choices from the cluster to the client: each token's text as it comes (server-sent events,
// or kept for the whole answer), its log probabilities, tool calls split from the text, the choices held until the
// first's prompt is computed, and the answer at the end (best_of's ranking, usage).
#include <fmt/format.h>

#include "actors/frontend/logprobs_json.hpp"
#include "actors/frontend/service_answer.hpp"

namespace illm::actors::frontend {

namespace {

using clock = std::chrono::steady_clock;

/// The prompt's log probabilities a first token event carries (N + 1 per position from the second), per prompt
/// position (the first's empty).
std::vector<gpu::token_logprobs> prompt_logprobs_of(const token_event& e, size_t prompt_tokens, int alternatives) {
  std::vector<gpu::token_logprobs> out(prompt_tokens);
  const size_t stride = size_t(alternatives) + 1;
  for (size_t p = 1; p < prompt_tokens && p * stride <= e.prompt_logprobs.size(); ++p) {
    const token_logprob* at = e.prompt_logprobs.data() + (p - 1) * stride;
    out[p].logprob = at[0].logprob;
    for (size_t k = 1; k < stride; ++k) {
      out[p].top_ids.push_back(at[k].token);
      out[p].top_logprobs.push_back(at[k].logprob);
    }
  }
  return out;
}

/// A token event's log probabilities as the sampler gave them.
gpu::token_logprobs logprobs_of(const token_event& e) {
  gpu::token_logprobs out;
  if (e.logprobs.empty()) return out;
  out.logprob = e.logprobs.front().logprob;
  for (size_t i = 1; i < e.logprobs.size(); ++i) {
    out.top_ids.push_back(e.logprobs[i].token);
    out.top_logprobs.push_back(e.logprobs[i].logprob);
  }
  return out;
}

}  // namespace

/// The token before the first of `a`'s unsent ids (their texts depend on it): the last sent, or the prompt's last.
int32_t service::token_before_unsent(const answer& a) {
  const size_t n = a.unsent_ids.size(), all = a.result.token_ids.size();
  return all > n ? a.result.token_ids[all - n - 1] : a.r.prompt_ids.back();
}

/// The log probabilities of the tokens a chunk of `a` carries now (its unsent ids); none when not asked.
std::optional<logprobs_part> service::unsent_logprobs(const answer& a) const {
  if (a.r.sampling.logprobs < 0) return std::nullopt;
  const size_t n = a.unsent_ids.size();
  return logprobs_part{vocab_.get(), a.unsent_ids, std::span(a.result.logprobs).subspan(a.result.logprobs.size() - n),
                       token_before_unsent(a), a.logprobs_offset};
}

/// The first token of an echoing request came: the prompt's log probabilities it carries are kept, and a streaming
/// client gets the prompt's text (with them) first.
void service::echo_prompt(answer& a, const token_event& first, http_reply& reply) {
  if (a.r.prompt_logprobs >= 0 || (a.r.echo && a.r.sampling.logprobs >= 0))
    a.result.prompt_logprobs = prompt_logprobs_of(
        first, a.r.prompt_ids.size(), a.r.prompt_logprobs >= 0 ? a.r.prompt_logprobs : a.r.sampling.logprobs);
  if (!a.r.echo || !a.r.stream || a.client_gone) return;
  const std::string text = echoed_text(a.r, *vocab_);
  const logprobs_part part{vocab_.get(), a.r.prompt_ids, a.result.prompt_logprobs, -1, 0, 1};
  a.client_gone = !reply.write(stream_chunk(a.r, a.id, a.created, text, "", a.first_chunk, {},
                                            a.r.sampling.logprobs >= 0 ? &part : nullptr));
  a.first_chunk = false;
  a.logprobs_offset = text.size();
}

/// The unsent ids went out in a chunk.
void service::mark_sent(answer& a) {
  if (a.r.sampling.logprobs >= 0 && !a.unsent_ids.empty())
    a.logprobs_offset += text_bytes(*vocab_, a.unsent_ids, token_before_unsent(a));
  a.unsent_ids.clear();
}

std::vector<std::optional<request_finished>> service::relay_until_ended(std::vector<answer>& answers,
                                                                       event_channel& channel, bool gone,
                                                                       http_reply& reply, const cluster_view& view) {
  const bool stream = answers.front().r.stream;
  auto holding = [&] { return std::any_of(answers.begin(), answers.end(), [](const answer& a) { return a.held; }); };
  std::vector<std::optional<request_finished>> ends;
  while (ends.empty()) {
    auto tokens = channel.wait(ends);
    if (tokens.empty() && ends.empty() && stream && !gone)
      gone = !reply.write(": keep-alive\n\n");  // notices a client that left while we wait
    for (auto& [i, token] : tokens) {
      if (i == 0 && holding()) release_held(answers, channel, view, token.from);  // the prompt is computed there
      answers[i].client_gone = gone;
      relay_token(answers[i], token, reply);
      gone = gone || answers[i].client_gone;
    }
    if (holding() && channel.ended(0)) release_held(answers, channel, view, std::nullopt);
    for (size_t i = 0; i < answers.size(); ++i) {  // a client that left cancels every choice
      answer& a = answers[i];
      a.client_gone = gone;
      if (gone && !a.cancelled_by_us) {
        a.cancelled_by_us = true;
        if (a.held) {
          a.held.reset();
          channel.end_unsubmitted(i, request_finished{0, "cancelled", {}, 0, {}});
        } else {
          router_.cancel(a.cluster_id);  // frees its blocks; the end event follows
        }
      }
    }
  }
  return ends;
}

void service::relay_token(answer& a, const token_event& event, http_reply& reply) {
  const int32_t token = event.token;
  const auto now = clock::now();
  if (metrics_) {
    if (a.last_token)
      metrics_->inter_token_latency.with().observe(std::chrono::duration<double>(now - *a.last_token).count());
    else
      metrics_->time_to_first_token.with().observe(std::chrono::duration<double>(now - a.arrived).count());
    metrics_->generation_tokens.with().add();
  }
  a.last_token = now;
  tokens_out_.fetch_add(1, std::memory_order_relaxed);
  ++a.result.completion_tokens;
  if (a.result.token_ids.empty() && (a.r.echo || a.r.prompt_logprobs >= 0)) echo_prompt(a, event, reply);
  a.result.token_ids.push_back(token);
  if (a.r.sampling.logprobs >= 0) a.result.logprobs.push_back(logprobs_of(event));
  if (!event.logprobs.empty()) a.cumulative_logprob += event.logprobs.front().logprob;
  a.unsent_ids.push_back(token);
  const std::string released = a.text.push(token);
  a.result.text += released;
  const tool_call_parser::piece piece = split_calls(a, released, false);
  if (a.r.stream && !a.client_gone && (!piece.content.empty() || !piece.calls.empty())) {
    const auto logprobs = unsent_logprobs(a);
    a.client_gone = !reply.write(stream_chunk(a.r, a.id, a.created, piece.content, "", a.first_chunk, a.unsent_ids,
                                              logprobs ? &*logprobs : nullptr, piece.calls,
                                              a.result.tool_calls.size() - piece.calls.size()));
    a.first_chunk = false;
    mark_sent(a);
  }
  if (a.text.stopped() && !a.cancelled_by_us) {
    a.cancelled_by_us = true;
    router_.cancel(a.cluster_id);
  }
}

tool_call_parser::piece service::split_calls(answer& a, const std::string& text, bool last) {
  if (!a.calls) return {text, {}};
  tool_call_parser::piece piece = a.calls->push(text);
  if (last) {
    tool_call_parser::piece rest = a.calls->finish();
    piece.content += rest.content;
    piece.calls.insert(piece.calls.end(), rest.calls.begin(), rest.calls.end());
  }
  a.result.content += piece.content;
  a.result.tool_calls.insert(a.result.tool_calls.end(), piece.calls.begin(), piece.calls.end());
  return piece;
}

void service::settle(answer& a, const request_finished& end) {
  a.result.cached_tokens = end.cached_tokens;
  const std::string released = a.text.stopped() ? "" : a.text.finish();
  a.result.text += released;
  a.rest = split_calls(a, released, true);
  a.result.finish_reason = !a.result.tool_calls.empty()                ? "tool_calls"
                           : a.text.stopped() || end.reason == "stop" ? "stop"
                                                                       : "length";
  const std::string outcome = a.client_gone ? "abort" : end.reason == "error" ? "error"
                              : a.result.finish_reason == "tool_calls"         ? "stop"  // the engine's reason
                                                                                : a.result.finish_reason;
  if (!metrics_) return;
  metrics_->request_success.with({outcome}).add();
  if (end.reason == "error") metrics_->requests_failed.with({metrics::failure_reason(end.error)}).add();
  metrics_->e2e_latency.with().observe(std::chrono::duration<double>(clock::now() - a.arrived).count());
}

namespace {

/// The `n` choices of `answers` a response shows: all of them, or with best_of the n whose tokens are likeliest.
template <typename Answer>
std::vector<const Answer*> shown_choices(const std::vector<Answer>& answers, int n) {
  std::vector<const Answer*> out;
  for (const Answer& a : answers) out.push_back(&a);
  if (int(out.size()) > n) {
    std::stable_sort(out.begin(), out.end(), [](const Answer* x, const Answer* y) {
      return x->cumulative_logprob > y->cumulative_logprob;
    });
    out.resize(size_t(n));
  }
  return out;
}

}  // namespace

void service::respond(std::vector<answer>& answers, const std::vector<std::optional<request_finished>>& ends,
                      http_reply& reply) {
  const answer& head = answers.front();
  if (head.client_gone) return;
  int completion_tokens = 0;
  for (const answer& a : answers) completion_tokens += a.result.completion_tokens;
  auto failed = std::find_if(ends.begin(), ends.end(), [](const auto& e) { return e->reason == "error"; });
  if (failed != ends.end() && !head.r.stream) {  // tokens so far are not a completion: the client must know
    const answer& a = answers[size_t(failed - ends.begin())];
    return reply.send(
        500, json_type,
        error_body(make_error(500,
                              fmt::format("generation failed after {} tokens: {}", a.result.completion_tokens,
                                          (*failed)->error),
                              "server_error")));
  }
  if (!head.r.stream) {
    std::vector<completion_result> shown;
    for (const answer* a : shown_choices(answers, head.r.n)) shown.push_back(a->result);
    return reply.send(200, json_type,
                      response_body(head.r, head.id, head.created, shown, completion_tokens, vocab_.get()));
  }
  if (failed != ends.end()) {  // a stream that failed ends with its error and [DONE]: no finish reason after it
    reply.write("data: " + error_body(make_error(500, "generation failed: " + (*failed)->error, "server_error")) +
                "\n\n");
  } else {
    for (answer& a : answers) {
      const auto logprobs = unsent_logprobs(a);
      reply.write(stream_chunk(a.r, a.id, a.created, a.rest.content, a.result.finish_reason, a.first_chunk,
                               a.unsent_ids, logprobs && !a.unsent_ids.empty() ? &*logprobs : nullptr, a.rest.calls,
                               a.result.tool_calls.size() - a.rest.calls.size()));
    }
    if (head.r.include_usage)
      reply.write(stream_usage(head.r, head.id, head.created, head.result.prompt_tokens, completion_tokens,
                               head.result.cached_tokens));
  }
  reply.write("data: [DONE]\n\n");
  reply.end_stream();
}

}  // namespace illm::actors::frontend
