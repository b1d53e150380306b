#include "gpu/model_files.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <filesystem>

#include "gpu/checkpoint.hpp"
#include "gpu/cpu/tiled_gemm.hpp"
#if ILLM_MODEL_FORMATS
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"
#include "gpu/formats/gguf_model.hpp"
#include "gpu/formats/hf_model.hpp"
#include "gpu/jinja/chat_template.hpp"
#include "gpu/tokenizers/hf_tokenizer.hpp"
#endif
#include "gpu/tokenizers/llama2c_tokenizer.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

namespace fs = std::filesystem;

std::string models_dir() {
  if (const char* dir = std::getenv("ILLM_MODELS"); dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return text::format("{}/.cache/illm/models", home ? home : ".");
}

result<model_paths> resolve_model(const std::string& name_or_path) {
  std::error_code ec;
  fs::path checkpoint;
  if (fs::is_regular_file(name_or_path, ec)) {
    checkpoint = name_or_path;
  } else if (fs::is_directory(name_or_path, ec)) {
    const fs::path dir = fs::path(name_or_path).lexically_normal();
    const fs::path base = dir.has_filename() ? dir.filename() : dir.parent_path().filename();
    checkpoint = dir / (base.string() + ".bin");
  } else if (name_or_path.find('/') == std::string::npos && !name_or_path.empty()) {
    checkpoint = fs::path(models_dir()) / name_or_path / (name_or_path + ".bin");
  } else {
    return status{status_code::io_error, text::format("model '{}': no such file or folder", name_or_path)};
  }
  const fs::path tok = checkpoint.parent_path() / "tokenizer.bin";
  if (!fs::is_regular_file(checkpoint, ec) || !fs::is_regular_file(tok, ec))
    return status{status_code::io_error,
                  text::format("model '{}': expected {} and {} (run deploy/fetch-model.sh for stories15M, or set "
                              "ILLM_MODELS)",
                              name_or_path, checkpoint.string(), tok.string())};
  return model_paths{checkpoint.string(), tok.string()};
}

namespace {

/// Weights as the engines read them: block-type matrices stored in tiles where this build's cpu kernels read tiles.
std::shared_ptr<const model_weights> served_weights(model_weights weights) {
  if (cpu::stored_tiles_pay()) weights.store_in_tiles();
  return std::make_shared<const model_weights>(std::move(weights));
}

#if ILLM_MODEL_FORMATS
/// The whole of a text file, or an io_error naming it.
result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return status{status_code::io_error, text::format("{}: cannot read it", path.string())};
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

/// A token's text in tokenizer_config.json: a string, or an object with its content.
std::string token_text(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->is_object() && it->contains("content") && (*it)["content"].is_string() ? (*it)["content"].get<std::string>() : "";
}

/// The chat template of `folder` (`file` when given; else chat_template.jinja beside config.json, else
/// tokenizer_config.json's chat_template, a string or the one named "default" of a list), with the BOS and EOS
/// texts it may write; none when the model has no template.
result<std::shared_ptr<const jinja::chat_template>> chat_template_of(const fs::path& folder, const std::string& file,
                                                                     std::string bos, std::string eos) {
  std::error_code ec;
  nlohmann::json config;
  const fs::path config_path = folder / "tokenizer_config.json";
  if (!folder.empty() && fs::is_regular_file(config_path, ec)) {
    auto contents = read_text(config_path);
    if (!contents.is_ok()) return contents.error();
    config = parse_bounded_or_discarded(contents.value(), json_depth_outside_requests);
    if (!config.is_object()) return status{status_code::corrupt_model, text::format("{}: not a JSON object", config_path.string())};
    if (!token_text(config, "bos_token").empty()) bos = token_text(config, "bos_token");
    if (!token_text(config, "eos_token").empty()) eos = token_text(config, "eos_token");
  }
  fs::path origin = file;
  std::string source;
  if (origin.empty() && !folder.empty() && fs::is_regular_file(folder / "chat_template.jinja", ec)) origin = folder / "chat_template.jinja";
  if (!origin.empty()) {
    auto contents = read_text(origin);
    if (!contents.is_ok()) return contents.error();
    source = std::move(contents).value();
  } else if (config.contains("chat_template")) {
    origin = config_path;
    const nlohmann::json& t = config["chat_template"];
    if (t.is_string()) source = t.get<std::string>();
    if (t.is_array())
      for (const nlohmann::json& named : t)
        if (named.is_object() && named.value("name", "") == "default" && named.contains("template") && named["template"].is_string())
          source = named["template"].get<std::string>();
    if (source.empty())
      return status{status_code::corrupt_model, text::format("{}: chat_template is neither a string nor a list with a "
                                                             "\"default\" template", config_path.string())};
  }
  if (origin.empty()) return std::shared_ptr<const jinja::chat_template>();
  auto made = jinja::chat_template::create(source, std::move(bos), std::move(eos), origin.string());
  if (!made.is_ok()) return made.error();
  return std::make_shared<const jinja::chat_template>(std::move(made).value());
}

/// A GGUF file: its weights, embedded vocabulary and chat template.
result<loaded_model> load_gguf_file(const fs::path& path, const load_options& options) {
  auto file = gguf_file::open(path.string());
  if (!file.is_ok()) return file.error();
  auto model = read_gguf_model(file.value());
  if (!model.is_ok()) return model.error();
  auto vocab = load_gguf_tokenizer(file.value(), model.value());
  if (!vocab.is_ok()) return vocab.error();
  auto weights = load_gguf_weights(file.value(), model.value(), options.weight_type);
  if (!weights.is_ok()) return weights.error();
  loaded_model m;
  m.name = path.filename().string();
  m.weights = served_weights(std::move(weights).value());
  m.vocab = std::move(vocab).value();
  m.end_ids = model->eos_ids;
  m.max_model_len = model->config.max_seq;
  if (!options.chat_template_file.empty() || !model->chat_template.empty()) {
    std::string source = model->chat_template;
    std::string origin = path.string() + " (tokenizer.chat_template)";
    if (!options.chat_template_file.empty()) {
      auto contents = read_text(options.chat_template_file);
      if (!contents.is_ok()) return contents.error();
      source = std::move(contents).value();
      origin = options.chat_template_file;
    }
    auto chat = jinja::chat_template::create(source, model->bos_text, model->eos_text, origin);
    if (!chat.is_ok()) return chat.error();
    m.chat = std::make_shared<const jinja::chat_template>(std::move(chat).value());
  }
  return m;
}

/// A Hugging Face folder: config.json, its safetensors and tokenizer.json.
result<loaded_model> load_hf_folder(const fs::path& folder, const load_options& options) {
  auto model = read_hf_config(folder.string());
  if (!model.is_ok()) return model.error();
  std::error_code ec;
  if (!fs::is_regular_file(folder / "tokenizer.json", ec))
    return status{status_code::io_error, text::format("{}: no tokenizer.json", folder.string())};
  auto vocab = hf_tokenizer::load(folder.string(), model->config.vocab_size);
  if (!vocab.is_ok()) return vocab.error();
  auto weights = load_hf_weights(folder.string(), model.value(), options.weight_type);
  if (!weights.is_ok()) return weights.error();
  loaded_model m;
  const fs::path normal = folder.lexically_normal();
  m.name = (normal.has_filename() ? normal.filename() : normal.parent_path().filename()).string();
  m.weights = served_weights(std::move(weights).value());
  m.end_ids = model->eos_ids;
  for (int32_t id : vocab.value()->end_ids())
    if (std::find(m.end_ids.begin(), m.end_ids.end(), id) == m.end_ids.end()) m.end_ids.push_back(id);
  m.vocab = std::move(vocab).value();
  m.max_model_len = model->config.max_seq;
  m.notes = model->notes;
  m.defaults = model->defaults;
  auto chat = chat_template_of(folder, options.chat_template_file, "", "");
  if (!chat.is_ok()) return chat.error();
  m.chat = std::move(chat).value();
  return m;
}
#endif

/// The folder NAME_OR_PATH names when it is a Hugging Face model's.
std::optional<fs::path> hf_folder_of(const std::string& name_or_path) {
  for (const fs::path& folder : {fs::path(name_or_path), fs::path(models_dir()) / name_or_path}) {
    std::error_code ec;
    if (!name_or_path.empty() && fs::is_regular_file(folder / "config.json", ec)) return folder;
  }
  return std::nullopt;
}

}  // namespace

result<loaded_model> load_model(const std::string& name_or_path, const load_options& options) {
  std::error_code ec;
  if (fs::path(name_or_path).extension() == ".gguf" && fs::is_regular_file(name_or_path, ec)) {
#if ILLM_MODEL_FORMATS
    return load_gguf_file(name_or_path, options);
#else
    return status{status_code::unsupported,
                  text::format("{}: a GGUF file; this build (ILLM_GPU_ONLY) reads llama2.c files only", name_or_path)};
#endif
  }
  if (auto folder = hf_folder_of(name_or_path)) {
#if ILLM_MODEL_FORMATS
    return load_hf_folder(*folder, options);
#else
    return status{status_code::unsupported,
                  text::format("{}: a Hugging Face model; this build (ILLM_GPU_ONLY) reads llama2.c files only",
                               folder->string())};
#endif
  }
  auto paths = resolve_model(name_or_path);
  if (!paths.is_ok()) return paths.error();
  auto weights = load_llama2c(paths->checkpoint);
  if (!weights.is_ok()) return weights.error();
  if (options.weight_type && *options.weight_type != dtype::f32) {
    weights = convert_weights(weights.value(), *options.weight_type);
    if (!weights.is_ok()) return weights.error();
  }
  auto vocab = llama2c_tokenizer::load(paths->tokenizer, weights->config().vocab_size);
  if (!vocab.is_ok()) return vocab.error();
  loaded_model m;
  m.name = fs::path(paths->checkpoint).stem().string();
  m.weights = served_weights(std::move(weights).value());
  m.vocab = std::make_shared<const llama2c_tokenizer>(std::move(vocab).value());
  m.end_ids = {token_bos, token_eos};
  m.max_model_len = 0;  // llama2.c's seq_len is the training context only: longer requests are served
  if (!options.chat_template_file.empty()) {
#if ILLM_MODEL_FORMATS
    auto chat = chat_template_of({}, options.chat_template_file, "<s>", "</s>");
    if (!chat.is_ok()) return chat.error();
    m.chat = std::move(chat).value();
#else
    return status{status_code::unsupported, "chat templates need the full build (not ILLM_GPU_ONLY)"};
#endif
  }
  return m;
}

}  // namespace illm::gpu
