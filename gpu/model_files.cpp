#include "gpu/model_files.hpp"

#include <cstdlib>
#include <filesystem>

#include "gpu/checkpoint.hpp"
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

result<loaded_model> load_model(const std::string& name_or_path) {
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
  return m;
}

}  // namespace illm::gpu
