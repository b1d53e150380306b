#include "gpu/grammar/constraint_cache.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>
#include "gpu/formats/bounded_json.hpp"

#include "gpu/text.hpp"

namespace illm::gpu::grammar {

constraint_cache::constraint_cache(std::shared_ptr<const tokenizer> vocab, constraint_budget budget,
                                   schema_limits limits)
    : vocab_(std::move(vocab)), budget_(budget), limits_(limits) {}

result<std::shared_ptr<const constraint>> constraint_cache::get(const std::string& spec) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = by_spec_.find(spec); it != by_spec_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      auto found = it->second.first;
      trim();  // its masks grew since
      return found;
    }
  }
  std::shared_ptr<const grammar> rules;
  const std::string prefix = json_schema_spec_prefix, wrapped = wrapped_schema_spec_prefix;
  if (spec == json_object_spec) {
    rules = json_object_grammar();
  } else if (spec.rfind(prefix, 0) == 0) {
    const auto schema = parse_bounded_or_discarded<nlohmann::ordered_json>(std::string_view(spec).substr(prefix.size()),
                                                                           json_depth_outside_requests);
    if (schema.is_discarded()) return status{status_code::invalid_argument, "the json schema is not valid JSON"};
    auto compiled = json_schema_grammar(schema, limits_);
    if (!compiled.is_ok()) return compiled.error();
    rules = compiled.value();
  } else if (spec.rfind(wrapped, 0) == 0) {
    const auto parts = parse_bounded_or_discarded<nlohmann::ordered_json>(std::string_view(spec).substr(wrapped.size()),
                                                                          json_depth_outside_requests);
    if (!parts.is_object() || !parts.contains("schema") || !parts.value("before", nlohmann::ordered_json()).is_string() ||
        !parts.value("after", nlohmann::ordered_json()).is_string())
      return status{status_code::invalid_argument, "a wrapped schema needs before, schema and after"};
    schema_limits limits = limits_;
    limits.strict = parts.value("strict", false);
    auto compiled = wrapped_schema_grammar(parts.at("schema"), parts.at("before").get<std::string>(),
                                           parts.at("after").get<std::string>(), limits);
    if (!compiled.is_ok()) return compiled.error();
    rules = compiled.value();
  } else {
    return status{status_code::invalid_argument, text::format("no output constraint '{}'", spec.substr(0, 40))};
  }
  std::lock_guard lock(mutex_);
  if (!trie_) trie_ = std::make_shared<const token_trie>(*vocab_);
  auto made = std::make_shared<const constraint>(std::move(rules), trie_, budget_.masks_bytes);
  if (auto it = by_spec_.find(spec); it != by_spec_.end()) return it->second.first;  // compiled meanwhile
  order_.push_front(spec);
  by_spec_.emplace(spec, std::make_pair(made, order_.begin()));
  trim();
  return std::shared_ptr<const constraint>(made);
}

void constraint_cache::trim() {
  size_t total = 0;
  for (const auto& [spec, entry] : by_spec_) total += entry.first->bytes() + 2 * spec.size();
  while ((total > budget_.cache_bytes || by_spec_.size() > budget_.max_constraints()) && by_spec_.size() > 1) {
    auto oldest = by_spec_.find(order_.back());
    total -= oldest->second.first->bytes() + 2 * oldest->first.size();
    by_spec_.erase(oldest);
    order_.pop_back();
  }
}

size_t constraint_cache::bytes() const {
  std::lock_guard lock(mutex_);
  size_t total = 0;
  for (const auto& [spec, entry] : by_spec_) total += entry.first->bytes() + 2 * spec.size();
  return total;
}

size_t constraint_cache::size() const {
  std::lock_guard lock(mutex_);
  return by_spec_.size();
}

}  // namespace illm::gpu::grammar
