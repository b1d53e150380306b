#pragma once
// The constraints of structured outputs by their spec, compiled once per process over the model's vocabulary:
// "json_object" (any JSON object), "json_schema " followed by a schema's JSON text, or "wrapped_json " followed by
// {"before", "schema", "after"} (a schema's texts between two fixed texts: a tool call as a model writes it). What requests carry is the
// spec; each instance (and the front end, to refuse a bad schema before it runs) looks it up here.

#include <algorithm>
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

/// The memory a process's constraints may keep (the settings constraint_cache_mib and constraint_masks_mib).
struct constraint_budget {
  size_t cache_bytes = size_t(512) << 20;  ///< the cache's constraints with their masks, all together
  size_t masks_bytes = size_t(16) << 20;   ///< one constraint's cached masks
  /// Constraints the cache keeps: so many that their masks, each at its budget, fit the cache's.
  size_t max_constraints() const { return std::max<size_t>(1, cache_bytes / std::max<size_t>(masks_bytes, 1)); }
};

/// Compiled constraints by spec, the most recently used kept within a budget of bytes (what a constraint no longer
/// cached holds lives on with the requests that use it, within its own masks budget).
class constraint_cache {
 public:
  /// Over `vocab`'s tokens (their trie is built at the first get).
  explicit constraint_cache(std::shared_ptr<const tokenizer> vocab, constraint_budget budget = {},
                            schema_limits limits = {});
  /// The constraint of `spec`; an error says what in it cannot be followed.
  result<std::shared_ptr<const constraint>> get(const std::string& spec);
  /// The bytes its constraints hold (grammars, masks, distances), and how many it keeps.
  size_t bytes() const;
  size_t size() const;

 private:
  /// Drops the least recently used constraints while the cache holds more than its budget (the newest stays).
  void trim();

  std::shared_ptr<const tokenizer> vocab_;
  std::shared_ptr<const token_trie> trie_;  // built at the first get
  constraint_budget budget_;
  schema_limits limits_;
  mutable std::mutex mutex_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const constraint>, std::list<std::string>::iterator>> by_spec_;
};

}  // namespace illm::gpu::grammar
