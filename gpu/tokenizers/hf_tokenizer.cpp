#include "gpu/tokenizers/hf_tokenizer.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

#include "gpu/text.hpp"
#include "gpu/tokenizers/bpe_model.hpp"
#include "gpu/tokenizers/unicode_text.hpp"

namespace illm::gpu {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

/// The largest tokenizer file read.
constexpr uintmax_t max_tokenizer_bytes = uintmax_t(256) << 20;
/// GPT-2's pre-tokenizer regex, which ByteLevel's use_regex applies.
constexpr const char* gpt2_pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
/// SentencePiece's word marker.
constexpr const char* metaspace = "\xE2\x96\x81";

/// A token the vocabulary adds outside the model: matched in the text before anything else.
struct added_token {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false;
};

/// One normalizer step.
struct normalizer_step {
  enum kind { form, prepend, replace, lowercase } what = form;
  normal_form nf = normal_form::nfc;
  std::string from, to;  // prepend: to; replace: from -> to
};

/// How a split keeps the matches of its pattern.
enum class split_behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

/// One pre-tokenizer step.
struct pre_step {
  enum kind { split, byte_level, metaspace_split, digits } what = split;
  std::optional<unicode_regex> regex;  // split (a literal pattern is escaped into one); byte_level with use_regex
  split_behavior behavior = split_behavior::isolated;
  bool invert = false;
  bool add_prefix_space = false;  // byte_level
  std::string replacement;        // metaspace
  enum prepend { always, first, never } prepend_scheme = always;
  bool split_words = true;        // metaspace: split before each replacement
};

/// One decoder step.
struct decoder_step {
  enum kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } what = byte_level;
  std::string from, to;  // replace; metaspace: from is the replacement
  int start = 0, stop = 0;
  bool strips_first = true;  // metaspace: the first token loses its leading space
};

/// A piece of text on its way to the model, and whether it starts where the input does.
struct piece {
  std::string text;
  bool at_origin = false;
};

status bad(const std::string& file, const std::string& what) {
  return {status_code::corrupt_model, text::format("{}: {}", file, what)};
}

result<json> read_json_file(const fs::path& path) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  if (ec) return status{status_code::io_error, text::format("{}: {}", path.string(), ec.message())};
  if (bytes > max_tokenizer_bytes) return bad(path.string(), text::format("{} bytes, larger than the limit", bytes));
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto j = parse_bounded_json<json>(buffer.str(), json_depth_outside_requests);
  if (j.too_deep) return bad(path.string(), j.error);
  if (!j.value || !j.value->is_object()) return bad(path.string(), "not a JSON object");
  return std::move(*j.value);
}

std::string string_at(const json& j, const char* key, const std::string& fallback = "") {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool bool_at(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

/// A regex that matches `literal` exactly.
std::string escaped(const std::string& literal) { return "\\Q" + literal + "\\E"; }

/// The pattern of a Split or Replace: {"Regex": ...} or {"String": ...}, as a regex.
result<unicode_regex> pattern_of(const json& step, const std::string& file, const std::string& where) {
  const auto p = step.find("pattern");
  if (p == step.end() || !p->is_object()) return bad(file, where + ": no pattern");
  if (auto r = p->find("Regex"); r != p->end() && r->is_string()) return unicode_regex::compile(r->get<std::string>());
  if (auto s = p->find("String"); s != p->end() && s->is_string()) return unicode_regex::compile(escaped(s->get<std::string>()));
  return bad(file, where + ": the pattern is neither Regex nor String");
}

/// Ranges of `text` as `behavior` cuts it by the matches `found` (sorted, disjoint).
std::vector<std::pair<size_t, size_t>> cut(size_t size, const std::vector<std::pair<size_t, size_t>>& found,
                                           split_behavior behavior, bool invert) {
  // Each range with whether it is a match (a delimiter), the text between the matches in between.
  std::vector<std::tuple<size_t, size_t, bool>> parts;
  size_t at = 0;
  for (auto [b, e] : found) {
    if (b > at) parts.emplace_back(at, b, invert);
    parts.emplace_back(b, e, !invert);
    at = e;
  }
  if (at < size) parts.emplace_back(at, size, invert);
  std::vector<std::pair<size_t, size_t>> out;
  bool glue_next = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto [b, e, delimiter] = parts[i];
    if (glue_next && !out.empty()) {
      out.back().second = e;
      glue_next = false;
      continue;
    }
    if (!delimiter) {
      out.emplace_back(b, e);
      continue;
    }
    switch (behavior) {
      case split_behavior::removed: break;
      case split_behavior::isolated: out.emplace_back(b, e); break;
      case split_behavior::merged_with_previous:
        if (!out.empty() && out.back().second == b && !std::get<2>(parts[i - 1])) out.back().second = e;
        else out.emplace_back(b, e);
        break;
      case split_behavior::merged_with_next:
        out.emplace_back(b, e);
        glue_next = i + 1 < parts.size() && !std::get<2>(parts[i + 1]);
        break;
      case split_behavior::contiguous:
        if (i > 0 && std::get<2>(parts[i - 1]) && !out.empty() && out.back().second == b) out.back().second = e;
        else out.emplace_back(b, e);
        break;
    }
  }
  return out;
}

/// Replaces every occurrence of `from` in `s` by `to`.
std::string replaced(std::string_view s, const std::string& from, const std::string& to) {
  if (from.empty()) return std::string(s);
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, from.size(), from) == 0) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

struct hf_tokenizer::parts {
  std::string file;
  std::optional<bpe_model> model;
  std::vector<std::string> pieces;  // by id: the vocabulary's and the added tokens' texts
  std::unordered_map<std::string, int32_t> ids;
  std::vector<added_token> added;   // longest content first
  std::vector<bool> special;        // by id
  std::vector<normalizer_step> normalizers;
  std::vector<pre_step> pre_steps;
  std::vector<decoder_step> decoders;
  std::vector<int32_t> prefix, suffix;  // the post-processor's ids around a text
  std::optional<int32_t> bos;
  std::vector<int32_t> eos;
  bool clean_up_spaces = false;  // tokenizer_config's clean_up_tokenization_spaces: decode_text drops " ." and the like

  status read_model(const json& model);
  status read_added(const json& list);
  /// Reads one step of a part of tokenizer.json, of type `type` (not Sequence).
  using step_reader = status (parts::*)(const json& step, const std::string& type);
  /// Reads the part `what` of tokenizer.json: nothing when it is null; each step of a Sequence (its array `key`);
  /// else one step, with `read_step`.
  status read_part(const json& j, const char* key, const char* what, step_reader read_step);
  status read_normalizer(const json& n) {
    return read_part(n, "normalizers", "normalizer", &parts::read_normalizer_step);
  }
  status read_pre_tokenizer(const json& p) {
    return read_part(p, "pretokenizers", "pre_tokenizer", &parts::read_pre_tokenizer_step);
  }
  status read_post_processor(const json& p) {
    return read_part(p, "processors", "post_processor", &parts::read_post_processor_step);
  }
  status read_decoder(const json& d) {
    return read_part(d, "decoders", "decoder", &parts::read_decoder_step);
  }
  status read_normalizer_step(const json& n, const std::string& type);
  status read_pre_tokenizer_step(const json& p, const std::string& type);
  status read_post_processor_step(const json& p, const std::string& type);
  status read_decoder_step(const json& d, const std::string& type);
  status read_config(const fs::path& path);
  int32_t id_named(const json& token) const;

  std::string normalized(std::string text) const;
  result<std::vector<piece>> pre_tokenized(piece p) const;
  /// The text split at added tokens: (text, added id or -1, starts at the input's start).
  std::vector<std::tuple<std::string_view, int32_t, bool>> split_added(std::string_view text) const;
  std::vector<std::string> decoded(std::vector<std::string> tokens, bool at_start) const;
};

status hf_tokenizer::parts::read_model(const json& m) {
  if (!m.is_object() || string_at(m, "type", "BPE") != "BPE")
    return bad(file, text::format("model: type {} is not supported (BPE)", m.is_object() ? m.value("type", json()).dump() : m.dump()));
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0))
    return bad(file, "model: dropout is not supported (it makes encoding random)");
  const auto vocab = m.find("vocab");
  if (vocab == m.end() || !vocab->is_object()) return bad(file, "model: no vocab object");
  std::unordered_map<std::string, int32_t> v;
  for (const auto& [text, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 22))
      return bad(file, text::format("model.vocab: '{}' has id {}", text, id.dump()));
    v.emplace(text, int32_t(id.get<int64_t>()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (const auto list = m.find("merges"); list != m.end() && list->is_array()) {
    for (const json& entry : *list) {
      if (entry.is_string()) {
        const std::string s = entry.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos) return bad(file, text::format("model.merges: '{}' is not two pieces", s));
        merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
        merges.emplace_back(entry[0].get<std::string>(), entry[1].get<std::string>());
      } else {
        return bad(file, text::format("model.merges: {} is not a merge", entry.dump()));
      }
    }
  }
  bpe_model::options o;
  o.byte_fallback = bool_at(m, "byte_fallback", false);
  o.fuse_unk = bool_at(m, "fuse_unk", false);
  o.ignore_merges = bool_at(m, "ignore_merges", false);
  o.continuing_prefix = string_at(m, "continuing_subword_prefix");
  if (!string_at(m, "end_of_word_suffix").empty()) return bad(file, "model: end_of_word_suffix is not supported");
  if (const std::string unk = string_at(m, "unk_token"); !unk.empty()) {
    if (!v.count(unk)) return bad(file, text::format("model: unk_token '{}' is not in the vocabulary", unk));
    o.unk_id = v[unk];
  }
  for (const auto& [text, id] : v) {
    if (size_t(id) >= pieces.size()) pieces.resize(size_t(id) + 1);
    pieces[size_t(id)] = text;
    ids[text] = id;
  }
  auto made = bpe_model::create(std::move(v), merges, o, file);
  if (!made.is_ok()) return made.error();
  model = std::move(made).value();
  return status::ok();
}

status hf_tokenizer::parts::read_added(const json& list) {
  if (list.is_null()) return status::ok();
  if (!list.is_array()) return bad(file, "added_tokens is not a list");
  for (const json& t : list) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        t["id"].get<int64_t>() >= (1 << 22) || string_at(t, "content").empty())
      return bad(file, text::format("added_tokens: {} has no id or content", t.dump().substr(0, 200)));
    added_token a{int32_t(t["id"].get<int64_t>()), string_at(t, "content"), bool_at(t, "special", false),
                  bool_at(t, "lstrip", false), bool_at(t, "rstrip", false), bool_at(t, "single_word", false)};
    if (size_t(a.id) >= pieces.size()) pieces.resize(size_t(a.id) + 1);
    pieces[size_t(a.id)] = a.content;
    ids[a.content] = a.id;
    added.push_back(std::move(a));
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const added_token& a, const added_token& b) { return a.content.size() > b.content.size(); });
  special.assign(pieces.size(), false);
  for (const added_token& a : added) special[size_t(a.id)] = a.special;
  return status::ok();
}

status hf_tokenizer::parts::read_part(const json& j, const char* key, const char* what, step_reader read_step) {
  if (j.is_null()) return status::ok();
  const std::string type = string_at(j, "type");
  if (type != "Sequence") return (this->*read_step)(j, type);
  if (!j.contains(key) || !j[key].is_array()) return bad(file, text::format("{}: Sequence without {}", what, key));
  for (const json& step : j[key]) ILLM_RETURN_IF_ERROR(read_part(step, key, what, read_step));
  return status::ok();
}

status hf_tokenizer::parts::read_normalizer_step(const json& n, const std::string& type) {
  static const std::map<std::string, normal_form> forms{
      {"NFC", normal_form::nfc}, {"NFD", normal_form::nfd}, {"NFKC", normal_form::nfkc}, {"NFKD", normal_form::nfkd}};
  if (auto f = forms.find(type); f != forms.end()) {
    normalizers.push_back({normalizer_step::form, f->second, "", ""});
  } else if (type == "Prepend") {
    normalizers.push_back({normalizer_step::prepend, {}, "", string_at(n, "prepend")});
  } else if (type == "Lowercase") {
    normalizers.push_back({normalizer_step::lowercase, {}, "", ""});
  } else if (type == "Replace") {
    const auto p = n.find("pattern");
    if (p == n.end() || !p->contains("String") || !(*p)["String"].is_string())
      return bad(file, "normalizer: Replace supports String patterns only");
    normalizers.push_back({normalizer_step::replace, {}, (*p)["String"].get<std::string>(), string_at(n, "content")});
  } else {
    return bad(file, text::format("normalizer: type '{}' is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace, "
                                  "Lowercase, Sequence)", type));
  }
  return status::ok();
}

status hf_tokenizer::parts::read_pre_tokenizer_step(const json& p, const std::string& type) {
  pre_step s;
  if (type == "Split") {
    auto regex = pattern_of(p, file, "pre_tokenizer Split");
    if (!regex.is_ok()) return bad(file, "pre_tokenizer Split: " + regex.error().message());
    s.regex = std::move(regex).value();
    static const std::map<std::string, split_behavior> behaviors{
        {"Isolated", split_behavior::isolated}, {"Removed", split_behavior::removed},
        {"MergedWithPrevious", split_behavior::merged_with_previous},
        {"MergedWithNext", split_behavior::merged_with_next}, {"Contiguous", split_behavior::contiguous}};
    const auto b = behaviors.find(string_at(p, "behavior"));
    if (b == behaviors.end()) return bad(file, text::format("pre_tokenizer Split: behavior '{}' is unknown", string_at(p, "behavior")));
    s.behavior = b->second;
    s.invert = bool_at(p, "invert", false);
  } else if (type == "ByteLevel") {
    s.what = pre_step::byte_level;
    s.add_prefix_space = bool_at(p, "add_prefix_space", true);
    if (bool_at(p, "use_regex", true)) s.regex = unicode_regex::compile(gpt2_pattern).value();
  } else if (type == "Metaspace") {
    s.what = pre_step::metaspace_split;
    s.replacement = string_at(p, "replacement", metaspace);
    const std::string scheme = string_at(p, "prepend_scheme", bool_at(p, "add_prefix_space", true) ? "always" : "never");
    if (scheme != "always" && scheme != "first" && scheme != "never")
      return bad(file, text::format("pre_tokenizer Metaspace: prepend_scheme '{}' is unknown", scheme));
    s.prepend_scheme = scheme == "always" ? pre_step::always : scheme == "first" ? pre_step::first : pre_step::never;
    s.split_words = bool_at(p, "split", true);
    auto marker = unicode_regex::compile(escaped(s.replacement));  // where split_words cuts, compiled once
    if (!marker.is_ok()) return bad(file, "pre_tokenizer Metaspace: " + marker.error().message());
    s.regex = std::move(marker).value();
  } else if (type == "Digits") {
    s.what = pre_step::digits;
    s.regex = unicode_regex::compile("\\p{Nd}").value();
    s.behavior = bool_at(p, "individual_digits", false) ? split_behavior::isolated : split_behavior::contiguous;
  } else {
    return bad(file, text::format("pre_tokenizer: type '{}' is not supported (Split, ByteLevel, Metaspace, Digits, "
                                  "Sequence)", type));
  }
  pre_steps.push_back(std::move(s));
  return status::ok();
}

int32_t hf_tokenizer::parts::id_named(const json& token) const {
  const std::string name = token.is_string() ? token.get<std::string>() : token.is_object() ? string_at(token, "content") : "";
  const auto it = ids.find(name);
  return name.empty() || it == ids.end() ? -1 : it->second;
}

status hf_tokenizer::parts::read_post_processor_step(const json& p, const std::string& type) {
  if (type == "ByteLevel") return status::ok();  // offsets only
  if (type != "TemplateProcessing")
    return bad(file, text::format("post_processor: type '{}' is not supported (TemplateProcessing, ByteLevel, "
                                  "Sequence)", type));
  if (!p.contains("single") || !p["single"].is_array()) return bad(file, "post_processor: TemplateProcessing without single");
  bool after = false;
  for (const json& item : p["single"]) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    const std::string name = item.contains("SpecialToken") ? string_at(item["SpecialToken"], "id") : "";
    const json* entry = p.contains("special_tokens") && p["special_tokens"].contains(name) ? &p["special_tokens"][name] : nullptr;
    if (!entry || !entry->contains("ids") || !(*entry)["ids"].is_array())
      return bad(file, text::format("post_processor: special token '{}' has no ids", name));
    for (const json& id : (*entry)["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || size_t(id.get<int64_t>()) >= pieces.size())
        return bad(file, text::format("post_processor: special token '{}' has id {}", name, id.dump()));
      (after ? suffix : prefix).push_back(int32_t(id.get<int64_t>()));
    }
  }
  return status::ok();
}

status hf_tokenizer::parts::read_decoder_step(const json& d, const std::string& type) {
  decoder_step s;
  if (type == "ByteLevel") {
    s.what = decoder_step::byte_level;
  } else if (type == "ByteFallback") {
    s.what = decoder_step::byte_fallback;
  } else if (type == "Fuse") {
    s.what = decoder_step::fuse;
  } else if (type == "Replace") {
    const auto p = d.find("pattern");
    if (p == d.end() || !p->contains("String") || !(*p)["String"].is_string())
      return bad(file, "decoder: Replace supports String patterns only");
    s = {decoder_step::replace, (*p)["String"].get<std::string>(), string_at(d, "content")};
  } else if (type == "Strip") {
    s.what = decoder_step::strip;
    s.from = string_at(d, "content", " ");
    s.start = d.value("start", 0);
    s.stop = d.value("stop", 0);
  } else if (type == "Metaspace") {
    s.what = decoder_step::metaspace;
    s.from = string_at(d, "replacement", metaspace);
    s.strips_first = string_at(d, "prepend_scheme", bool_at(d, "add_prefix_space", true) ? "always" : "never") != "never";
  } else {
    return bad(file, text::format("decoder: type '{}' is not supported (ByteLevel, Metaspace, Replace, ByteFallback, "
                                  "Fuse, Strip, Sequence)", type));
  }
  decoders.push_back(std::move(s));
  return status::ok();
}

status hf_tokenizer::parts::read_config(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return status::ok();
  auto config = read_json_file(path);
  if (!config.is_ok()) return config.error();
  for (auto [key, out] : {std::pair{"bos_token", &bos}}) {
    if (!config->contains(key) || (*config)[key].is_null()) continue;
    const int32_t id = id_named((*config)[key]);
    if (id < 0) return bad(path.string(), text::format("{}: {} is not a token of tokenizer.json", key, (*config)[key].dump()));
    *out = id;
  }
  clean_up_spaces = bool_at(*config, "clean_up_tokenization_spaces", false);
  if (config->contains("eos_token") && !(*config)["eos_token"].is_null()) {
    const int32_t id = id_named((*config)["eos_token"]);
    if (id < 0) return bad(path.string(), text::format("eos_token: {} is not a token of tokenizer.json", (*config)["eos_token"].dump()));
    eos.push_back(id);
  }
  return status::ok();
}

std::string hf_tokenizer::parts::normalized(std::string text) const {
  for (const normalizer_step& n : normalizers) switch (n.what) {
      case normalizer_step::form: text = normalize(text, n.nf); break;
      case normalizer_step::prepend:
        if (!text.empty()) text = n.to + text;
        break;
      case normalizer_step::replace: text = replaced(text, n.from, n.to); break;
      case normalizer_step::lowercase:
        for (char& c : text) c = char(std::tolower(uint8_t(c)));  // ASCII; other scripts keep their case
        break;
    }
  return text;
}

result<std::vector<piece>> hf_tokenizer::parts::pre_tokenized(piece whole) const {
  std::vector<piece> pieces_now{std::move(whole)};
  for (const pre_step& s : pre_steps) {
    std::vector<piece> next;
    for (piece& p : pieces_now) {
      if (s.what == pre_step::metaspace_split) {
        p.text = replaced(p.text, " ", s.replacement);
        const bool prepend = s.prepend_scheme == pre_step::always || (s.prepend_scheme == pre_step::first && p.at_origin);
        if (prepend && !starts_with(p.text, s.replacement)) p.text = s.replacement + p.text;
        if (!s.split_words) {
          next.push_back(std::move(p));
          continue;
        }
        auto found = s.regex->matches(p.text);
        if (!found.is_ok()) return found.error();
        for (auto [b, e] : cut(p.text.size(), found.value(), split_behavior::merged_with_next, false))
          next.push_back({p.text.substr(b, e - b), p.at_origin && b == 0});
        continue;
      }
      if (s.what == pre_step::byte_level && s.add_prefix_space && !starts_with(p.text, " ")) p.text = " " + p.text;
      std::vector<std::pair<size_t, size_t>> ranges{{0, p.text.size()}};
      if (s.regex) {
        auto found = s.regex->matches(p.text);
        if (!found.is_ok()) return found.error();
        ranges = cut(p.text.size(), found.value(), s.behavior, s.invert);
      }
      for (auto [b, e] : ranges) {
        piece part{p.text.substr(b, e - b), p.at_origin && b == 0};
        if (s.what == pre_step::byte_level) {
          std::string mapped;
          for (char c : part.text) mapped += byte_as_char(uint8_t(c));
          part.text = std::move(mapped);
        }
        next.push_back(std::move(part));
      }
    }
    pieces_now = std::move(next);
  }
  return pieces_now;
}

std::vector<std::tuple<std::string_view, int32_t, bool>> hf_tokenizer::parts::split_added(std::string_view text) const {
  std::vector<std::tuple<std::string_view, int32_t, bool>> out;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  const auto is_word = [](char c) { return std::isalnum(uint8_t(c)) || c == '_' || uint8_t(c) >= 0x80; };
  size_t start = 0;  // of the text not yet emitted
  for (size_t i = 0; i < text.size() && !added.empty(); ++i) {
    const added_token* hit = nullptr;
    for (const added_token& a : added)  // longest first
      if (text.compare(i, a.content.size(), a.content) == 0 &&
          (!a.single_word || ((i == 0 || !is_word(text[i - 1])) &&
                              (i + a.content.size() == text.size() || !is_word(text[i + a.content.size()]))))) {
        hit = &a;
        break;
      }
    if (!hit) continue;
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip)
      while (b > start && is_space(text[b - 1])) --b;
    if (hit->rstrip)
      while (e < text.size() && is_space(text[e])) ++e;
    if (b > start) out.emplace_back(text.substr(start, b - start), -1, start == 0);
    out.emplace_back(text.substr(b, e - b), hit->id, b == 0);
    start = e;
    i = e - 1;
  }
  if (start < text.size()) out.emplace_back(text.substr(start), -1, start == 0);
  return out;
}

std::vector<std::string> hf_tokenizer::parts::decoded(std::vector<std::string> tokens, bool at_start) const {
  bool fused = false;
  for (const decoder_step& d : decoders) {
    switch (d.what) {
      case decoder_step::byte_level: {
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mine;
          bool all = true;
          for (size_t i = 0; i < t.size() && all;) {
            auto [c, length] = next_utf8(t, i);
            const int b = char_as_byte(c);
            all = b >= 0;
            if (all) mine += char(b);
            i += length;
          }
          bytes += all ? mine : t;
        }
        tokens = {bytes};
        fused = true;
        break;
      }
      case decoder_step::replace:
        for (std::string& t : tokens) t = replaced(t, d.from, d.to);
        break;
      case decoder_step::byte_fallback:
        for (std::string& t : tokens)
          if (t.size() == 6 && starts_with(t, "<0x") && t[5] == '>' && std::isxdigit(uint8_t(t[3])) &&
              std::isxdigit(uint8_t(t[4])))
            t = std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
        break;
      case decoder_step::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens = {all};
        fused = true;
        break;
      }
      case decoder_step::strip:
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          const bool text_start = !fused || at_start;
          for (int k = 0; k < d.start && text_start && starts_with(t, d.from); ++k) t.erase(0, d.from.size());
          for (int k = 0; k < d.stop && t.size() >= d.from.size() && t.compare(t.size() - d.from.size(), d.from.size(), d.from) == 0; ++k)
            t.erase(t.size() - d.from.size());
        }
        break;
      case decoder_step::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replaced(tokens[i], d.from, " ");
          if (i == 0 && at_start && d.strips_first && starts_with(tokens[i], " ")) tokens[i].erase(0, 1);
        }
        break;
    }
  }
  return tokens;
}

hf_tokenizer::~hf_tokenizer() = default;

result<std::shared_ptr<const hf_tokenizer>> hf_tokenizer::load(const std::string& path, int model_vocab) {
  std::error_code ec;
  const fs::path file = fs::is_directory(path, ec) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  auto j = read_json_file(file);
  if (!j.is_ok()) return j.error();
  auto t = from_json(j.value(), file.string(), model_vocab);
  if (!t.is_ok()) return t.error();
  ILLM_RETURN_IF_ERROR(t.value()->parts_->read_config(file.parent_path() / "tokenizer_config.json"));
  return std::shared_ptr<const hf_tokenizer>(std::move(t).value());
}

result<std::shared_ptr<hf_tokenizer>> hf_tokenizer::from_json(const nlohmann::json& j, const std::string& origin,
                                                              int model_vocab) {
  std::shared_ptr<hf_tokenizer> t(new hf_tokenizer());
  t->parts_ = std::make_unique<parts>();
  parts& p = *t->parts_;
  p.file = origin;
  if (!j.is_object()) return bad(p.file, "not a JSON object");
  ILLM_RETURN_IF_ERROR(p.read_model(j.contains("model") ? j["model"] : json()));
  ILLM_RETURN_IF_ERROR(p.read_added(j.value("added_tokens", json())));
  ILLM_RETURN_IF_ERROR(p.read_normalizer(j.value("normalizer", json())));
  ILLM_RETURN_IF_ERROR(p.read_pre_tokenizer(j.value("pre_tokenizer", json())));
  ILLM_RETURN_IF_ERROR(p.read_post_processor(j.value("post_processor", json())));
  ILLM_RETURN_IF_ERROR(p.read_decoder(j.value("decoder", json())));
  if (model_vocab > 0 && p.pieces.size() > size_t(model_vocab))
    return bad(p.file, text::format("ids up to {}, past the model's vocabulary of {}", p.pieces.size() - 1, model_vocab));
  p.special.resize(p.pieces.size(), false);
  if (!p.prefix.empty()) p.bos = p.prefix.front();
  return t;
}

void hf_tokenizer::set_specials(std::optional<int32_t> bos, std::vector<int32_t> eos) {
  if (bos) parts_->bos = bos;
  parts_->eos = std::move(eos);
}

std::vector<int32_t> hf_tokenizer::encode(std::string_view text, bool add_special) const {
  auto ids = try_encode(text, add_special);
  return ids.is_ok() ? std::move(ids).value() : std::vector<int32_t>();
}

result<std::vector<int32_t>> hf_tokenizer::try_encode(std::string_view text, bool add_special) const {
  const parts& p = *parts_;
  std::vector<int32_t> out;
  if (add_special) out = p.prefix;
  for (auto [segment, id, at_origin] : p.split_added(text)) {
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    auto words = p.pre_tokenized({p.normalized(std::string(segment)), at_origin});
    if (!words.is_ok()) return words.error();
    for (const piece& word : words.value()) p.model->encode_word(word.text, out);
  }
  if (add_special) out.insert(out.end(), p.suffix.begin(), p.suffix.end());
  return out;
}

std::string hf_tokenizer::decode(int32_t prev, int32_t token) const {
  if (token < 0 || token >= vocab_size() || is_special(token)) return {};
  const bool at_start = prev < 0 || (parts_->bos && prev == *parts_->bos);
  std::string out;
  for (const std::string& t : parts_->decoded({parts_->pieces[size_t(token)]}, at_start)) out += t;
  return out;
}

std::string hf_tokenizer::decode_text(std::span<const int32_t> ids, bool skip_special) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids)
    if (id >= 0 && id < vocab_size() && !(skip_special && is_special(id))) tokens.push_back(parts_->pieces[size_t(id)]);
  std::string out;
  for (const std::string& t : parts_->decoded(std::move(tokens), true)) out += t;
  if (parts_->clean_up_spaces)  // transformers' clean_up_tokenization
    for (auto [from, to] : {std::pair{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
                            {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}})
      out = replaced(out, from, to);
  return valid_utf8(out);
}

int hf_tokenizer::vocab_size() const { return int(parts_->pieces.size()); }

bool hf_tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < parts_->special.size() && parts_->special[size_t(id)];
}

std::optional<int32_t> hf_tokenizer::bos_id() const { return parts_->bos; }

std::vector<int32_t> hf_tokenizer::end_ids() const { return parts_->eos; }

int32_t hf_tokenizer::id_of(std::string_view piece) const {
  const auto it = parts_->ids.find(std::string(piece));
  return it == parts_->ids.end() ? -1 : it->second;
}

}  // namespace illm::gpu
