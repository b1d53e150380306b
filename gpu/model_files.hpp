#pragma once
// Finding and loading a model by name or path: a NAME is the folder $ILLM_MODELS/NAME (default
// ~/.cache/illm/models/NAME); a folder with a config.json is a Hugging Face model (config.json, safetensors,
// tokenizer.json); another folder holds <folder name>.bin and tokenizer.bin (llama2.c); a .gguf file is a GGUF
// model with its vocabulary inside; another file is a llama2.c checkpoint with tokenizer.bin beside it.

#include <memory>
#include <optional>
#include <string>

#include "gpu/backend.hpp"
#include "gpu/tokenizer.hpp"
#include "gpu/weights.hpp"

namespace illm::jinja {
class chat_template;
}

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
  std::string name;  ///< the folder's or file's name
  std::shared_ptr<const model_weights> weights;
  std::shared_ptr<const tokenizer> vocab;
  std::vector<int32_t> end_ids;  ///< a generation stops at any of them (every end id the model's files name)
  int max_model_len = 0;         ///< the longest context it serves (prompt and output); 0: no bound
  std::vector<std::string> notes;  ///< what loading adapted, for the log
  /// Sampling defaults of the model's generation_config.json, for requests that give none.
  generation_defaults defaults;
  /// How chat messages become a prompt; none: their contents joined by newlines (a model without a template).
  std::shared_ptr<const jinja::chat_template> chat;
};

/// How to load a model.
struct load_options {
  std::string chat_template_file;  ///< a Jinja file that replaces the model's chat template (empty: the model's)
  std::optional<dtype> weight_type;  ///< every matrix converted to this type on load (none: as the file stores it)
};

/// Resolves and loads a model: weights, vocabulary and chat template (tokenizer_config.json's chat_template, or a
/// chat_template.jinja beside it).
result<loaded_model> load_model(const std::string& name_or_path, const load_options& options = {});

}  // namespace illm::gpu
