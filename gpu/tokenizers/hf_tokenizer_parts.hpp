#pragma once
// The parts of a Hugging Face tokenizer (hf_tokenizer.hpp), shared by the reader of tokenizer.json and
// tokenizer_config.json (hf_tokenizer_json.cpp) and what runs them on text (hf_tokenizer.cpp): the normalizer,
// pre-tokenizer and decoder steps, the added tokens, the BPE model and the post-processor's ids.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/tokenizers/bpe_model.hpp"
#include "gpu/tokenizers/hf_tokenizer.hpp"
#include "gpu/tokenizers/unicode_text.hpp"

namespace illm::gpu {

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

  status read_model(const nlohmann::json& model);
  status read_added(const nlohmann::json& list);
  /// Reads one step of a part of tokenizer.json, of type `type` (not Sequence).
  using step_reader = status (parts::*)(const nlohmann::json& step, const std::string& type);
  /// Reads the part `what` of tokenizer.json: nothing when it is null; each step of a Sequence (its array `key`);
  /// else one step, with `read_step`.
  status read_part(const nlohmann::json& j, const char* key, const char* what, step_reader read_step);
  status read_normalizer(const nlohmann::json& n) {
    return read_part(n, "normalizers", "normalizer", &parts::read_normalizer_step);
  }
  status read_pre_tokenizer(const nlohmann::json& p) {
    return read_part(p, "pretokenizers", "pre_tokenizer", &parts::read_pre_tokenizer_step);
  }
  status read_post_processor(const nlohmann::json& p) {
    return read_part(p, "processors", "post_processor", &parts::read_post_processor_step);
  }
  status read_decoder(const nlohmann::json& d) {
    return read_part(d, "decoders", "decoder", &parts::read_decoder_step);
  }
  status read_normalizer_step(const nlohmann::json& n, const std::string& type);
  status read_pre_tokenizer_step(const nlohmann::json& p, const std::string& type);
  status read_post_processor_step(const nlohmann::json& p, const std::string& type);
  status read_decoder_step(const nlohmann::json& d, const std::string& type);
  status read_config(const std::filesystem::path& path);
  int32_t id_named(const nlohmann::json& token) const;

  std::string normalized(std::string text) const;
  result<std::vector<piece>> pre_tokenized(piece p) const;
  /// The text split at added tokens: (text, added id or -1, starts at the input's start).
  std::vector<std::tuple<std::string_view, int32_t, bool>> split_added(std::string_view text) const;
  std::vector<std::string> decoded(std::vector<std::string> tokens, bool at_start) const;
};

/// Replaces every occurrence of `from` in `s` by `to`.
std::string replaced(std::string_view s, const std::string& from, const std::string& to);
/// Whether `s` starts with `prefix`.
inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace illm::gpu
