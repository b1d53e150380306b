#pragma once
// The grammar of the JSON texts a JSON schema accepts, for structured outputs: objects with properties, required and
// additionalProperties; arrays with items, minItems and maxItems; strings with enum, const and the formats date,
// time, date-time and uuid (others read as any string); number, integer, boolean, null; anyOf; type lists; $ref to
// "#", "#/$defs/..." or "#/definitions/..." (recursion allowed). A keyword that would constrain the output beyond
// this subset (pattern, minimum, minLength, oneOf, allOf, ...) is an error naming it: an output that ignored it might
// not validate. Texts are compact: a space may follow ':' and ',' only. Numbers have at most 16 digits before and after
// the point and 3 in the exponent (past double precision digits mean nothing, and a model repeating one would never
// end its number).

#include <cstddef>
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "gpu/grammar/grammar.hpp"
#include "gpu/status.hpp"

namespace illm::gpu::grammar {

/// Bounds on what a schema may ask.
struct schema_limits {
  int max_depth = 32;         ///< nested schemas
  size_t max_rules = 20000;   ///< grammar rules the schema becomes
  int max_bounded_items = 256;  ///< the largest maxItems (a larger bound reads as none)
  /// States of the grammar a compile walks (breadth first from the start) to find one wider than max_state_stacks:
  /// a schema whose alternatives multiply there is refused before it runs.
  size_t probed_states = 512;
  /// An object that gives no additionalProperties admits only its properties (as OpenAI's strict function calling):
  /// a tool's arguments without properties are {}.
  bool strict = false;
};

/// The grammar of the JSON texts `schema` accepts; an error names the keyword (and where) it cannot follow.
/// Properties are written in the schema's order (hence ordered JSON).
result<std::shared_ptr<const grammar>> json_schema_grammar(const nlohmann::ordered_json& schema,
                                                           const schema_limits& limits = {});

/// The texts `before`, then a JSON text `schema` accepts, then `after` (a tool call in a model's own wrapping).
result<std::shared_ptr<const grammar>> wrapped_schema_grammar(const nlohmann::ordered_json& schema,
                                                              std::string_view before, std::string_view after,
                                                              const schema_limits& limits = {});

/// The grammar of any JSON object (response_format json_object).
std::shared_ptr<const grammar> json_object_grammar();

}  // namespace illm::gpu::grammar
