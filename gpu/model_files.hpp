#pragma once
// Finding and loading a model by name or path: a NAME is the folder $ILLM_MODELS/NAME (default
// ~/.cache/illm/models/NAME) holding NAME.bin and tokenizer.bin; a folder holds <folder name>.bin and
// tokenizer.bin; a file is a checkpoint with tokenizer.bin beside it.

#include <memory>
#include <string>

#include "gpu/tokenizer.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// Where named models live: $ILLM_MODELS, else $HOME/.cache/illm/models.
std::string models_dir();

/// The files of a model.
struct model_paths {
  std::string checkpoint;
  std::string tokenizer;
};

/// Resolves NAME_OR_PATH to its files; the error lists what was looked for.
result<model_paths> resolve_model(const std::string& name_or_path);

/// A model ready to run: weights and tokenizer.
struct loaded_model {
  std::string name;
  std::shared_ptr<const model_weights> weights;
  std::shared_ptr<const tokenizer> vocab;
};

/// Resolves and loads a model.
result<loaded_model> load_model(const std::string& name_or_path);

}  // namespace illm::gpu
