#include "gpu/grammar/grammar.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <unordered_set>

#include "gpu/text.hpp"

namespace illm::gpu::grammar {

namespace {

using element = grammar::element;

struct stack_hash {
  size_t operator()(const std::vector<uint32_t>& s) const {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
    for (uint32_t v : s) h = (h ^ v) * 0x100000001b3ull;
    return size_t(h);
  }
};

/// One step's expansion of stacks into those whose top reads a byte (or that are empty): a stack with a rule on top
/// is expanded once however many ways lead to it (alternatives that refer to the same rule with the same
/// continuation would otherwise double the work at each level they nest), and the work is bounded by
/// max_expanded_stacks.
class expansion {
 public:
  explicit expansion(const grammar& g) : g_(g) {}

  /// Expands the rule references on top of `stack`.
  void add(std::vector<uint32_t> stack) {
    if (stack.size() > max_stack_depth || too_wide_) return;
    if (++work_ > max_expanded_stacks) {
      too_wide_ = true;
      return;
    }
    if (stack.empty() || g_.elements()[stack.back()].type == element::kind::bytes) return out_.push_back(std::move(stack));
    // Expanded already: the same stacks again. Small steps (most) leave their few duplicates to result(); past a
    // few dozen, each stack is expanded once, so that duplicates cannot multiply.
    if (work_ > dedup_after && !expanded_.insert(stack).second) return;
    const uint32_t top = stack.back();
    const uint32_t rule = g_.elements()[top].value;
    stack.pop_back();
    if (g_.elements()[top + 1].type != element::kind::end) stack.push_back(top + 1);
    for (uint32_t start : g_.starts(rule)) {
      std::vector<uint32_t> next = stack;
      if (g_.elements()[start].type != element::kind::end) next.push_back(start);
      add(std::move(next));
    }
  }

  /// The stacks, sorted, as a state (too wide past max_state_stacks).
  match_state result() && {
    match_state out;
    std::sort(out_.begin(), out_.end());
    out_.erase(std::unique(out_.begin(), out_.end()), out_.end());
    if (too_wide_ || out_.size() > max_state_stacks) {
      out.too_wide = true;
      return out;
    }
    out.stacks = std::move(out_);
    return out;
  }

 private:
  const grammar& g_;
  std::vector<std::vector<uint32_t>> out_;
  std::unordered_set<std::vector<uint32_t>, stack_hash> expanded_;  // stacks with a rule on top, expanded
  static constexpr size_t dedup_after = 32;
  size_t work_ = 0;
  bool too_wide_ = false;
};

}  // namespace

byte_set byte_range(uint8_t lo, uint8_t hi) {
  byte_set s;
  for (int b = lo; b <= hi; ++b) s.set(size_t(b));
  return s;
}

part any_of(std::string_view chars) {
  byte_set s;
  for (char c : chars) s.set(static_cast<unsigned char>(c));
  return bytes_part(s);
}

part bytes_part(const byte_set& bytes) { return {false, bytes, 0}; }

part ref(uint32_t r) { return {true, {}, r}; }

std::vector<part> literal(std::string_view text) {
  std::vector<part> out;
  for (char c : text) out.push_back(any_of(std::string_view(&c, 1)));
  return out;
}

uint32_t grammar::add_rule(std::string name) {
  names_.push_back(std::move(name));
  alternatives_.emplace_back();
  return uint32_t(alternatives_.size() - 1);
}

void grammar::add(uint32_t r, std::vector<part> sequence) { alternatives_[r].push_back(std::move(sequence)); }

status grammar::finish(uint32_t root) {
  const size_t n = alternatives_.size();
  if (root >= n) return {status_code::invalid_argument, "the grammar has no such root rule"};
  for (size_t r = 0; r < n; ++r) {
    if (alternatives_[r].empty())
      return {status_code::invalid_argument, text::format("grammar rule '{}' has no alternative", names_[r])};
    for (const auto& alt : alternatives_[r])
      for (const part& p : alt)
        if (p.is_rule && p.rule >= n)
          return {status_code::invalid_argument, text::format("grammar rule '{}' names no rule", names_[r])};
  }
  // Which rules can read the empty string, then whether any reaches itself before reading a byte.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r)
      for (const auto& alt : alternatives_[r])
        if (!nullable[r] && std::all_of(alt.begin(), alt.end(), [&](const part& p) { return p.is_rule && nullable[p.rule]; }))
          nullable[r] = changed = true;
  }
  std::vector<int> color(n, 0);  // 0: unseen, 1: on the path, 2: done
  std::function<bool(uint32_t)> left_recursive = [&](uint32_t r) {
    if (color[r] == 1) return true;
    if (color[r] == 2) return false;
    color[r] = 1;
    for (const auto& alt : alternatives_[r])
      for (const part& p : alt) {
        if (!p.is_rule) break;
        if (left_recursive(p.rule)) return true;
        if (!nullable[p.rule]) break;
      }
    color[r] = 2;
    return false;
  };
  for (uint32_t r = 0; r < n; ++r)
    if (left_recursive(r))
      return {status_code::invalid_argument, text::format("grammar rule '{}' is left-recursive", names_[r])};
  // Flatten.
  elements_.clear();
  sets_.clear();
  starts_.assign(n, {});
  std::map<std::string, uint32_t> set_ids;
  for (size_t r = 0; r < n; ++r)
    for (const auto& alt : alternatives_[r]) {
      starts_[r].push_back(uint32_t(elements_.size()));
      for (const part& p : alt) {
        if (p.is_rule) {
          elements_.push_back({element::kind::rule, p.rule});
          continue;
        }
        auto [it, added] = set_ids.emplace(p.bytes.to_string(), uint32_t(sets_.size()));
        if (added) sets_.push_back(p.bytes);
        elements_.push_back({element::kind::bytes, it->second});
      }
      elements_.push_back({element::kind::end, 0});
    }
  root_ = root;
  return status::ok();
}

size_t grammar::bytes() const {
  size_t b = sizeof(*this) + elements_.size() * sizeof(element) + sets_.size() * sizeof(byte_set);
  for (const auto& s : starts_) b += s.size() * sizeof(uint32_t) + sizeof(s);
  for (const auto& alternatives : alternatives_)
    for (const auto& alt : alternatives) b += alt.size() * sizeof(part) + sizeof(alt);
  return b;
}

bool match_state::accepts() const {
  return std::any_of(stacks.begin(), stacks.end(), [](const auto& s) { return s.empty(); });
}

bool match_state::continues() const {
  return std::any_of(stacks.begin(), stacks.end(), [](const auto& s) { return !s.empty(); });
}

std::string match_state::key() const {
  std::string k;
  for (const auto& s : stacks) {
    k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(uint32_t));
    k.push_back('|');
  }
  return k;
}

match_state start_state(const grammar& g) {
  expansion e(g);
  for (uint32_t start : g.starts(g.root())) {
    std::vector<uint32_t> stack;
    if (g.elements()[start].type != element::kind::end) stack.push_back(start);
    e.add(std::move(stack));
  }
  return std::move(e).result();
}

match_state advance(const grammar& g, const match_state& from, uint8_t byte) {
  expansion e(g);
  for (const auto& stack : from.stacks) {
    if (stack.empty()) continue;
    const uint32_t top = stack.back();
    if (!g.sets()[g.elements()[top].value].test(byte)) continue;
    std::vector<uint32_t> next(stack.begin(), stack.end() - 1);
    if (g.elements()[top + 1].type != element::kind::end) next.push_back(top + 1);
    e.add(std::move(next));
  }
  return std::move(e).result();
}

bool advance(const grammar& g, match_state& state, std::string_view bytes) {
  for (char c : bytes) {
    state = advance(g, state, static_cast<unsigned char>(c));
    if (state.dead()) return false;
  }
  return true;
}


byte_set next_bytes(const grammar& g, const match_state& state) {
  byte_set out;
  for (const auto& stack : state.stacks)
    if (!stack.empty()) out |= g.sets()[g.elements()[stack.back()].value];
  return out;
}

namespace {

/// The states one byte takes `state` to.
std::vector<match_state> successors(const grammar& g, const match_state& state) {
  // Bytes that the same stacks read lead to the same state: one byte of each such class is read.
  std::map<std::vector<bool>, uint8_t> classes;
  for (int b = 0; b < 256; ++b) {
    std::vector<bool> readers(state.stacks.size());
    bool any = false;
    for (size_t i = 0; i < state.stacks.size(); ++i) {
      const auto& stack = state.stacks[i];
      readers[i] = !stack.empty() && g.sets()[g.elements()[stack.back()].value].test(size_t(b));
      any = any || readers[i];
    }
    if (any) classes.emplace(std::move(readers), uint8_t(b));
  }
  std::vector<match_state> out;
  for (const auto& [readers, byte] : classes) out.push_back(advance(g, state, byte));
  return out;
}

}  // namespace

std::optional<int> closing_distance(const grammar& g, const match_state& state, size_t max_states) {
  std::deque<std::pair<match_state, int>> queue{{state, 0}};
  std::unordered_set<std::string> seen{state.key()};
  while (!queue.empty()) {
    auto [here, depth] = std::move(queue.front());
    queue.pop_front();
    if (here.accepts()) return depth;
    for (match_state& next : successors(g, here)) {
      if (seen.size() >= max_states) return std::nullopt;
      if (seen.insert(next.key()).second) queue.emplace_back(std::move(next), depth + 1);
    }
  }
  return std::nullopt;
}

std::optional<size_t> widest_state(const grammar& g, size_t max_states) {
  std::deque<match_state> queue{start_state(g)};
  std::unordered_set<std::string> seen{queue.front().key()};
  size_t widest = 0;
  while (!queue.empty()) {
    match_state here = std::move(queue.front());
    queue.pop_front();
    if (here.too_wide) return std::nullopt;
    widest = std::max(widest, here.stacks.size());
    for (match_state& next : successors(g, here)) {
      if (next.too_wide) return std::nullopt;
      if (seen.size() >= max_states) return widest;
      if (seen.insert(next.key()).second) queue.push_back(std::move(next));
    }
  }
  return widest;
}

}  // namespace illm::gpu::grammar
