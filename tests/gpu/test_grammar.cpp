// Grammars over bytes and the JSON schemas they come from: a matcher reads exactly its language, schemas become the
// grammars of the texts they accept (walks through each grammar end in JSON that parses and keeps the schema), what
// the subset cannot follow is refused by name, and the tokens a state allows are those whose bytes it reads.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/batcher.hpp"
#include "gpu/generate.hpp"
#include "gpu/grammar/json_schema.hpp"
#include "gpu/grammar/token_mask.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;
namespace grammar = illm::gpu::grammar;
using json = nlohmann::ordered_json;

namespace {

bool reads(const grammar::grammar& g, const std::string& text) {
  grammar::match_state s = grammar::start_state(g);
  return grammar::advance(g, s, text) && s.accepts();
}

std::shared_ptr<const grammar::grammar> schema_grammar(const json& schema) {
  auto g = grammar::json_schema_grammar(schema);
  REQUIRE_MESSAGE(g.is_ok(), g.error().message());
  return g.value();
}

/// A random text of `g`'s language: random bytes at first, then the bytes that close what is open.
std::string walk(const grammar::grammar& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  grammar::match_state s = grammar::start_state(g);
  std::string out;
  for (int step = 0; step < 4000; ++step) {
    if (s.accepts() && (!s.continues() || out.size() > 40 || rng() % 8 == 0)) return out;
    const grammar::byte_set next = grammar::next_bytes(g, s);
    REQUIRE(next.any());
    int byte = -1;
    if (out.size() > 40) {
      for (char c : std::string("\"]},0ntf1-")) if (next.test(uint8_t(c))) { byte = uint8_t(c); break; }
    } else {
      std::vector<int> choices;
      for (int b = 0; b < 256; ++b) if (next.test(size_t(b)) && (b < 0x80 || rng() % 4 == 0)) choices.push_back(b);
      if (!choices.empty()) byte = choices[rng() % choices.size()];
    }
    for (int b = 0; byte < 0 && b < 256; ++b) if (next.test(size_t(b))) byte = b;
    out.push_back(char(byte));
    s = grammar::advance(g, s, uint8_t(byte));
    REQUIRE_FALSE(s.dead());
  }
  FAIL("no end after 4000 bytes: ", out);
  return out;
}


/// What one constrained sequence gave: its output's bytes and how it ended.
struct constrained_output {
  uint64_t id;
  std::string text;
  gpu::finish_reason finish;
  bool dead;
};

/// Runs one sequence per constraint of `constraints` on "Once upon a time" (rng rng0 + i, temperature i of
/// `temperatures`) to its end, with `max_new_tokens` at most; the pool is whole after. Texts are `trie`'s bytes.
std::vector<constrained_output> run_constrained(const grammar::token_trie& trie,
                                                const std::vector<std::shared_ptr<const grammar::constraint>>& constraints,
                                                const std::vector<float>& temperatures, uint64_t rng0,
                                                int max_new_tokens) {
  const auto& model = test::real_model();
  auto eng = gpu::engine::create(model.weights, test::cpu_device(), {64, 4}).value();
  auto pool = gpu::kv_pool::create(test::cpu_device(), eng->pool_layout(), 64).value();
  gpu::kv_pools view{{&pool}, 0};
  gpu::spread_block_source source({&pool}, 1);
  gpu::batcher runner(*eng, source, {64, 4});
  std::vector<std::shared_ptr<gpu::sequence>> seqs;
  for (size_t i = 0; i < constraints.size(); ++i) {
    auto seq = std::make_shared<gpu::sequence>();
    seq->id = uint64_t(i + 1);
    seq->tokens = model.vocab->encode("Once upon a time", true);
    seq->n_prompt = int(seq->tokens.size());
    seq->max_new_tokens = max_new_tokens;
    seq->sampling.temperature = temperatures[i];
    seq->rng = rng0 + uint64_t(i);
    seq->sampling.constraint = constraints[i];
    REQUIRE(seq->start_constraint());
    runner.add(seq);
    seqs.push_back(seq);
  }
  while (!runner.idle()) REQUIRE(runner.step(view, nullptr).is_ok());
  CHECK(pool.used_blocks() == 0);
  std::vector<constrained_output> out;
  for (const auto& seq : seqs) {
    std::string text;
    for (int i = seq->n_prompt; i < int(seq->tokens.size()); ++i) text += trie.bytes(seq->tokens[size_t(i)]);
    out.push_back({seq->id, text, seq->finish, seq->constraint_state.dead()});
  }
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a grammar reads exactly its language and refuses left recursion") {
    grammar::grammar g;
    const uint32_t digits = g.add_rule("digits"), root = g.add_rule("root");
    g.add(digits, {grammar::bytes_part(grammar::byte_range('0', '9')), grammar::ref(digits)});
    g.add(digits, {});
    g.add(root, {grammar::any_of("["), grammar::ref(digits), grammar::any_of("]")});
    g.add(root, grammar::literal("none"));
    REQUIRE(g.finish(root).is_ok());
    for (const char* yes : {"[]", "[0]", "[12345]", "none"}) CHECK_MESSAGE(reads(g, yes), yes);
    for (const char* no : {"[", "[a]", "none!", "", "[1]]"}) CHECK_FALSE_MESSAGE(reads(g, no), no);
    grammar::match_state s = grammar::start_state(g);
    CHECK(grammar::next_bytes(g, s).count() == 2);  // '[' or 'n'
    grammar::grammar bad;
    const uint32_t r = bad.add_rule("list");
    bad.add(r, {grammar::ref(r), grammar::any_of("x")});
    bad.add(r, {});
    CHECK(bad.finish(r).message().find("left-recursive") != std::string::npos);
  }

  TEST_CASE("json_object reads compact JSON objects and nothing else") {
    const auto g = grammar::json_object_grammar();
    CHECK(reads(*g, R"({"a": [1, 2.5e-3, "x\u00e9\"", true], "b": null, "c": {}})"));
    CHECK(reads(*g, "{\"caf\xC3\xA9\": -0.5}"));
    CHECK(reads(*g, R"({"n": 1234567890123456.1234567890123456e-123})"));
    CHECK_FALSE(reads(*g, R"({"n": 12345678901234567})"));  // 17 digits
    for (const char* no : {"[]", "{", R"({"a" : 1})", R"({"a": 01})", "{\"a\": \"\x01\"}", "{\"\xC3\"}", "{} "})
      CHECK_FALSE_MESSAGE(reads(*g, no), no);
  }

  TEST_CASE("a wrapped schema reads its texts between the two fixed ones (a tool call as a model writes it)") {
    const json schema = json::parse(R"({"type": "object", "properties": {"name": {"const": "f"},
        "arguments": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        "required": ["name", "arguments"], "additionalProperties": false})");
    const auto g = grammar::wrapped_schema_grammar(schema, "<tool_call>\n", "\n</tool_call>");
    REQUIRE(g.is_ok());
    CHECK(reads(*g.value(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 3}}\n</tool_call>"));
    for (const char* no : {"{\"name\": \"f\", \"arguments\": {\"x\": 3}}", "<tool_call>\n{\"name\": \"g\", "
                           "\"arguments\": {\"x\": 3}}\n</tool_call>", "<tool_call>\n{\"name\": \"f\", \"arguments\": "
                           "{\"x\": 3}}"})
      CHECK_FALSE_MESSAGE(reads(*g.value(), no), no);
  }

  TEST_CASE("a schema's grammar reads the texts it accepts, and walks through it give valid JSON") {
    const json schema = json::parse(R"({
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 3},
        "when": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
        "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
        "kind": {"const": "person"},
        "score": {"type": ["number", "null"]}
      },
      "required": ["name", "tags", "kind"],
      "additionalProperties": false})");
    const auto g = schema_grammar(schema);
    CHECK(reads(*g, R"({"name": "Ann", "tags": ["a", 3], "kind": "person"})"));
    CHECK(reads(*g, R"({"name": "x", "age": -3, "tags": ["b"], "next": {"name": "y", "tags": ["a"], "kind": "person"}, "kind": "person", "score": null})"));
    CHECK(reads(*g, R"({"name": "x", "tags": ["a"], "when": "2026-12-05T20:00:00.5+01:00", "id": "123e4567-e89b-12d3-a456-426614174000", "kind": "person"})"));
    CHECK_FALSE(reads(*g, R"({"name": "Ann", "kind": "person"})"));                       // tags required
    CHECK_FALSE(reads(*g, R"({"name": "Ann", "tags": [], "kind": "person"})"));           // minItems 1
    CHECK_FALSE(reads(*g, R"({"name": "Ann", "tags": ["a","a","a","a"], "kind": "person"})"));  // maxItems 3
    CHECK_FALSE(reads(*g, R"({"name": "Ann", "tags": ["c"], "kind": "person"})"));        // enum
    CHECK_FALSE(reads(*g, R"({"name": "Ann", "tags": ["a"], "kind": "robot"})"));         // const
    CHECK_FALSE(reads(*g, R"({"name": 5, "tags": ["a"], "kind": "person"})"));            // type
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      const std::string text = walk(*g, seed);
      CAPTURE(text);
      const json j = json::parse(text, nullptr, false);
      REQUIRE_FALSE(j.is_discarded());
      CHECK(j.contains("name"));
      CHECK(j.at("tags").size() >= 1);
      CHECK(j.at("tags").size() <= 3);
      CHECK(j.at("kind") == "person");
    }
  }

  TEST_CASE("date, time and date-time read RFC 3339's fields in range, 29 February in leap years only") {
    const auto g = [](const char* format) {
      return schema_grammar(json{{"type", "string"}, {"format", format}});
    };
    const auto date = g("date"), time = g("time"), date_time = g("date-time");
    const auto quoted = [](const std::string& s) { return "\"" + s + "\""; };
    for (const char* ok : {"2024-01-31", "2024-12-01", "2024-02-29", "2000-02-29", "1996-02-29", "2023-02-28",
                           "2023-04-30", "0000-02-29", "2400-02-29", "1640-02-29"})
      CHECK_MESSAGE(reads(*date, quoted(ok)), ok);
    for (const char* bad : {"2024-99-99", "2024-00-10", "2024-13-01", "2024-01-00", "2024-01-32", "2023-02-29",
                            "1900-02-29", "2100-02-29", "2024-04-31", "2024-02-30", "2019-02-29", "1642-02-29"})
      CHECK_FALSE_MESSAGE(reads(*date, quoted(bad)), bad);
    for (const char* ok : {"00:00:00Z", "23:59:59Z", "23:59:60Z", "12:30:00.125+01:00", "01:02:03-23:59"})
      CHECK_MESSAGE(reads(*time, quoted(ok)), ok);
    for (const char* bad : {"99:99:99Z", "24:00:00Z", "12:60:00Z", "12:00:61Z", "12:00:00", "12:00:00+24:00",
                            "12:00:00+01:60"})
      CHECK_FALSE_MESSAGE(reads(*time, quoted(bad)), bad);
    CHECK(reads(*date_time, quoted("2024-02-29T23:59:60.5Z")));
    CHECK_FALSE(reads(*date_time, quoted("2023-02-29T10:00:00Z")));
    CHECK_FALSE(reads(*date_time, quoted("2024-02-29T10:00:00")));
  }

  TEST_CASE("what the subset cannot follow is refused by name") {
    for (const auto& [schema, word] : std::vector<std::pair<const char*, const char*>>{
             {R"({"type": "string", "pattern": "a+"})", "pattern"},
             {R"({"type": "integer", "minimum": 3})", "minimum"},
             {R"({"oneOf": [{"type": "string"}]})", "oneOf"},
             {R"({"$ref": "#/$defs/missing"})", "names nothing"},
             {R"({"type": "thing"})", "unknown type"},
             {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "'b'"},
             {R"({"type": "array", "minItems": 3, "maxItems": 2})", "maxItems"}}) {
      auto g = grammar::json_schema_grammar(json::parse(schema));
      REQUIRE_FALSE(g.is_ok());
      CHECK_MESSAGE(g.error().message().find(word) != std::string::npos, g.error().message());
    }
    json deep = {{"type", "string"}};
    for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
    CHECK(grammar::json_schema_grammar(deep).error().message().find("nested deeper") != std::string::npos);
  }

  TEST_CASE("the schema compiler's bounds hold at their limits: 32 nested schemas, $ref counted, parse states") {
    const auto nested = [](int levels) {  // `levels` schemas inside the outermost
      json s = {{"type", "string"}};
      for (int i = 0; i < levels; ++i) s = {{"type", "array"}, {"items", s}};
      return s;
    };
    CHECK(grammar::json_schema_grammar(nested(32)).is_ok());
    CHECK(grammar::json_schema_grammar(nested(33)).error().message().find("nested deeper than 32") != std::string::npos);
    // A $ref is a level: 31 arrays inside a reference reach 32, 32 pass it.
    const auto referenced = [&](int levels) { return json{{"$defs", {{"a", nested(levels)}}}, {"$ref", "#/$defs/a"}}; };
    CHECK(grammar::json_schema_grammar(referenced(31)).is_ok());
    CHECK(grammar::json_schema_grammar(referenced(32)).error().message().find("nested deeper") != std::string::npos);
    // Two kinds of array that read the same text, nested k deep: the stacks double with each '['. Nested 8 deep a
    // state reaches 1024 (the bound), 9 deep it would pass it: refused when compiled, by what it is.
    const auto ambiguous = [](int k) {
      json s = {{"type", "integer"}};
      for (int i = 0; i < k; ++i)
        s = {{"anyOf", {{{"type", "array"}, {"items", s}, {"maxItems", 1}}, {{"type", "array"}, {"items", s}, {"maxItems", 2}}}}};
      return s;
    };
    auto eight = grammar::json_schema_grammar(ambiguous(8));
    REQUIRE_MESSAGE(eight.is_ok(), eight.error().message());
    grammar::match_state s = grammar::start_state(*eight.value());
    REQUIRE(grammar::advance(*eight.value(), s, std::string(8, '[')));
    CHECK(s.stacks.size() == grammar::max_state_stacks);
    const auto nine = grammar::json_schema_grammar(ambiguous(9));
    REQUIRE_FALSE(nine.is_ok());
    CHECK(nine.error().message().find("more than 1024 ways") != std::string::npos);
    // The same blow-up behind a long const the compile's walk does not reach: the matcher stops there, too wide (a
    // request ends with an error saying so).
    const json late = {{"type", "object"},
                       {"properties", {{"a", {{"const", std::string(600, 'x')}}}, {"b", ambiguous(9)}}},
                       {"required", {"a", "b"}}};
    auto g = grammar::json_schema_grammar(late);
    REQUIRE_MESSAGE(g.is_ok(), g.error().message());
    grammar::match_state m = grammar::start_state(*g.value());
    CHECK_FALSE(grammar::advance(*g.value(), m, R"({"a":")" + std::string(600, 'x') + R"(","b":)" + std::string(9, '[')));
    CHECK(m.too_wide);
  }

  TEST_CASE("the matcher's stacks nest at most 1024 deep") {
    grammar::grammar g;  // r: "[" r "]" | "x"
    const uint32_t r = g.add_rule("r");
    g.add(r, {grammar::any_of("["), grammar::ref(r), grammar::any_of("]")});
    g.add(r, grammar::literal("x"));
    REQUIRE(g.finish(r).is_ok());
    const auto reads_nested = [&](size_t depth) {
      grammar::match_state s = grammar::start_state(g);
      return grammar::advance(g, s, std::string(depth, '[') + "x" + std::string(depth, ']')) && s.accepts();
    };
    CHECK(reads_nested(grammar::max_stack_depth - 1));
    CHECK_FALSE(reads_nested(grammar::max_stack_depth + 1));
  }

  TEST_CASE("the tokens a state allows are those whose bytes it reads, and masks are kept per state") {
    const auto& vocab = *test::real_model().vocab;
    auto trie = std::make_shared<const grammar::token_trie>(vocab);
    const grammar::constraint c(grammar::json_object_grammar(), trie);
    const auto first = c.allowed(c.start());
    size_t allowed = 0;
    for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
      if (!first->test(id)) continue;
      ++allowed;
      CHECK(trie->bytes(id)[0] == '{');
      grammar::match_state s = c.start();
      CHECK(c.accept(s, id));
    }
    CHECK(allowed >= 1);
    grammar::match_state s = c.start();
    REQUIRE(grammar::advance(c.rules(), s, "{\"a"));
    const auto inside = c.allowed(s);  // inside a key: most tokens read as its text
    size_t in_string = 0;
    for (int32_t id = 0; id < inside->size(); ++id) in_string += inside->test(id);
    CHECK(in_string > size_t(vocab.vocab_size()) / 2);
    const uint64_t computed = c.computed();
    (void)c.allowed(s);
    CHECK(c.computed() == computed);
    CHECK(c.cached() >= 1);
    CHECK(inside->bytes() < size_t(vocab.vocab_size()) / 8 + 64);  // a bit per token
  }

  TEST_CASE("a constraint keeps its masks within its budget, the least recently used dropped") {
    const auto& vocab = *test::real_model().vocab;
    auto trie = std::make_shared<const grammar::token_trie>(vocab);
    // A long const: every byte of it a state of its own, each with a mask.
    const std::string text(2000, 'a');
    auto g = grammar::json_schema_grammar(json{{"const", text}});
    REQUIRE(g.is_ok());
    const size_t budget = 64 << 10;
    const grammar::constraint c(g.value(), trie, budget);
    grammar::match_state s = c.start();
    const size_t empty = c.bytes();
    for (char ch : json(text).dump()) {
      (void)c.allowed(s);
      CHECK(c.bytes() <= empty + budget);
      REQUIRE(grammar::advance(c.rules(), s, std::string_view(&ch, 1)));
    }
    CHECK(c.computed() > budget / (size_t(vocab.vocab_size()) / 8));  // more masks were made than the budget holds
    // The most recent mask is kept: asked again, it is not computed again.
    (void)c.allowed(s);
    const uint64_t computed = c.computed();
    (void)c.allowed(s);
    CHECK(c.computed() == computed);
  }

  TEST_CASE("a constrained sequence samples only what keeps its output in the schema, and ends when it is whole") {
    const auto& model = test::real_model();
    auto trie = std::make_shared<const grammar::token_trie>(*model.vocab);
    // Finite: every output ends within a few tokens. The second reads a free string first (it ends whole however long
    // the string runs: its budget closes it).
    const json finite = json::parse(R"({"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]},
        "ok": {"type": "boolean"}, "pets": {"type": "array", "items": {"type": "null"}, "maxItems": 2}},
        "required": ["mood", "ok"], "additionalProperties": false})");
    const json named = json::parse(R"({"type": "object", "properties": {"name": {"type": "string"},
        "ok": {"type": "boolean"}}, "required": ["name", "ok"], "additionalProperties": false})");
    std::vector<std::shared_ptr<const grammar::constraint>> constraints;
    for (int i = 0; i < 4; ++i)
      constraints.push_back(std::make_shared<const grammar::constraint>(schema_grammar(i < 3 ? finite : named), trie));
    for (const constrained_output& o : run_constrained(*trie, constraints, {0.0f, 1.0f, 1.0f, 1.0f}, 0, 200)) {
      CAPTURE(o.text);
      CHECK_FALSE(o.dead);
      REQUIRE(o.finish == gpu::finish_reason::stop);
      const json j = json::parse(o.text, nullptr, false);
      REQUIRE_FALSE(j.is_discarded());
      CHECK(j.at("ok").is_boolean());
      if (o.id == 4) CHECK(j.at("name").is_string());
      else CHECK((j.at("mood") == "happy" || j.at("mood") == "sad"));
    }
  }

  TEST_CASE("an output whose budget runs out takes the shortest way to a whole value") {
    const json named = json::parse(R"({"type": "object", "properties": {"name": {"type": "string"},
        "ok": {"type": "boolean"}}, "required": ["name", "ok"], "additionalProperties": false})");
    const auto g = schema_grammar(named);
    grammar::match_state s = grammar::start_state(*g);
    CHECK(grammar::closing_distance(*g, s) == 21);  // {"name":"","ok":true}
    REQUIRE(grammar::advance(*g, s, "{\"name\": \"ab"));
    CHECK(grammar::closing_distance(*g, s) == 12);  // ","ok":true}
    REQUIRE(grammar::advance(*g, s, "\",\"ok\":true}"));
    CHECK(grammar::closing_distance(*g, s) == 0);
    // Free strings at temperature 1 with 48 tokens at most: every output ends whole.
    auto trie = std::make_shared<const grammar::token_trie>(*test::real_model().vocab);
    auto constraint = std::make_shared<const grammar::constraint>(g, trie);
    for (const constrained_output& o : run_constrained(*trie, {4, constraint}, {1.0f, 1.0f, 1.0f, 1.0f}, 100, 48)) {
      CAPTURE(o.text);
      CHECK(o.finish == gpu::finish_reason::stop);
      const json j = json::parse(o.text, nullptr, false);
      REQUIRE_FALSE(j.is_discarded());
      CHECK(j.at("name").is_string());
      CHECK(j.at("ok").is_boolean());
    }
  }
}
