#pragma once
// `--weight-type` (and the `weight_type` key of illm serve's configuration): the type every matrix of the model is
// converted to at load, for the commands that load a model; `--kv-type` (instance_settings::kv_type), the element type
// of the instances' KV pools; `--prefix-cache`, whether the pools keep full blocks by content for requests that share
// a prefix.

#include <optional>
#include <string>

#include "gpu/dtype.hpp"

namespace CLI {
class App;
}

namespace illm::cli {

/// The types --weight-type takes.
inline constexpr const char* weight_type_choices = "f32, f16, bf16, q8_0, q6_k, q5_0, q4_k or mxfp4";

/// Adds `--weight-type TYPE` to `cmd`, read into `value`; a name that is no weight type is refused by CLI11.
void add_weight_type_flag(CLI::App& cmd, std::string& value);

/// Adds `--kv-type TYPE` (f32, f16 or bf16) to `cmd`, read into `value`.
void add_kv_type_flag(CLI::App& cmd, std::string& value);

/// Adds `--prefix-cache MODE` (off or local; instance_settings::prefix_cache) to `cmd`, read into `value`.
void add_prefix_cache_flag(CLI::App& cmd, std::string& value);

/// Adds `--model NAME` (a name in $ILLM_MODELS or a path: a Hugging Face folder, a GGUF file or a llama2.c file;
/// stories15M by default) and --weight-type to `cmd`, read into `model` and `weight_type`.
void add_model_flags(CLI::App& cmd, std::string& model, std::string& weight_type);

/// The KV type `value` names (f32, f16 or bf16). Fails with status 2 naming `command` when it names another.
gpu::dtype kv_type_of(const std::string& value, const std::string& command);

/// The type `value` names; none when it is empty (the matrices stay as the file stores them). Fails with status 2
/// naming `command` when it names no type.
std::optional<gpu::dtype> weight_type_of(const std::string& value, const std::string& command);

}  // namespace illm::cli
