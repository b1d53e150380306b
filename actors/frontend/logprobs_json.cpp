#include "actors/frontend/logprobs_json.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace illm::actors::frontend {

using json = nlohmann::json;

namespace {

/// A token's text as a JSON string (bytes that are not UTF-8 on their own, as part of a character, are
/// replaced when dumped) and its bytes.
json byte_list(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(int(c));
  return bytes;
}

json completions_logprobs(const logprobs_part& part) {
  const gpu::tokenizer& vocab = *part.vocab;
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t offset = part.text_offset;
  int32_t prev = part.before;
  for (size_t i = 0; i < part.ids.size() && i < part.values.size(); ++i) {
    const gpu::token_logprobs& v = part.values[i];
    const std::string text = vocab.decode(prev, part.ids[i]);
    tokens.push_back(text);
    if (i < part.unscored) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
    } else {
      json alternatives = json::object();
      for (size_t k = 0; k < v.top_ids.size(); ++k) alternatives[vocab.decode(prev, v.top_ids[k])] = v.top_logprobs[k];
      if (!alternatives.contains(text)) alternatives[text] = v.logprob;
      token_logprobs.push_back(v.logprob);
      top.push_back(std::move(alternatives));
    }
    offsets.push_back(offset);
    offset += text.size();
    prev = part.ids[i];
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json chat_logprobs(const logprobs_part& part) {
  const gpu::tokenizer& vocab = *part.vocab;
  json content = json::array();
  int32_t prev = part.before;
  for (size_t i = 0; i < part.ids.size() && i < part.values.size(); ++i) {
    const gpu::token_logprobs& v = part.values[i];
    const std::string text = vocab.decode(prev, part.ids[i]);
    json top = json::array();
    for (size_t k = 0; k < v.top_ids.size(); ++k) {
      const std::string alternative = vocab.decode(prev, v.top_ids[k]);
      top.push_back({{"token", alternative}, {"logprob", v.top_logprobs[k]}, {"bytes", byte_list(alternative)}});
    }
    content.push_back({{"token", text}, {"logprob", v.logprob}, {"bytes", byte_list(text)}, {"top_logprobs", top}});
    prev = part.ids[i];
  }
  return {{"content", content}, {"refusal", nullptr}};
}

}  // namespace

json logprobs_json(endpoint kind, const logprobs_part& part) {
  return kind == endpoint::completions ? completions_logprobs(part) : chat_logprobs(part);
}

json vllm_prompt_logprobs(const gpu::tokenizer& vocab, std::span<const int32_t> prompt,
                          std::span<const gpu::token_logprobs> values) {
  json out = json::array();
  for (size_t p = 0; p < prompt.size(); ++p) {
    if (p == 0 || p >= values.size()) {
      out.push_back(nullptr);
      continue;
    }
    const gpu::token_logprobs& v = values[p];
    auto entry = [&](int32_t id, double logprob, json rank) {
      return json{{"logprob", logprob}, {"rank", std::move(rank)}, {"decoded_token", vocab.decode(prompt[p - 1], id)}};
    };
    const auto top = std::find(v.top_ids.begin(), v.top_ids.end(), prompt[p]);
    json at = json::object();
    at[std::to_string(prompt[p])] =
        entry(prompt[p], v.logprob, top == v.top_ids.end() ? json() : json(top - v.top_ids.begin() + 1));
    for (size_t k = 0; k < v.top_ids.size() && k < v.top_logprobs.size(); ++k)
      at[std::to_string(v.top_ids[k])] = entry(v.top_ids[k], v.top_logprobs[k], int(k + 1));
    out.push_back(std::move(at));
  }
  return out;
}

size_t text_bytes(const gpu::tokenizer& vocab, std::span<const int32_t> ids, int32_t before) {
  size_t n = 0;
  for (int32_t id : ids) {
    n += vocab.decode(before, id).size();
    before = id;
  }
  return n;
}

}  // namespace illm::actors::frontend
