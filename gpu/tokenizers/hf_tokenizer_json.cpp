// Reading tokenizer.json (the model, the added tokens, the normalizer, pre-tokenizer, post-processor and decoder,
// each a step or a Sequence) and tokenizer_config.json into an hf_tokenizer's parts.
#include <fstream>
#include <sstream>

#include "gpu/formats/bounded_json.hpp"
#include "gpu/text.hpp"
#include "gpu/tokenizers/hf_tokenizer_parts.hpp"

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

}  // namespace

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

}  // namespace illm::gpu
