#include "actors/cli/type_flags.hpp"

#include <CLI/CLI.hpp>

#include "actors/cli/commands.hpp"
#include "actors/settings/settings.hpp"

namespace illm::cli {

void add_weight_type_flag(CLI::App& cmd, std::string& value) {
  cmd.add_option("--weight-type", value,
                 std::string("Convert every matrix to this type at load: ") + weight_type_choices +
                     " (default: as the model file stores them; GGUF's quantized types load as they are)")
      ->check([](const std::string& v) -> std::string {
        return gpu::parse_dtype(v) ? "" : std::string("must be ") + weight_type_choices + ", not '" + v + "'";
      });
}

void add_kv_type_flag(CLI::App& cmd, std::string& value) {
  cmd.add_option("--kv-type", value, "Element type of the KV pools: f32, f16 or bf16 (16-bit pools hold twice the tokens)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
}

void add_prefix_cache_flag(CLI::App& cmd, std::string& value) {
  cmd.add_option("--prefix-cache", value,
                 "Keep full KV blocks by content, so requests that share a prefix compute it once: off; local (each "
                 "instance's cache serves the requests it runs); cluster (a request also reads a prefix cached on "
                 "another instance, where it lies)")
      ->check(CLI::IsMember(actors::prefix_cache_modes))
      ->capture_default_str();
}

void add_model_flags(CLI::App& cmd, std::string& model, std::string& weight_type) {
  cmd.add_option("--model", model,
                 "Model name (in $ILLM_MODELS) or path: a Hugging Face folder, a GGUF file or a llama2.c file "
                 "(default stories15M)");
  add_weight_type_flag(cmd, weight_type);
}

gpu::dtype kv_type_of(const std::string& value, const std::string& command) {
  const auto type = gpu::parse_dtype(value);
  if (!type || gpu::is_block_type(*type))
    fail("illm " + command + ": the KV type must be f32, f16 or bf16, not '" + value + "'", 2);
  return *type;
}

std::optional<gpu::dtype> weight_type_of(const std::string& value, const std::string& command) {
  if (value.empty()) return std::nullopt;
  const auto type = gpu::parse_dtype(value);
  if (!type) fail("illm " + command + ": --weight-type must be " + weight_type_choices + ", not '" + value + "'", 2);
  return type;
}

}  // namespace illm::cli
