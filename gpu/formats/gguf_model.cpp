#include "gpu/formats/gguf_model.hpp"

#include <algorithm>
#include <map>

#include "gpu/text.hpp"
#include "gpu/tokenizers/hf_tokenizer.hpp"
#include "gpu/tokenizers/llama2c_tokenizer.hpp"
#include "gpu/tokenizers/unicode_text.hpp"

namespace illm::gpu {

namespace {

using json = nlohmann::json;

status bad_key(const gguf_file& f, const std::string& key, const std::string& what) {
  return {status_code::corrupt_model, text::format("{}: {}: {}", f.path(), key, what)};
}

/// A whole number of the metadata in [lo, hi]; `fallback` when absent (none: required).
result<int64_t> integer(const gguf_file& f, const std::string& key, int64_t lo, int64_t hi,
                        std::optional<int64_t> fallback = std::nullopt) {
  const json& m = f.metadata();
  if (!m.contains(key)) {
    if (fallback) return *fallback;
    return bad_key(f, key, "missing");
  }
  const json& v = m[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    return bad_key(f, key, text::format("{} is not a whole number in [{}, {}]", v.dump(), lo, hi));
  return v.get<int64_t>();
}

result<float> positive(const gguf_file& f, const std::string& key, float fallback) {
  const json& m = f.metadata();
  if (!m.contains(key)) return fallback;
  if (!m[key].is_number() || !(m[key].get<double>() > 0.0)) return bad_key(f, key, m[key].dump() + " is not positive");
  return float(m[key].get<double>());
}

std::string text_of(const gguf_file& f, const std::string& key) {
  const json& m = f.metadata();
  return m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : "";
}

/// YaRN's {arch}.rope.scaling.* into `r`: the factor, the original context, beta_fast and beta_slow (32 and 1 where
/// absent, as llama.cpp takes them). An attention factor of the file's own is refused: the engine derives it.
status read_yarn(const gguf_file& f, const std::string& arch, rope_frequencies& r) {
  const std::string key = arch + ".rope.scaling.";
  if (f.metadata().contains(key + "yarn_attn_factor") || f.metadata().contains(key + "attn_factor"))
    return bad_key(f, key + "yarn_attn_factor", "an attention factor of the file's own is not supported");
  auto factor = positive(f, key + "factor", 1.0f);
  auto fast = positive(f, key + "yarn_beta_fast", 32.0f);
  auto slow = positive(f, key + "yarn_beta_slow", 1.0f);
  auto original = integer(f, key + "original_context_length", 1, 1 << 30);
  for (auto* v : {&factor, &fast, &slow})
    if (!v->is_ok()) return v->error();
  if (!original.is_ok()) return original.error();
  r.scaling = rope_scaling_kind::yarn;
  r.factor = factor.value();
  r.beta_fast = fast.value();
  r.beta_slow = slow.value();
  r.original_positions = int(original.value());
  return status::ok();
}

/// The shape fields of {arch}.* into `c`.
status read_shape(const gguf_file& f, const std::string& arch, model_config& c) {
  const auto get = [&](const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback, int& out) {
    auto v = integer(f, arch + "." + key, lo, hi, fallback);
    if (!v.is_ok()) return v.error();
    out = int(v.value());
    return status::ok();
  };
  ILLM_RETURN_IF_ERROR(get("embedding_length", 1, 1 << 16, std::nullopt, c.dim));
  ILLM_RETURN_IF_ERROR(get("feed_forward_length", 1, 1 << 18, std::nullopt, c.hidden_dim));
  ILLM_RETURN_IF_ERROR(get("block_count", 1, 1024, std::nullopt, c.n_layers));
  ILLM_RETURN_IF_ERROR(get("attention.head_count", 1, 1024, std::nullopt, c.n_heads));
  ILLM_RETURN_IF_ERROR(get("attention.head_count_kv", 1, 1024, c.n_heads, c.n_kv_heads));
  ILLM_RETURN_IF_ERROR(get("context_length", 1, 1 << 30, std::nullopt, c.max_seq));
  int key_length = 0, value_length = 0;
  ILLM_RETURN_IF_ERROR(get("attention.key_length", 0, 512, 0, key_length));
  ILLM_RETURN_IF_ERROR(get("attention.value_length", 0, 512, key_length, value_length));
  if (value_length != key_length)
    return bad_key(f, arch + ".attention.value_length", "differs from key_length (one head width is computed)");
  if (key_length > 0 && (c.dim % c.n_heads != 0 || key_length != c.dim / c.n_heads)) c.head_size = key_length;
  auto theta = positive(f, arch + ".rope.freq_base", 10000.0f);
  auto eps = positive(f, arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (!theta.is_ok()) return theta.error();
  if (!eps.is_ok()) return eps.error();
  c.rope_theta = theta.value();
  c.norm_eps = eps.value();
  const std::string scaling = text_of(f, arch + ".rope.scaling.type");
  if (scaling == "linear") {
    auto factor = positive(f, arch + ".rope.scaling.factor", 1.0f);
    if (!factor.is_ok()) return factor.error();
    c.rope_scaling.scaling = rope_scaling_kind::linear;
    c.rope_scaling.factor = factor.value();
  } else if (scaling == "yarn") {
    return read_yarn(f, arch, c.rope_scaling);
  } else if (!scaling.empty() && scaling != "none") {
    return bad_key(f, arch + ".rope.scaling.type", "'" + scaling + "' is not supported (none, linear, yarn)");
  }
  return status::ok();
}

/// rope_freqs.weight: the divisor of each pair's RoPE frequency (llama.cpp's form of Llama 3.1's scaling).
status read_pair_factors(const gguf_file& f, const stored_tensor& t, model_config& c) {
  const uint64_t pairs = uint64_t(c.head_dim()) / 2;
  if (t.shape != std::vector<uint64_t>{pairs} || pairs > uint64_t(rope_frequencies::max_pairs))
    return bad_key(f, "rope_freqs.weight", text::format("shape [{}], the heads want [{}]", text::join(t.shape, ", "), pairs));
  c.rope_scaling.scaling = rope_scaling_kind::per_pair;
  return read_floats(t, 0, pairs, c.rope_scaling.pair_divisors);
}

/// GGUF's names of the model's tensors. llama's q and k rows pair adjacent elements already (llama.cpp's converter
/// reorders them); qwen's and gpt-oss's do not.
tensor_naming gguf_naming(const gguf_model& m) {
  const bool experts = m.config.has_experts();
  tensor_naming naming{"token_embd.weight", "output_norm.weight", "output.weight", "blk.",
          {{"rms_att", "attn_norm.weight"}, {"wq", "attn_q.weight"}, {"wk", "attn_k.weight"}, {"wv", "attn_v.weight"},
           {"wo", "attn_output.weight"}, {"rms_ffn", "ffn_norm.weight"},
           {"w1", experts ? "ffn_gate_exps.weight" : "ffn_gate.weight"},
           {"w3", experts ? "ffn_up_exps.weight" : "ffn_up.weight"},
           {"w2", experts ? "ffn_down_exps.weight" : "ffn_down.weight"}, {"router", "ffn_gate_inp.weight"},
           {"shared_w1", "ffn_gate_shexp.weight"}, {"shared_w3", "ffn_up_shexp.weight"},
           {"shared_w2", "ffn_down_shexp.weight"}, {"shared_gate", "ffn_gate_inp_shexp.weight"},
           {"bq", "attn_q.bias"}, {"bk", "attn_k.bias"}, {"bv", "attn_v.bias"}, {"q_norm", "attn_q_norm.weight"},
           {"k_norm", "attn_k_norm.weight"}, {"bo", "attn_output.bias"}, {"sinks", "attn_sinks.weight"},
           {"router_bias", "ffn_gate_inp.bias"}, {"b1", "ffn_gate_exps.bias"}, {"b3", "ffn_up_exps.bias"},
           {"b2", "ffn_down_exps.bias"}},
          m.architecture != "llama"};
  if (m.architecture == "gpt-oss") naming.suffix["rms_ffn"] = "post_attention_norm.weight";
  return naming;
}

/// The architectures read, and what sets each apart.
struct gguf_architecture {
  const char* name;
  bool qkv_bias, qk_norm;
  bool experts;     ///< its layers' feed-forward is routed experts (llama: when the file says it has experts)
  bool norm_topk;   ///< the chosen experts' weights are renormalised (unless {arch}.expert_weights_norm says)
  bool gpt_oss = false;  ///< sliding layers, sinks, biases on the output, router and experts, the clamped gate
};

constexpr gguf_architecture gguf_architectures[] = {
    {"llama", false, false, false, true},   {"qwen2", true, false, false, false}, {"qwen3", false, true, false, false},
    {"qwen2moe", true, false, true, false}, {"qwen3moe", false, true, true, true}, {"gpt-oss", true, false, true, true, true},
};

/// gpt-oss's layers: {arch}.attention.sliding_window (required) over every layer where l % pattern < pattern - 1
/// ({arch}.attention.sliding_window_pattern, 2 where absent), and what its graph always has (llama.cpp's
/// openai-moe): sinks, biases, the clamped gate (alpha 1.702, limit 7, up + 1), YaRN's ends not rounded (as the
/// model's config.json says, where llama.cpp rounds them).
status read_gpt_oss(const gguf_file& f, const std::string& arch, model_config& c) {
  auto window = integer(f, arch + ".attention.sliding_window", 1, 1 << 30);
  auto pattern = integer(f, arch + ".attention.sliding_window_pattern", 0, 1024, 2);
  if (!window.is_ok()) return window.error();
  if (!pattern.is_ok()) return pattern.error();
  c.sliding_window = int(window.value());
  c.sliding_period = int(pattern.value());
  c.attention_sinks = c.o_bias = c.expert_bias = true;
  c.activation = {1.702f, 7.0f, 1.0f};
  c.rope_scaling.truncate = false;
  return status::ok();
}

/// The experts of {arch}.expert_* into `c`: their count, how many a token uses, their width (the dense width where
/// the file gives none, as Mixtral's), and the shared expert's width.
status read_experts(const gguf_file& f, const std::string& arch, const gguf_architecture& a, model_config& c) {
  auto count = integer(f, arch + ".expert_count", 0, 1024, 0);
  if (!count.is_ok()) return count.error();
  if (count.value() == 0) return a.experts ? bad_key(f, arch + ".expert_count", "missing or 0") : status::ok();
  c.n_experts = int(count.value());
  auto used = integer(f, arch + ".expert_used_count", 1, c.n_experts);
  auto width = integer(f, arch + ".expert_feed_forward_length", 1, 1 << 18, c.hidden_dim);
  auto shared = integer(f, arch + ".expert_shared_feed_forward_length", 0, 1 << 18, 0);
  for (auto* v : {&used, &width, &shared})
    if (!v->is_ok()) return v->error();
  c.n_experts_used = int(used.value());
  c.hidden_dim = int(width.value());
  c.shared_hidden_dim = int(shared.value());
  c.norm_topk = a.norm_topk;
  const json& m = f.metadata();
  if (const std::string key = arch + ".expert_weights_norm"; m.contains(key)) {
    if (!m[key].is_boolean()) return bad_key(f, key, m[key].dump() + " is not true or false");
    c.norm_topk = m[key].get<bool>();
  }
  return status::ok();
}

}  // namespace

std::optional<std::string> gguf_pre_tokenizer_regex(const std::string& pre) {
  static const std::map<std::string, std::string> known = {
      {"llama-bpe", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
      {"qwen2", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
      // o200k (gpt-4o, gpt-oss), as its tokenizer.json writes it.
      {"gpt-4o", R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
      {"default", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"},
  };
  const auto it = known.find(pre.empty() ? "default" : pre == "gpt2" ? "default" : pre);
  if (it == known.end()) return std::nullopt;
  return it->second;
}

namespace {

/// A byte-level BPE vocabulary as the tokenizer.json Hugging Face would write for it.
result<std::shared_ptr<const tokenizer>> byte_level(const gguf_file& f, const gguf_model& m, const json& tokens) {
  const json& meta = f.metadata();
  const std::string pre = text_of(f, "tokenizer.ggml.pre");
  const auto regex = gguf_pre_tokenizer_regex(pre);
  if (!regex) return bad_key(f, "tokenizer.ggml.pre", "'" + pre + "' is not supported (llama-bpe, qwen2, gpt-4o, default)");
  json vocab = json::object(), added = json::array();
  const json types = meta.value("tokenizer.ggml.token_type", json::array());
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int type = id < types.size() && types[id].is_number_integer() ? types[id].get<int>() : 1;
    if (type == 3 || type == 4)  // control and user-defined tokens are matched whole, as added tokens
      added.push_back({{"id", id}, {"content", tokens[id]}, {"special", type == 3}});
    vocab[tokens[id].get<std::string>()] = id;
  }
  json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", meta.value("tokenizer.ggml.merges", json::array())},
                       {"ignore_merges", pre == "llama-bpe"}}},
            {"added_tokens", added},
            {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", json::array({
                {{"type", "Split"}, {"pattern", {{"Regex", *regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
            {"decoder", {{"type", "ByteLevel"}}}};
  auto bos = integer(f, "tokenizer.ggml.bos_token_id", 0, int64_t(tokens.size()) - 1, -1);
  if (!bos.is_ok()) return bos.error();
  const bool add_bos = meta.value("tokenizer.ggml.add_bos_token", false) && bos.value() >= 0;
  if (add_bos)
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", json::array({{{"SpecialToken", {{"id", "BOS"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                           {"special_tokens", {{"BOS", {{"id", "BOS"}, {"ids", {bos.value()}}}}}}};
  auto t = hf_tokenizer::from_json(j, f.path() + " (tokenizer.ggml)", m.config.vocab_size);
  if (!t.is_ok()) return t.error();
  t.value()->set_specials(bos.value() >= 0 ? std::optional<int32_t>(int32_t(bos.value())) : std::nullopt, m.eos_ids);
  return std::shared_ptr<const tokenizer>(std::move(t).value());
}

/// A SentencePiece vocabulary: pieces and their scores, merged by score as llama2.c's tokenizer does, with the
/// file's token types (byte fallback tokens, control and user-defined ones matched whole) and add_space_prefix.
result<std::shared_ptr<const tokenizer>> sentencepiece(const gguf_file& f, const json& tokens) {
  const json& meta = f.metadata();
  spm_options options;
  const json types = meta.value("tokenizer.ggml.token_type", json::array());
  if (!types.empty()) {
    if (types.size() != tokens.size()) return bad_key(f, "tokenizer.ggml.token_type", "not one type per token");
    for (const json& t : types) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > 6)
        return bad_key(f, "tokenizer.ggml.token_type", "a type outside 0..6 (normal, unknown, control, user-defined, "
                                                       "unused, byte)");
      options.types.push_back(spm_token_type(t.get<int>()));
    }
  }
  const json prefix = meta.value("tokenizer.ggml.add_space_prefix", json(true));
  if (!prefix.is_boolean()) return bad_key(f, "tokenizer.ggml.add_space_prefix", "not true or false");
  options.add_space_prefix = prefix.get<bool>();
  const json scores = meta.value("tokenizer.ggml.scores", json::array());
  if (scores.size() != tokens.size()) return bad_key(f, "tokenizer.ggml.scores", "not one score per token");
  for (auto [key, fixed] : {std::pair{"tokenizer.ggml.bos_token_id", token_bos}, std::pair{"tokenizer.ggml.eos_token_id", token_eos}}) {
    auto id = integer(f, key, 0, int64_t(tokens.size()) - 1, -1);
    if (!id.is_ok()) return id.error();
    if (id.value() >= 0 && id.value() != fixed)
      return bad_key(f, key, text::format("{}: this engine's SentencePiece vocabularies have BOS 1 and EOS 2", id.value()));
  }
  std::vector<std::string> pieces;
  std::vector<float> piece_scores;
  for (size_t id = 0; id < tokens.size(); ++id) {
    std::string piece = tokens[id].get<std::string>();
    for (size_t at = piece.find("\xE2\x96\x81"); at != std::string::npos; at = piece.find("\xE2\x96\x81", at + 1))
      piece.replace(at, 3, " ");
    pieces.push_back(std::move(piece));
    piece_scores.push_back(scores[id].is_number() ? scores[id].get<float>() : 0.0f);
  }
  return std::shared_ptr<const tokenizer>(std::make_shared<const llama2c_tokenizer>(
      llama2c_tokenizer::from_pieces(std::move(pieces), std::move(piece_scores), std::move(options))));
}

}  // namespace

result<gguf_model> read_gguf_model(const gguf_file& f) {
  gguf_model m;
  m.architecture = text_of(f, "general.architecture");
  const auto arch = std::find_if(std::begin(gguf_architectures), std::end(gguf_architectures),
                                 [&](const gguf_architecture& a) { return m.architecture == a.name; });
  if (arch == std::end(gguf_architectures))
    return bad_key(f, "general.architecture",
                   "'" + m.architecture + "' is not supported (llama, qwen2, qwen3, qwen2moe, qwen3moe, gpt-oss)");
  ILLM_RETURN_IF_ERROR(read_shape(f, m.architecture, m.config));
  ILLM_RETURN_IF_ERROR(read_experts(f, m.architecture, *arch, m.config));
  if (arch->gpt_oss) ILLM_RETURN_IF_ERROR(read_gpt_oss(f, m.architecture, m.config));
  m.config.qkv_bias = arch->qkv_bias;
  m.config.qk_norm = arch->qk_norm;
  if (const stored_tensor* factors = f.find("rope_freqs.weight")) ILLM_RETURN_IF_ERROR(read_pair_factors(f, *factors, m.config));
  const json& meta = f.metadata();
  const json tokens = meta.value("tokenizer.ggml.tokens", json());
  if (!tokens.is_array() || tokens.empty() || !std::all_of(tokens.begin(), tokens.end(), [](const json& t) { return t.is_string(); }))
    return bad_key(f, "tokenizer.ggml.tokens", "missing, or not a list of strings");
  auto vocab = integer(f, m.architecture + ".vocab_size", 1, 1 << 22, int64_t(tokens.size()));
  if (!vocab.is_ok()) return vocab.error();
  m.config.vocab_size = int(vocab.value());
  if (status s = m.config.validate(); !s.is_ok()) return bad_key(f, m.architecture + ".*", s.message());
  m.tied_embeddings = f.find("output.weight") == nullptr;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    auto id = integer(f, key, 0, int64_t(tokens.size()) - 1, -1);
    if (!id.is_ok()) return id.error();
    if (id.value() >= 0 && std::find(m.eos_ids.begin(), m.eos_ids.end(), id.value()) == m.eos_ids.end())
      m.eos_ids.push_back(int32_t(id.value()));
  }
  const auto token_text = [&](const char* key) {
    auto id = integer(f, key, 0, int64_t(tokens.size()) - 1, -1);
    return id.is_ok() && id.value() >= 0 ? tokens[size_t(id.value())].get<std::string>() : std::string();
  };
  m.bos_text = token_text("tokenizer.ggml.bos_token_id");
  m.eos_text = token_text("tokenizer.ggml.eos_token_id");
  m.chat_template = text_of(f, "tokenizer.chat_template");
  return m;
}

result<model_weights> load_gguf_weights(const gguf_file& f, const gguf_model& m, std::optional<dtype> weight_type) {
  const std::vector<tensor_destination> sources = destinations_of(m.config, m.tied_embeddings, gguf_naming(m));
  auto allocated = model_weights::allocate(m.config, m.tied_embeddings, matrix_types_of(sources, f.tensors(), weight_type));
  if (!allocated.is_ok()) return allocated.error();
  ILLM_RETURN_IF_ERROR(fill_tensors(allocated.value(), sources, f.tensors(), uint64_t(m.config.head_dim()),
                                    f.path(), "a " + m.architecture + " model with this file's metadata",
                                    [](const std::string& name) { return name == "rope_freqs.weight"; }));
  return allocated;
}

result<std::shared_ptr<const tokenizer>> load_gguf_tokenizer(const gguf_file& f, const gguf_model& m) {
  const json tokens = f.metadata().value("tokenizer.ggml.tokens", json::array());
  const std::string kind = text_of(f, "tokenizer.ggml.model");
  if (kind == "gpt2") return byte_level(f, m, tokens);
  if (kind == "llama") return sentencepiece(f, tokens);
  return bad_key(f, "tokenizer.ggml.model", "'" + kind + "' is not supported (llama, gpt2)");
}

}  // namespace illm::gpu
