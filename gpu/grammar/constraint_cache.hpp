#pragma once
// The constraints of structured outputs by their spec, compiled once per process over the model's vocabulary:
// "json_object" (any JSON object), "json_schema " followed by a schema's JSON text, or "wrapped_json " followed by
// {"before", "schema", "after"} (a schema's texts between two fixed texts: a tool call as a model writes it). What requests carry is the
// spec; each instance (and the front end, to refuse a bad schema before it runs) looks it up here.

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "gpu/grammar/json_schema.hpp"
#include "gpu/grammar/token_mask.hpp"
#include "gpu/status.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::gpu::grammar {

/// The spec of any JSON object.
inline constexpr const char* json_object_spec = "json_object";
/// The spec of a schema's language: the prefix, then the schema's JSON text.
inline constexpr const char* json_schema_spec_prefix = "json_schema ";

/// The spec of a wrapped schema's language: the prefix, then {"before": text, "schema": schema, "after": text,
/// "strict": bool} (strict: schema_limits::strict).
inline constexpr const char* wrapped_schema_spec_prefix = "wrapped_json ";

/// Compiled constraints by spec, the most recently used kept.
class constraint_cache {
 public:
  /// Over `vocab`'s tokens (their trie is built at the first get); keeps at most `capacity` constraints.
  explicit constraint_cache(std::shared_ptr<const tokenizer> vocab, size_t capacity = 64, schema_limits limits = {});
  /// The constraint of `spec`; an error says what in it cannot be followed.
  result<std::shared_ptr<const constraint>> get(const std::string& spec);

 private:
  std::shared_ptr<const tokenizer> vocab_;
  std::shared_ptr<const token_trie> trie_;  // built at the first get
  size_t capacity_;
  schema_limits limits_;
  std::mutex mutex_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const constraint>, std::list<std::string>::iterator>> by_spec_;
};

}  // namespace illm::gpu::grammar
