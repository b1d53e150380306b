#include "gpu/model_files.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <filesystem>

#include "gpu/checkpoint.hpp"
#if ILLM_MODEL_FORMATS
#include "gpu/formats/hf_model.hpp"
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

#if ILLM_MODEL_FORMATS
/// A Hugging Face folder: config.json, its safetensors and tokenizer.json.
result<loaded_model> load_hf_folder(const fs::path& folder) {
  auto model = read_hf_config(folder.string());
  if (!model.is_ok()) return model.error();
  std::error_code ec;
  if (!fs::is_regular_file(folder / "tokenizer.json", ec))
    return status{status_code::io_error, text::format("{}: no tokenizer.json", folder.string())};
  auto vocab = hf_tokenizer::load(folder.string(), model->config.vocab_size);
  if (!vocab.is_ok()) return vocab.error();
  auto weights = load_hf_weights(folder.string(), model.value());
  if (!weights.is_ok()) return weights.error();
  loaded_model m;
  const fs::path normal = folder.lexically_normal();
  m.name = (normal.has_filename() ? normal.filename() : normal.parent_path().filename()).string();
  m.weights = std::make_shared<const model_weights>(std::move(weights).value());
  m.end_ids = model->eos_ids;
  for (int32_t id : vocab.value()->end_ids())
    if (std::find(m.end_ids.begin(), m.end_ids.end(), id) == m.end_ids.end()) m.end_ids.push_back(id);
  m.vocab = std::move(vocab).value();
  m.max_model_len = model->config.max_seq;
  m.notes = model->notes;
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

result<loaded_model> load_model(const std::string& name_or_path) {
  if (auto folder = hf_folder_of(name_or_path)) {
#if ILLM_MODEL_FORMATS
    return load_hf_folder(*folder);
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
  auto vocab = llama2c_tokenizer::load(paths->tokenizer, weights->config().vocab_size);
  if (!vocab.is_ok()) return vocab.error();
  loaded_model m;
  m.name = fs::path(paths->checkpoint).stem().string();
  m.weights = std::make_shared<const model_weights>(std::move(weights).value());
  m.vocab = std::make_shared<const llama2c_tokenizer>(std::move(vocab).value());
  m.end_ids = {token_bos, token_eos};
  m.max_model_len = 0;  // llama2.c's seq_len is the training context only: longer requests are served
  return m;
}

}  // namespace illm::gpu
