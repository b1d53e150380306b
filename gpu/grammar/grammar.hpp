#pragma once
// Context-free grammars over bytes, and a matcher that reads bytes against one: what constrains sampling to the
// tokens that keep an output valid (a JSON schema's language, gpu/grammar/json_schema.hpp). A grammar is rules of
// alternatives of sequences of byte sets and rule references, without left recursion; the matcher keeps every
// stack of positions the input so far may have led to (as a pushdown automaton, all branches at once), so a state
// is a value that can be copied, compared and advanced a byte at a time.

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/status.hpp"

namespace illm::gpu::grammar {

/// A set of bytes.
using byte_set = std::bitset<256>;

/// One element of an alternative: a byte of a set, or a rule's language.
struct part {
  bool is_rule = false;
  byte_set bytes;     ///< when not a rule
  uint32_t rule = 0;  ///< when a rule
};

/// The bytes from `lo` to `hi`.
byte_set byte_range(uint8_t lo, uint8_t hi);
/// A part of the bytes `chars` (each byte of the string is in the set).
part any_of(std::string_view chars);
/// A part of a byte set.
part bytes_part(const byte_set& bytes);
/// A reference to rule `r`.
part ref(uint32_t r);
/// The parts that read exactly `text`.
std::vector<part> literal(std::string_view text);

/// A grammar being built, then finished (checked and flattened) for matching.
class grammar {
 public:
  /// A new rule, named for errors; its alternatives come with add().
  uint32_t add_rule(std::string name);
  /// Adds an alternative (a sequence of parts; empty: the empty string) to rule `r`.
  void add(uint32_t r, std::vector<part> sequence);
  /// Rules defined so far.
  size_t rules() const { return alternatives_.size(); }
  /// Checks the grammar (every rule has an alternative; no rule reaches itself before reading a byte) and fixes
  /// `root` as its start. An error names the rule.
  status finish(uint32_t root);

  /// The flattened grammar: each alternative's elements end with an end marker.
  struct element {
    enum class kind : uint8_t { bytes, rule, end } type = kind::end;
    uint32_t value = 0;  ///< a byte set's index, or a rule's id
  };
  const std::vector<element>& elements() const { return elements_; }
  const std::vector<byte_set>& sets() const { return sets_; }
  /// Where each alternative of rule `r` starts in elements().
  const std::vector<uint32_t>& starts(uint32_t r) const { return starts_[r]; }
  uint32_t root() const { return root_; }
  /// The bytes its flattened form holds.
  size_t bytes() const;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<std::vector<part>>> alternatives_;
  std::vector<element> elements_;
  std::vector<byte_set> sets_;
  std::vector<std::vector<uint32_t>> starts_;
  uint32_t root_ = 0;
};

/// Parse stacks one state may hold. A grammar whose alternatives read the same bytes, nested (a schema's anyOf over
/// texts with a common start), multiplies them: past this bound a state is too wide and the matcher stops there.
inline constexpr size_t max_state_stacks = 1024;
/// Stacks the expansion of one step may produce, duplicates included (the work bound of a step).
inline constexpr size_t max_expanded_stacks = 8 * max_state_stacks;
/// Deepest stack: nesting this deep is no output a model should give (deeper stacks are dropped).
inline constexpr size_t max_stack_depth = 1024;

/// Where a matcher stands: the stacks of positions (indexes into grammar::elements(), the next element to read on
/// top) the bytes so far may have led to, sorted. An empty stack: the input so far is a whole sentence.
struct match_state {
  std::vector<std::vector<uint32_t>> stacks;
  /// Reading stopped because the state grew past max_state_stacks (or its step past max_expanded_stacks): no
  /// stack is left, and the reason is this, not a byte the grammar refused.
  bool too_wide = false;
  /// No stack left: the bytes so far are no prefix of a sentence (or too_wide).
  bool dead() const { return stacks.empty(); }
  /// The bytes so far are a whole sentence.
  bool accepts() const;
  /// Some stack can read more bytes.
  bool continues() const;
  /// A key naming the state (equal states, equal keys).
  std::string key() const;
  bool operator==(const match_state&) const = default;
};

/// The start state of a finished grammar.
match_state start_state(const grammar& g);
/// The state after reading `byte` from `from` (dead when the grammar does not allow it).
match_state advance(const grammar& g, const match_state& from, uint8_t byte);
/// Reads `bytes` from `state` in place; false (the state dead) at the first byte the grammar does not allow.
bool advance(const grammar& g, match_state& state, std::string_view bytes);
/// The bytes that may come next from `state`.
byte_set next_bytes(const grammar& g, const match_state& state);
/// The most stacks a state of `g` holds, among the first `max_states` states a breadth-first walk from the start
/// reaches (every byte class of each); nullopt when one is too wide. What a compiler checks before a grammar is used.
std::optional<size_t> widest_state(const grammar& g, size_t max_states);
/// The fewest bytes that take `state` to a whole sentence (0 when it is one); nullopt when none was found among
/// `max_states` states.
std::optional<int> closing_distance(const grammar& g, const match_state& state, size_t max_states = 4096);

}  // namespace illm::gpu::grammar
