#include "gpu/checkpoint.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

using file_ptr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

/// Floats of the RoPE tables stored between the final norm and the classifier.
uint64_t rope_table_floats(const model_config& c) { return uint64_t(c.max_seq) * c.head_dim(); }

status corrupt_checkpoint(const std::string& path, const std::string& what) {
  return {status_code::corrupt_model, text::format("model file {}: {}", path, what)};
}

status read_floats(std::FILE* f, float* out, uint64_t n, const std::string& path) {
  if (std::fread(out, sizeof(float), n, f) != n) return corrupt_checkpoint(path, "read failed before the end of the data");
  return status::ok();
}

status check_finite(model_weights& w, const std::string& path) {
  for (const tensor_view& t : w.tensors())
    for (uint64_t i = 0; i < t.size; ++i)
      if (!std::isfinite(t.f32()[i]))
        return corrupt_checkpoint(path, text::format("non-finite weight {} in tensor {} at index {}", t.f32()[i], t.name, i));
  return status::ok();
}

}  // namespace

uint64_t llama2c_file_bytes(const model_config& config, bool shared_classifier) {
  return llama2c_header_bytes +
         sizeof(float) * (config.parameter_count(shared_classifier) + rope_table_floats(config));
}

result<model_weights> load_llama2c(const std::string& path) {
  std::error_code ec;
  const auto file_bytes = std::filesystem::file_size(path, ec);
  if (ec) return status{status_code::io_error, text::format("model file {}: {}", path, ec.message())};
  file_ptr f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return status{status_code::io_error, text::format("model file {}: cannot open", path)};
  if (file_bytes < llama2c_header_bytes)
    return corrupt_checkpoint(path, text::format("truncated: {} bytes, shorter than the {}-byte header", file_bytes,
                                     llama2c_header_bytes));

  int32_t header[7];
  if (std::fread(header, sizeof(int32_t), 7, f.get()) != 7) return corrupt_checkpoint(path, "cannot read the header");
  model_config config;
  config.dim = header[0];
  config.hidden_dim = header[1];
  config.n_layers = header[2];
  config.n_heads = header[3];
  config.n_kv_heads = header[4];
  const bool shared_classifier = header[5] > 0;
  config.vocab_size = header[5] == INT32_MIN ? 0 : std::abs(header[5]);
  config.max_seq = header[6];
  if (status s = config.validate(); !s.is_ok()) return corrupt_checkpoint(path, "bad header: " + s.message());

  const uint64_t expected = llama2c_file_bytes(config, shared_classifier);
  if (file_bytes < expected)
    return corrupt_checkpoint(path, text::format("truncated: {} bytes, but its header (dim {}, {} layers, vocab {}) needs {}",
                                     file_bytes, config.dim, config.n_layers, config.vocab_size, expected));
  if (file_bytes > expected)
    return corrupt_checkpoint(path, text::format("oversized: {} bytes, but its header (dim {}, {} layers, vocab {}) needs "
                                     "exactly {}; the header does not match the data",
                                     file_bytes, config.dim, config.n_layers, config.vocab_size, expected));

  auto allocated = model_weights::allocate(config, shared_classifier);
  if (!allocated.is_ok()) return allocated.error();
  model_weights& w = allocated.value();
  for (const tensor_view& t : w.tensors()) {
    if (t.name == "classifier" && std::fseek(f.get(), long(rope_table_floats(config) * sizeof(float)), SEEK_CUR) != 0)
      return corrupt_checkpoint(path, "cannot skip the RoPE tables");
    ILLM_RETURN_IF_ERROR(read_floats(f.get(), t.f32(), t.size, path));
  }
  ILLM_RETURN_IF_ERROR(check_finite(w, path));
  return allocated;
}

status write_llama2c(const model_weights& weights, const std::string& path) {
  const model_config& c = weights.config();
  if (c.head_size > 0 || c.qkv_bias || c.qk_norm || c.rope_scaling.scaling != rope_scaling_kind::none ||
      c.has_experts())
    return {status_code::unsupported, "the llama2.c format has no head width of its own, biases, head norms, "
                                      "RoPE scaling or experts"};
  for (const tensor_view& t : weights.tensors())
    if (t.type != dtype::f32)
      return {status_code::unsupported, text::format("the llama2.c format holds fp32 weights; {} is {}", t.name,
                                                     to_string(t.type))};
  file_ptr f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return {status_code::io_error, text::format("cannot create {}", path)};
  const int32_t vocab = weights.shared_classifier() ? c.vocab_size : -c.vocab_size;
  const int32_t header[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab, c.max_seq};
  bool ok = std::fwrite(header, sizeof(int32_t), 7, f.get()) == 7;
  // The RoPE tables llama2.c stores (cos then sin of pos * theta^(-2i/head_dim)) before the classifier; the
  // loader skips them.
  const auto rope_tables = [&] {
    const int half = c.head_dim() / 2;
    std::vector<float> cos_table, sin_table;
    for (int pos = 0; pos < c.max_seq; ++pos)
      for (int i = 0; i < half; ++i) {
        const double angle = pos * std::pow(double(c.rope_theta), -2.0 * i / c.head_dim());
        cos_table.push_back(float(std::cos(angle)));
        sin_table.push_back(float(std::sin(angle)));
      }
    return std::fwrite(cos_table.data(), sizeof(float), cos_table.size(), f.get()) == cos_table.size() &&
           std::fwrite(sin_table.data(), sizeof(float), sin_table.size(), f.get()) == sin_table.size();
  };
  for (const tensor_view& t : weights.tensors()) {
    if (t.name == "classifier") ok = ok && rope_tables();
    ok = ok && std::fwrite(t.data, sizeof(float), t.size, f.get()) == t.size;
  }
  if (weights.shared_classifier()) ok = ok && rope_tables();
  if (!ok) return {status_code::io_error, text::format("write to {} failed", path)};
  return status::ok();
}

}  // namespace illm::gpu
