#include "gpu/weights.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "gpu/quant/blocks.hpp"
#include "gpu/quant/tiles.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

std::vector<layer_tensor_kind> layer_tensor_kinds(const model_config& c) {
  const uint64_t d = c.dim, h = c.hidden_dim, q = c.q_dim(), kv = c.kv_dim(), hd = c.head_dim();
  const uint64_t e = uint64_t(c.n_experts), sh = uint64_t(c.shared_hidden_dim), stacked = c.has_experts() ? e : 1;
  using L = layer_weights;
  const auto vector = [](const char* name, uint64_t n, tensor_role role, float* L::*member, uint64_t experts = 0) {
    return layer_tensor_kind{name, n, 1, role, member, nullptr, experts};
  };
  const auto matrix = [](const char* name, uint64_t rows, uint64_t cols, weight_matrix L::*member, uint64_t experts = 0) {
    return layer_tensor_kind{name, rows, cols, tensor_role::matrix, nullptr, member, experts};
  };
  std::vector<layer_tensor_kind> k = {vector("rms_att", d, tensor_role::norm, &L::rms_att), matrix("wq", q, d, &L::wq),
                                      matrix("wk", kv, d, &L::wk), matrix("wv", kv, d, &L::wv)};
  if (c.qkv_bias)
    k.insert(k.end(), {vector("bq", q, tensor_role::bias, &L::bq), vector("bk", kv, tensor_role::bias, &L::bk),
                       vector("bv", kv, tensor_role::bias, &L::bv)});
  if (c.qk_norm)
    k.insert(k.end(), {vector("q_norm", hd, tensor_role::norm, &L::q_norm), vector("k_norm", hd, tensor_role::norm, &L::k_norm)});
  k.push_back(matrix("wo", d, q, &L::wo));
  if (c.o_bias) k.push_back(vector("bo", d, tensor_role::bias, &L::bo));
  if (c.attention_sinks) k.push_back(vector("sinks", uint64_t(c.n_heads), tensor_role::bias, &L::sinks));
  k.push_back(vector("rms_ffn", d, tensor_role::norm, &L::rms_ffn));
  if (c.has_experts()) k.push_back(matrix("router", e, d, &L::router));
  if (c.expert_bias) k.push_back(vector("router_bias", e, tensor_role::bias, &L::router_bias));
  const uint64_t experts = c.has_experts() ? e : 0;
  k.insert(k.end(), {matrix("w1", stacked * h, d, &L::w1, experts), matrix("w3", stacked * h, d, &L::w3, experts),
                     matrix("w2", stacked * d, h, &L::w2, experts)});
  if (c.expert_bias)
    k.insert(k.end(), {vector("b1", e * h, tensor_role::bias, &L::b1, e), vector("b3", e * h, tensor_role::bias, &L::b3, e),
                       vector("b2", e * d, tensor_role::bias, &L::b2, e)});
  if (sh > 0)
    k.insert(k.end(), {matrix("shared_w1", sh, d, &L::shared_w1), matrix("shared_w3", sh, d, &L::shared_w3),
                       matrix("shared_w2", d, sh, &L::shared_w2), matrix("shared_gate", 1, d, &L::shared_gate)});
  return k;
}

namespace {

/// One tensor of the layout: its name, shape and role, and where its pointer goes.
struct slot {
  std::string name;
  uint64_t rows = 0, cols = 1;
  tensor_role role = tensor_role::matrix;
  float** vector = nullptr;          // norms and biases (fp32)
  weight_matrix* matrix = nullptr;  // matrices
};

/// The layout in storage order: embedding; each layer's tensors (layer_tensor_kinds); final norm; classifier (left
/// out when shared).
std::vector<slot> layout(const model_config& c, bool shared_classifier, weight_matrix& embedding, float*& rms_final,
                         weight_matrix& classifier, std::vector<layer_weights>& layers) {
  const uint64_t d = c.dim;
  std::vector<slot> s;
  s.push_back({"token_embedding", uint64_t(c.vocab_size), d, tensor_role::embedding, nullptr, &embedding});
  const std::vector<layer_tensor_kind> kinds = layer_tensor_kinds(c);
  for (int l = 0; l < c.n_layers; ++l) {
    layer_weights& t = layers[size_t(l)];
    for (const layer_tensor_kind& k : kinds)
      s.push_back({text::format("layers.{}.{}", l, k.name), k.rows, k.cols, k.role, k.vector ? &(t.*k.vector) : nullptr,
                   k.matrix ? &(t.*k.matrix) : nullptr});
  }
  s.push_back({"rms_final", d, 1, tensor_role::norm, &rms_final});
  if (!shared_classifier) s.push_back({"classifier", uint64_t(c.vocab_size), d, tensor_role::matrix, nullptr, &classifier});
  return s;
}

/// Tensors start 4-byte aligned (fp32 vectors follow block matrices of any size).
uint64_t padded(uint64_t bytes) { return (bytes + 3) / 4 * 4; }

}  // namespace

result<model_weights> model_weights::allocate(const model_config& config, bool shared_classifier,
                                              const matrix_types& types) {
  ILLM_RETURN_IF_ERROR(config.validate());
  model_weights w;
  w.config_ = config;
  w.shared_classifier_ = shared_classifier;
  w.layers_.resize(size_t(config.n_layers));
  const std::vector<slot> slots = layout(config, shared_classifier, w.token_embedding_, w.rms_final_, w.classifier_,
                                         w.layers_);
  std::vector<dtype> type_of;
  for (const slot& s : slots) {
    const auto it = types.find(s.name);
    const dtype t = s.matrix && it != types.end() ? it->second : dtype::f32;
    if (s.cols % block_elements(t) != 0)
      return status{status_code::invalid_argument,
                    text::format("{} ({} x {}) cannot be held in {}: its rows are not whole blocks of {}", s.name,
                                 s.rows, s.cols, to_string(t), block_elements(t))};
    type_of.push_back(t);
    w.bytes_ += padded(stored_bytes(t, s.rows * s.cols));
  }
  w.storage_.reset(static_cast<uint8_t*>(host_alloc(w.bytes_)));
  if (!w.storage_)
    return status{status_code::out_of_memory,
                  text::format("cannot allocate {:.1f} GiB of weights", double(w.bytes_) / double(1u << 30))};
  uint8_t* p = w.storage_.get();
  for (size_t i = 0; i < slots.size(); ++i) {
    const slot& s = slots[i];
    if (s.matrix) *s.matrix = {p, type_of[i]};
    else *s.vector = reinterpret_cast<float*>(p);
    p += padded(stored_bytes(type_of[i], s.rows * s.cols));
  }
  if (shared_classifier) w.classifier_ = w.token_embedding_;
  return w;
}

std::vector<tensor_view> model_weights::tensors() const {
  const model_config& c = config_;
  std::vector<tensor_view> out;
  const auto stack = [&](const layer_tensor_kind& k) {
    for (int l = 0; l < c.n_layers; ++l) {
      const layer_weights& t = layers_[size_t(l)];
      const std::string name = text::format("layers.{}.{}", l, k.name);
      if (k.matrix) {
        const weight_matrix& m = t.*k.matrix;
        out.push_back({name, m.data, m.type, k.rows * k.cols, k.cols, k.role, m.tiled});
      } else {
        out.push_back({name, reinterpret_cast<uint8_t*>(t.*k.vector), dtype::f32, k.rows, 1, k.role});
      }
    }
  };
  // llama2.c's stacks first, in its order; then the options' in storage order.
  static const std::vector<std::string> llama2c = {"rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"};
  const std::vector<layer_tensor_kind> kinds = layer_tensor_kinds(c);
  const auto kind = [&](const std::string& name) {
    return *std::find_if(kinds.begin(), kinds.end(), [&](const layer_tensor_kind& k) { return name == k.name; });
  };
  const uint64_t vocab = uint64_t(c.vocab_size), d = uint64_t(c.dim);
  out.push_back({"token_embedding", token_embedding_.data, token_embedding_.type, vocab * d, d, tensor_role::embedding});
  for (const std::string& name : llama2c) stack(kind(name));
  out.push_back({"rms_final", reinterpret_cast<uint8_t*>(rms_final_), dtype::f32, d, 1, tensor_role::norm});
  if (!shared_classifier_)
    out.push_back({"classifier", classifier_.data, classifier_.type, vocab * d, d, tensor_role::matrix, classifier_.tiled});
  for (const layer_tensor_kind& k : kinds)
    if (std::find(llama2c.begin(), llama2c.end(), k.name) == llama2c.end()) stack(k);
  return out;
}

void model_weights::store_in_tiles() {
  sampled_before_tiles_ = sampled_bytes();
  const model_config& c = config_;
  struct matrix {
    weight_matrix* m;
    uint64_t rows, cols;
  };
  std::vector<matrix> todo;
  // An expert's rows fill whole tiles, so that no tile holds two experts' rows.
  const auto add = [&](weight_matrix& m, uint64_t rows, uint64_t cols, uint64_t experts) {
    if (!m.tiled && has_tile_layout(m.type) && (rows / std::max<uint64_t>(experts, 1)) % rows_per_tile == 0)
      todo.push_back({&m, rows, cols});
  };
  const std::vector<layer_tensor_kind> kinds = layer_tensor_kinds(c);
  for (layer_weights& l : layers_)
    for (const layer_tensor_kind& k : kinds)
      if (k.matrix) add(l.*k.matrix, k.rows, k.cols, k.experts);
  if (!shared_classifier_) add(classifier_, uint64_t(c.vocab_size), uint64_t(c.dim), 0);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) tile_rows_in_place(todo[i].m->type, todo[i].m->data,
                                                                            todo[i].rows, todo[i].cols);
  };
  std::vector<std::thread> threads(std::max(1u, std::thread::hardware_concurrency()) - 1);
  for (std::thread& t : threads) t = std::thread(work);
  work();
  for (std::thread& t : threads) t.join();
  for (const matrix& m : todo) m.m->tiled = true;
}

std::string model_weights::sampled_bytes() const {
  if (!sampled_before_tiles_.empty()) return sampled_before_tiles_;
  std::string sampled;
  for (uint64_t at = 0; at < bytes_; at += 4096) sampled.push_back(char(storage_.get()[at]));
  return sampled;
}

matrix_types model_weights::types() const {
  matrix_types out;
  for (const tensor_view& t : tensors())
    if (t.role == tensor_role::matrix || t.role == tensor_role::embedding) out[t.name] = t.type;
  return out;
}

std::string model_weights::describe_types() const {
  std::map<dtype, int> counts;
  for (const auto& [name, type] : types()) ++counts[type];
  std::string out;
  for (const auto& [type, count] : counts) out += text::format("{}{} {}", out.empty() ? "" : ", ", to_string(type), count);
  return out + " matrices";
}

namespace {

/// splitmix64: small, fast, and identical on every platform.
class seeded_stream {
 public:
  explicit seeded_stream(uint64_t seed) : state_(seed) {}
  /// Uniform in [-1, 1).
  float next_signed() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return float(double(z >> 40) / double(1ull << 23) - 1.0);
  }

 private:
  uint64_t state_;
};

}  // namespace

result<model_weights> synthetic_weights(const model_config& config, uint64_t seed, bool shared_classifier) {
  auto allocated = model_weights::allocate(config, shared_classifier);
  if (!allocated.is_ok()) return allocated.error();
  seeded_stream rng(seed);
  for (const tensor_view& t : allocated->tensors()) {
    // Norm weights near one; matrices uniform with variance 1/fan_in, so activations stay of order
    // one through every layer; the embedding uniform in [-1, 1); biases small.
    const bool is_norm = t.role == tensor_role::norm;
    const float scale = is_norm || t.role == tensor_role::bias ? 0.1f
                        : t.role == tensor_role::embedding     ? 1.0f
                                                               : float(std::sqrt(3.0 / double(t.cols)));
    const float offset = is_norm ? 1.0f : 0.0f;
    float* data = t.f32();
    for (uint64_t i = 0; i < t.size; ++i) data[i] = offset + scale * rng.next_signed();
  }
  return allocated;
}

dtype matrix_type_for(dtype wanted, uint64_t cols) {
  if (cols % block_elements(wanted) == 0) return wanted;
  const dtype fallback = wanted == dtype::q4_k ? dtype::q5_0 : wanted == dtype::q6_k ? dtype::q8_0 : dtype::f32;
  return cols % block_elements(fallback) == 0 ? fallback : dtype::f32;
}

result<model_weights> convert_weights(const model_weights& weights, dtype wanted) {
  matrix_types types;
  for (const tensor_view& t : weights.tensors())
    if (t.role == tensor_role::matrix || t.role == tensor_role::embedding) types[t.name] = matrix_type_for(wanted, t.cols);
  auto converted = model_weights::allocate(weights.config(), weights.shared_classifier(), types);
  if (!converted.is_ok()) return converted.error();
  const std::vector<tensor_view> from = weights.tensors(), to = converted->tensors();
  std::vector<float> row;
  std::vector<uint8_t> file_row;
  for (size_t i = 0; i < from.size(); ++i) {
    const tensor_view &a = from[i], &b = to[i];
    if (a.type == b.type && !a.tiled) {
      std::memcpy(b.data, a.data, a.bytes());
      continue;
    }
    row.resize(a.cols);
    const size_t in_row = row_bytes(a.type, a.cols), out_row = row_bytes(b.type, b.cols);
    file_row.resize(in_row);
    for (uint64_t r = 0; r < a.size / a.cols; ++r) {
      const uint8_t* in = a.data + r * in_row;
      if (a.tiled) untile_row(a.type, a.data, a.cols, r, file_row.data()), in = file_row.data();
      if (a.type == b.type) {
        std::memcpy(b.data + r * out_row, in, out_row);
        continue;
      }
      dequantize(a.type, in, a.cols, row.data());
      quantize(b.type, row.data(), b.cols, b.data + r * out_row);
    }
  }
  return converted;
}

}  // namespace illm::gpu
