#include "gpu/formats/hf_model.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

#include "gpu/formats/safetensors.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

/// The largest config file read.
constexpr uintmax_t max_config_bytes = 16 << 20;

status bad_field(const std::string& file, const std::string& field, const std::string& what) {
  return {status_code::corrupt_model, text::format("{}: {}: {}", file, field, what)};
}

/// A JSON file of the folder, parsed; empty when it is absent and not required.
result<json> read_json(const fs::path& path, bool required) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (!required) return json();
    return status{status_code::io_error, text::format("{}: no such file", path.string())};
  }
  if (fs::file_size(path, ec) > max_config_bytes || ec)
    return status{status_code::corrupt_model, text::format("{}: larger than {} MiB", path.string(), max_config_bytes >> 20)};
  std::ifstream in(path);
  std::stringstream text_in;
  text_in << in.rdbuf();
  auto j = parse_bounded_json<json>(text_in.str(), json_depth_outside_requests);
  if (!j.value || !j.value->is_object())
    return status{status_code::corrupt_model,
                  text::format("{}: not a JSON object{}", path.string(), j.too_deep ? " (" + j.error + ")" : "")};
  return std::move(*j.value);
}

/// Reads the fields of one JSON object, each with its type and range checked; the first error is kept.
class field_reader {
 public:
  field_reader(const json& object, std::string file, std::string prefix = "")
      : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

  /// A whole number in [lo, hi]; `fallback` when absent or null (none: required).
  int integer(const char* key, int lo, int hi, std::optional<int> fallback = std::nullopt) {
    const json* v = find(key);
    if (!v) return missing(key, fallback.value_or(0), fallback.has_value());
    if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
      return fail(key, text::format("{} is not a whole number in [{}, {}]", v->dump(), lo, hi), 0);
    return int(v->get<int64_t>());
  }
  /// A number in (0, hi].
  float positive(const char* key, double hi, std::optional<float> fallback = std::nullopt) {
    const json* v = find(key);
    if (!v) return missing(key, fallback.value_or(0.0f), fallback.has_value());
    if (!v->is_number() || !(v->get<double>() > 0.0) || v->get<double>() > hi)
      return fail(key, text::format("{} is not a number in (0, {}]", v->dump(), hi), 0.0f);
    return float(v->get<double>());
  }
  /// A number in [0, 1].
  float fraction(const char* key) {
    const json* v = find(key);
    if (!v) return missing(key, 0.0f, true);
    if (!v->is_number() || !(v->get<double>() >= 0.0 && v->get<double>() <= 1.0))
      return fail(key, text::format("{} is not a number in [0, 1]", v->dump()), 0.0f);
    return float(v->get<double>());
  }
  bool boolean(const char* key, bool fallback) {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return fail(key, text::format("{} is not true or false", v->dump()), fallback);
    return v->get<bool>();
  }
  std::string string(const char* key, std::optional<std::string> fallback = std::nullopt) {
    const json* v = find(key);
    if (!v) return missing(key, fallback.value_or(""), fallback.has_value());
    if (!v->is_string()) return fail(key, text::format("{} is not a string", v->dump()), std::string());
    return v->get<std::string>();
  }
  /// Token ids: a whole number or a list of them.
  std::vector<int32_t> ids(const char* key) {
    const json* v = find(key);
    if (!v) return {};
    std::vector<int32_t> out;
    for (const json& id : v->is_array() ? *v : json::array({*v})) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t(1) << 31))
        return fail(key, text::format("{} is not a token id or a list of them", v->dump()), std::vector<int32_t>());
      out.push_back(int32_t(id.get<int64_t>()));
    }
    return out;
  }
  /// The list under `key`; null when absent or null.
  const json* list(const char* key) {
    const json* v = find(key);
    if (v && !v->is_array()) return fail(key, text::format("{} is not a list", v->dump()), nullptr);
    return v;
  }
  /// The object under `key`; null when absent or null.
  const json* object(const char* key) {
    const json* v = find(key);
    if (v && !v->is_object()) return fail(key, text::format("{} is not an object", v->dump()), nullptr);
    return v;
  }
  /// Records an error of this reader's file at `key`.
  template <typename T>
  T fail(const std::string& key, const std::string& what, T value) {
    if (error_.is_ok()) error_ = bad_field(file_, prefix_ + key, what);
    return value;
  }
  /// Keeps `s` as this reader's error unless it has one.
  void take(const status& s) {
    if (error_.is_ok()) error_ = s;
  }
  const status& error() const { return error_; }
  const std::string& file() const { return file_; }

 private:
  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  template <typename T>
  T missing(const char* key, T fallback, bool optional) {
    return optional ? fallback : fail(key, "missing", fallback);
  }

  const json& object_;
  std::string file_, prefix_;
  status error_ = status::ok();
};

/// How an architecture's experts are named in its config.json and checkpoint.
enum class expert_style : uint8_t { none, mixtral, qwen, gpt_oss };

struct architecture {
  const char* name;
  bool qkv_bias, qk_norm;
  expert_style experts = expert_style::none;
};

constexpr std::array<architecture, 8> architectures{{
    {"LlamaForCausalLM", false, false},
    {"MistralForCausalLM", false, false},
    {"Qwen2ForCausalLM", true, false},
    {"Qwen3ForCausalLM", false, true},
    {"MixtralForCausalLM", false, false, expert_style::mixtral},
    {"Qwen2MoeForCausalLM", true, false, expert_style::qwen},
    {"Qwen3MoeForCausalLM", false, true, expert_style::qwen},
    {"GptOssForCausalLM", true, false, expert_style::gpt_oss},
}};

/// The experts of config.json into `c`: Mixtral's num_local_experts of intermediate_size, softmax over the chosen;
/// Qwen's num_experts of moe_intermediate_size, norm_topk_prob, a shared expert, every layer sparse.
void read_experts(field_reader& r, expert_style style, model_config& c) {
  if (style == expert_style::none) return;
  c.n_experts = r.integer(style == expert_style::qwen ? "num_experts" : "num_local_experts", 1, 1024);
  const int per_token = style == expert_style::gpt_oss ? r.integer("experts_per_token", 1, 1024, 0) : 0;
  c.n_experts_used = r.integer("num_experts_per_tok", 1, std::max(1, c.n_experts),
                               per_token > 0 ? std::optional<int>(per_token) : std::nullopt);
  if (style != expert_style::qwen) return;
  c.hidden_dim = r.integer("moe_intermediate_size", 1, 1 << 18);
  c.norm_topk = r.boolean("norm_topk_prob", false);
  c.shared_hidden_dim = r.integer("shared_expert_intermediate_size", 0, 1 << 18, 0);
  if (r.integer("decoder_sparse_step", 1, 1024, 1) != 1)
    r.fail("decoder_sparse_step", "not 1: dense layers between sparse ones are not supported", 0);
  if (const json* dense = r.list("mlp_only_layers"); dense && !dense->empty())
    r.fail("mlp_only_layers", "dense layers among sparse ones are not supported", 0);
}

/// YaRN's fields of rope_scaling into `f` (its attention factor derived, as transformers does where the config
/// gives none; one of the config's own refused).
void read_yarn(field_reader& r, model_config& c, rope_frequencies& f) {
  f.scaling = rope_scaling_kind::yarn;
  f.factor = r.positive("factor", 1e6);
  f.original_positions = r.integer("original_max_position_embeddings", 1, 1 << 30, c.max_seq);
  f.beta_fast = r.positive("beta_fast", 1e6, 32.0f);
  f.beta_slow = r.positive("beta_slow", 1e6, 1.0f);
  f.truncate = r.boolean("truncate", true);
  for (const char* own : {"attention_factor", "mscale", "mscale_all_dim"})
    if (r.positive(own, 1e6, 0.0f) != 0.0f) r.fail(own, "set: an attention factor of the config's own is not supported", 0);
}

/// rope_scaling (or rope_parameters) of config.json into `c`.
void read_rope_scaling(field_reader& top, const std::string& file, model_config& c) {
  const json* scaling = top.object("rope_parameters");
  const char* key = "rope_parameters";
  if (!scaling) {
    scaling = top.object("rope_scaling");
    key = "rope_scaling";
  }
  if (!scaling) return;
  field_reader r(*scaling, file, std::string(key) + ".");
  c.rope_theta = r.positive("rope_theta", 1e12, c.rope_theta);  // where rope_parameters holds it
  const std::string kind = r.string("rope_type", r.string("type", std::string("default")));
  rope_frequencies& f = c.rope_scaling;
  if (kind == "default") {
    f.scaling = rope_scaling_kind::none;
  } else if (kind == "linear") {
    f.scaling = rope_scaling_kind::linear;
    f.factor = r.positive("factor", 1e6);
  } else if (kind == "llama3") {
    f.scaling = rope_scaling_kind::llama3;
    f.factor = r.positive("factor", 1e6);
    f.low_freq_factor = r.positive("low_freq_factor", 1e6);
    f.high_freq_factor = r.positive("high_freq_factor", 1e6);
    f.original_positions = r.integer("original_max_position_embeddings", 1, 1 << 30);
  } else if (kind == "yarn") {
    read_yarn(r, c, f);
  } else {
    r.fail("rope_type", text::format("'{}' is not supported (default, linear, llama3, yarn)", kind), 0);
  }
  top.take(r.error());
}

/// gpt-oss's layers: sliding_window over the layers layer_types calls "sliding_attention" (every other one from
/// the first where it is absent, as transformers' default), which must follow the pattern l % p < p - 1 for some p
/// (attention_shape::slides); sinks; biases on the output, the router and the experts; the gate clamped at
/// swiglu_limit; experts in MXFP4 (quantization_config), as the released checkpoints hold them.
void read_gpt_oss(field_reader& r, model_config& c) {
  c.sliding_window = r.integer("sliding_window", 1, 1 << 30);
  c.sliding_period = 2;
  if (const json* types = r.list("layer_types")) {
    std::vector<bool> slides;
    for (const json& t : *types) {
      if (t != "sliding_attention" && t != "full_attention") {
        r.fail("layer_types", text::format("{} is not sliding_attention or full_attention", t.dump()), 0);
        return;
      }
      slides.push_back(t == "sliding_attention");
    }
    if (int(slides.size()) != c.n_layers) {
      r.fail("layer_types", text::format("{} types for {} layers", slides.size(), c.n_layers), 0);
      return;
    }
    c.sliding_period = -1;
    for (int p = 0; p <= c.n_layers + 1 && c.sliding_period < 0; ++p) {
      const attention_shape shape{0, 0, 0, 0, 1, p};
      bool all = true;
      for (int l = 0; l < c.n_layers; ++l) all = all && shape.slides(l) == slides[size_t(l)];
      if (all) c.sliding_period = p;
    }
    if (c.sliding_period < 0) {
      r.fail("layer_types", "sliding layers in no pattern l % p < p - 1 are not supported", 0);
      return;
    }
  }
  c.attention_sinks = c.o_bias = c.expert_bias = true;
  c.norm_topk = true;  // a softmax over the chosen experts' logits
  c.activation = {1.702f, r.positive("swiglu_limit", 1e6, 7.0f), 1.0f};
  const json* found = r.object("quantization_config");
  const json quantization = found ? *found : json::object();
  field_reader q(quantization, r.file(), "quantization_config.");
  if (q.string("quant_method", std::string()) != "mxfp4")
    r.fail("quantization_config", "experts not in MXFP4 (transformers' dequantized [experts][in][out] layout) are not read",
           0);
  r.take(q.error());
}

/// An option this engine does not compute: refused when set.
void refuse_when_set(field_reader& r, const char* key, const char* why) {
  if (r.boolean(key, false)) r.fail(key, text::format("true: {}", why), 0);
}

/// A sliding window shorter than the context bounds the context: every request then fits in the window, where
/// attention over all keys is what the window gives.
void bound_by_window(field_reader& r, const char* key, hf_model& m) {
  const int window = r.integer(key, 1, 1 << 30, 0);
  if (window > 0 && window < m.config.max_seq) {
    m.notes.push_back(text::format("{} {} bounds the context (max_position_embeddings {}): requests up to {} tokens",
                                   key, window, m.config.max_seq, window));
    m.config.max_seq = window;
  }
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

result<hf_model> read_hf_config(const std::string& folder) {
  const fs::path config_path = fs::path(folder) / "config.json";
  auto config_json = read_json(config_path, true);
  if (!config_json.is_ok()) return config_json.error();
  field_reader r(config_json.value(), config_path.string());
  hf_model m;
  const json* names = nullptr;
  if (auto it = config_json->find("architectures"); it != config_json->end() && it->is_array() && it->size() == 1 &&
                                                    (*it)[0].is_string())
    names = &(*it)[0];
  if (!names) return bad_field(config_path.string(), "architectures", "missing, or not a list of one name");
  m.architecture = names->get<std::string>();
  const auto arch = std::find_if(architectures.begin(), architectures.end(),
                                 [&](const architecture& a) { return m.architecture == a.name; });
  if (arch == architectures.end())
    return bad_field(config_path.string(), "architectures",
                     text::format("{} is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                                  "Qwen3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, "
                                  "GptOssForCausalLM)",
                                  m.architecture));
  model_config& c = m.config;
  c.dim = r.integer("hidden_size", 1, 1 << 16);
  c.hidden_dim = r.integer("intermediate_size", 1, 1 << 18);
  c.n_layers = r.integer("num_hidden_layers", 1, 1024);
  c.n_heads = r.integer("num_attention_heads", 1, 1024);
  c.n_kv_heads = r.integer("num_key_value_heads", 1, 1024, c.n_heads);
  c.vocab_size = r.integer("vocab_size", 1, 1 << 22);
  c.max_seq = r.integer("max_position_embeddings", 1, 1 << 30);
  c.rope_theta = r.positive("rope_theta", 1e12, 10000.0f);
  c.norm_eps = r.positive("rms_norm_eps", 1.0, 1e-6f);
  const int head_dim = r.integer("head_dim", 1, 512, 0);
  if (head_dim > 0 && (c.n_heads <= 0 || head_dim != c.dim / c.n_heads || c.dim % c.n_heads != 0)) c.head_size = head_dim;
  c.qkv_bias = arch->qkv_bias;
  c.qk_norm = arch->qk_norm;
  read_experts(r, arch->experts, c);
  m.tied_embeddings = r.boolean("tie_word_embeddings", false);
  if (const std::string act = r.string("hidden_act", std::string("silu")); act != "silu")
    r.fail("hidden_act", text::format("'{}' is not supported (silu)", act), 0);
  if (arch->experts == expert_style::gpt_oss) read_gpt_oss(r, c);
  else refuse_when_set(r, "attention_bias", "biases on every attention projection, o_proj's included, are not supported");
  refuse_when_set(r, "mlp_bias", "biases on the feed-forward projections are not supported");
  read_rope_scaling(r, config_path.string(), c);
  if (m.architecture == "MistralForCausalLM" || m.architecture == "MixtralForCausalLM")
    bound_by_window(r, "sliding_window", m);
  if (m.architecture.starts_with("Qwen") && r.boolean("use_sliding_window", false))
    bound_by_window(r, "sliding_window", m);
  m.eos_ids = r.ids("eos_token_id");
  if (auto bos = r.ids("bos_token_id"); bos.size() == 1) m.bos_id = bos[0];
  ILLM_RETURN_IF_ERROR(r.error());
  if (status s = c.validate(); !s.is_ok()) return bad_field(config_path.string(), "shape", s.message());

  const fs::path generation_path = fs::path(folder) / "generation_config.json";
  auto generation = read_json(generation_path, false);
  if (!generation.is_ok()) return generation.error();
  if (!generation->is_null()) {
    field_reader g(generation.value(), generation_path.string());
    for (int32_t id : g.ids("eos_token_id"))
      if (std::find(m.eos_ids.begin(), m.eos_ids.end(), id) == m.eos_ids.end()) m.eos_ids.push_back(id);
    if (auto bos = g.ids("bos_token_id"); bos.size() == 1 && !m.bos_id) m.bos_id = bos[0];
    const json& given = generation.value();
    if (given.contains("temperature") && !given["temperature"].is_null())
      m.defaults.temperature = g.positive("temperature", 100.0f);
    if (given.contains("top_p") && !given["top_p"].is_null()) m.defaults.top_p = g.positive("top_p", 1.0);
    if (int k = g.integer("top_k", 0, 1 << 22, 0); k > 0) m.defaults.top_k = k;
    if (given.contains("min_p") && !given["min_p"].is_null()) m.defaults.min_p = g.fraction("min_p");
    if (given.contains("repetition_penalty") && !given["repetition_penalty"].is_null())
      m.defaults.repetition_penalty = g.positive("repetition_penalty", 10.0);
    ILLM_RETURN_IF_ERROR(g.error());
  }
  for (int32_t id : m.eos_ids)
    if (id >= c.vocab_size)
      return bad_field(config_path.string(), "eos_token_id", text::format("{} is outside the vocabulary of {}", id,
                                                                          c.vocab_size));
  return m;
}

namespace {

/// Hugging Face's names of a LLaMA-family model's tensors (of the experts, one tensor per expert).
tensor_naming hf_naming(const hf_model& m) {
  tensor_naming n{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.",
                  {{"rms_att", "input_layernorm.weight"}, {"wq", "self_attn.q_proj.weight"},
                   {"wk", "self_attn.k_proj.weight"}, {"wv", "self_attn.v_proj.weight"},
                   {"wo", "self_attn.o_proj.weight"}, {"rms_ffn", "post_attention_layernorm.weight"},
                   {"w1", "mlp.gate_proj.weight"}, {"w3", "mlp.up_proj.weight"}, {"w2", "mlp.down_proj.weight"},
                   {"bq", "self_attn.q_proj.bias"}, {"bk", "self_attn.k_proj.bias"}, {"bv", "self_attn.v_proj.bias"},
                   {"q_norm", "self_attn.q_norm.weight"}, {"k_norm", "self_attn.k_norm.weight"}},
                  true};
  if (!m.config.has_experts()) return n;
  if (m.architecture == "GptOssForCausalLM") {
    // The experts' gate and up rows interleaved in one tensor (MXFP4, from its _blocks and _scales), biases beside.
    for (auto [kind, name] : {std::pair{"router", "mlp.router.weight"}, {"router_bias", "mlp.router.bias"},
                              {"w1", "mlp.experts.gate_up_proj[0::2]"}, {"w3", "mlp.experts.gate_up_proj[1::2]"},
                              {"w2", "mlp.experts.down_proj"}, {"b1", "mlp.experts.gate_up_proj_bias[0::2]"},
                              {"b3", "mlp.experts.gate_up_proj_bias[1::2]"}, {"b2", "mlp.experts.down_proj_bias"},
                              {"bo", "self_attn.o_proj.bias"}, {"sinks", "self_attn.sinks"}})
      n.suffix[kind] = name;
    return n;
  }
  const bool mixtral = m.architecture == "MixtralForCausalLM";
  const std::string moe = mixtral ? "block_sparse_moe." : "mlp.";
  n.suffix["router"] = moe + "gate.weight";
  for (auto [kind, qwen_name, mixtral_name] : {std::tuple{"w1", "gate_proj", "w1"}, std::tuple{"w3", "up_proj", "w3"},
                                               std::tuple{"w2", "down_proj", "w2"}}) {
    n.suffix[kind] = moe + "experts.{e}." + (mixtral ? mixtral_name : qwen_name) + ".weight";
    n.suffix[std::string("shared_") + kind] = std::string("mlp.shared_expert.") + qwen_name + ".weight";
  }
  n.suffix["shared_gate"] = "mlp.shared_expert_gate.weight";
  return n;
}

/// Tensors a checkpoint may carry that the model does not use: RoPE tables some exports keep, and the classifier
/// of a tied model.
bool ignorable(const std::string& name, const hf_model& m) {
  const std::string_view suffix = ".rotary_emb.inv_freq";
  return (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) ||
         (m.tied_embeddings && name == "lm_head.weight");
}

/// The checkpoint's file: the index of shards, or model.safetensors.
result<std::string> weights_file(const fs::path& folder) {
  std::error_code ec;
  for (const char* name : {"model.safetensors.index.json", "model.safetensors"})
    if (fs::exists(folder / name, ec)) return (folder / name).string();
  return status{status_code::io_error,
                text::format("{}: no model.safetensors or model.safetensors.index.json", folder.string())};
}

}  // namespace

result<model_weights> load_hf_weights(const std::string& folder, const hf_model& m, std::optional<dtype> weight_type) {
  auto file = weights_file(folder);
  if (!file.is_ok()) return file.error();
  auto checkpoint = safetensors_checkpoint::open(file.value());
  if (!checkpoint.is_ok()) return checkpoint.error();
  const std::vector<tensor_destination> sources = destinations_of(m.config, m.tied_embeddings, hf_naming(m));
  auto allocated = model_weights::allocate(m.config, m.tied_embeddings,
                                           matrix_types_of(sources, checkpoint->tensors(), weight_type));
  if (!allocated.is_ok()) return allocated.error();
  ILLM_RETURN_IF_ERROR(fill_tensors(allocated.value(), sources, checkpoint->tensors(), uint64_t(m.config.head_dim()),
                                    file.value(), "a " + m.architecture + " with this config.json",
                                    [&](const std::string& name) { return ignorable(name, m); }));
  return allocated;
}

}  // namespace illm::gpu
