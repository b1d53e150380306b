#include "gpu/formats/stored_tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "gpu/quant/blocks.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

uint64_t stored_tensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string stored_tensor::describe() const {
  return text::format("{} [{}] {}", name, text::join(shape, ", "), file_name(type));
}

namespace {

status not_finite(const stored_tensor& t, uint64_t element) {
  return {status_code::corrupt_model, text::format("{}: tensor {}: element {} is not finite",
                                                   t.file ? t.file->path() : "", t.name, element)};
}

/// Blocks [first, first + n) of MXFP4 split as transformers stores it, in GGUF's layout (exponent, then value j's
/// code in the low nibble of byte j and value j + 16's in the high one).
void join_mxfp4_blocks(const stored_tensor& t, uint64_t first, uint64_t n, uint8_t* out) {
  for (uint64_t b = first; b < first + n; ++b, out += 17) {
    const uint8_t* codes = t.data + b * 16;
    const auto code = [&](int k) { return k % 2 == 0 ? codes[k / 2] & 0x0f : codes[k / 2] >> 4; };
    out[0] = t.scales[b];
    for (int j = 0; j < 16; ++j) out[1 + j] = uint8_t(code(j) | (code(j + 16) << 4));
  }
}

/// The bytes of elements [first, first + n) (whole blocks) in the layout of the file's type: where they lie, or
/// joined into `scratch` for split MXFP4.
const uint8_t* stored_bytes_of(const stored_tensor& t, uint64_t first, uint64_t n, std::vector<uint8_t>& scratch) {
  if (!t.scales) return t.data + stored_bytes(t.type, first);
  scratch.resize(stored_bytes(t.type, n));
  join_mxfp4_blocks(t, first / 32, n / 32, scratch.data());
  return scratch.data();
}

}  // namespace

const stored_tensor* sort_by_name(std::vector<stored_tensor>& tensors) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].name == tensors[i - 1].name) return &tensors[i];
  return nullptr;
}

const stored_tensor* find_by_name(const std::vector<stored_tensor>& sorted, std::string_view name) {
  auto it = std::lower_bound(sorted.begin(), sorted.end(), name,
                             [](const stored_tensor& t, std::string_view n) { return t.name < n; });
  return it != sorted.end() && it->name == name ? &*it : nullptr;
}

status read_floats(const stored_tensor& t, uint64_t first, uint64_t n, float* out) {
  std::vector<uint8_t> scratch;
  dequantize(t.type, stored_bytes_of(t, first, n, scratch), size_t(n), out);
  for (uint64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i])) return not_finite(t, first + i);
  return status::ok();
}

void interleave_rope_halves(uint8_t* x, uint64_t heads, uint64_t head_dim, uint64_t row_bytes) {
  const uint64_t half = head_dim / 2;
  std::vector<uint8_t> head(head_dim * row_bytes);
  for (uint64_t h = 0; h < heads; ++h) {
    uint8_t* rows = x + h * head_dim * row_bytes;
    std::memcpy(head.data(), rows, head.size());
    for (uint64_t i = 0; i < half; ++i) {
      std::memcpy(rows + (2 * i) * row_bytes, head.data() + i * row_bytes, row_bytes);
      std::memcpy(rows + (2 * i + 1) * row_bytes, head.data() + (half + i) * row_bytes, row_bytes);
    }
  }
}

namespace {

const stored_tensor* named(const std::vector<stored_tensor>& tensors, const std::string& name) {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const stored_tensor& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

/// Copies the tensor's bytes as they are, after checking that every value they give is finite.
status copy_as_stored(const stored_tensor& t, const tensor_view& v) {
  if (const auto bad = first_non_finite(t.type, t.data, t.elements())) return not_finite(t, *bad);
  std::memcpy(v.data, t.data, t.bytes);
  return status::ok();
}

/// Converts the tensor through fp32 into the view's type, a few rows at a time.
status convert(const stored_tensor& t, const tensor_view& v) {
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, (uint64_t(1) << 20) / v.cols);
  std::vector<float> chunk;
  for (uint64_t row = 0; row < v.size / v.cols; row += rows_per_chunk) {
    const uint64_t n = std::min(rows_per_chunk, v.size / v.cols - row) * v.cols;
    chunk.resize(n);
    ILLM_RETURN_IF_ERROR(read_floats(t, row * v.cols, n, chunk.data()));
    quantize(v.type, chunk.data(), n, v.data + stored_bytes(v.type, row * v.cols));
  }
  return status::ok();
}

/// A shape with its outer dimensions of 1 left out: a matrix [1][n] and a vector [n] hold the same values.
std::vector<uint64_t> without_leading_ones(std::vector<uint64_t> shape) {
  while (shape.size() > 1 && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

/// Rows source_offset, source_offset + source_stride, ... of the tensor into the view's rows, in the view's type
/// (split MXFP4 joined, another type converted through fp32), every value checked finite.
status copy_rows(const stored_tensor& t, const tensor_view& v, const tensor_destination& d) {
  const uint64_t cols = v.cols, rows = v.size / cols, out_row = row_bytes(v.type, size_t(cols));
  std::vector<uint8_t> scratch;
  std::vector<float> values(cols);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t first = (d.source_offset + d.source_stride * r) * cols;
    const uint8_t* row = stored_bytes_of(t, first, cols, scratch);
    if (t.type == v.type) {
      if (const auto bad = first_non_finite(t.type, row, cols)) return not_finite(t, first + *bad);
      std::memcpy(v.data + r * out_row, row, out_row);
      continue;
    }
    dequantize(t.type, row, size_t(cols), values.data());
    for (uint64_t i = 0; i < cols; ++i)
      if (!std::isfinite(values[i])) return not_finite(t, first + i);
    quantize(v.type, values.data(), size_t(cols), v.data + r * out_row);
  }
  return status::ok();
}

status fill(const tensor_destination& d, const stored_tensor& t, const tensor_view& v, uint64_t head_dim,
            const std::string& model) {
  if (without_leading_ones(t.shape) != without_leading_ones(d.shape))
    return {status_code::corrupt_model, text::format("{}: tensor {} has shape [{}], {} has [{}]", t.file->path(), t.name,
                                                     text::join(t.shape, ", "), model, text::join(d.shape, ", "))};
  const bool whole = d.source_stride == 1 && !t.scales;
  ILLM_RETURN_IF_ERROR(!whole ? copy_rows(t, v, d) : t.type == v.type ? copy_as_stored(t, v) : convert(t, v));
  if (d.rope_heads > 0) interleave_rope_halves(v.data, d.rope_heads, head_dim, row_bytes(v.type, size_t(v.cols)));
  // An interleaved tensor's pages serve two targets: they are dropped with the last (the odd rows).
  if (d.source_offset + 1 == d.source_stride) {
    t.file->drop(t.data, t.bytes);
    if (t.scales) t.scales_file->drop(t.scales, t.elements() / 32);
  }
  return status::ok();
}

/// The rows of `v` a destination fills: from its first row on, as many as its shape holds (of every source_stride-th
/// row).
tensor_view rows_of(tensor_view v, const tensor_destination& d) {
  uint64_t elements = 1;
  for (uint64_t n : d.shape) elements *= n;
  v.data += row_bytes(v.type, size_t(v.cols)) * d.first_row;
  v.size = elements / d.source_stride;
  return v;
}

/// A naming suffix and the rows it selects: "name[o::s]" is rows o, o + s, ... of name.
struct row_slice {
  std::string name;
  uint64_t offset = 0, stride = 1;
};

row_slice slice_of(const std::string& suffix) {
  const size_t open = suffix.rfind('[');
  if (open == std::string::npos || suffix.back() != ']') return {suffix};
  const std::string inside = suffix.substr(open + 1, suffix.size() - open - 2);
  const size_t colons = inside.find("::");
  return {suffix.substr(0, open), std::stoull(inside.substr(0, colons)), std::stoull(inside.substr(colons + 2))};
}

}  // namespace

std::vector<tensor_destination> destinations_of(const model_config& c, bool tied, const tensor_naming& naming) {
  const uint64_t d = c.dim;
  const auto rope_heads = [&](const std::string& kind) -> uint64_t {
    if (!naming.rope_halves) return 0;
    if (kind == "wq" || kind == "bq") return uint64_t(c.n_heads);
    if (kind == "wk" || kind == "bk") return uint64_t(c.n_kv_heads);
    return kind == "q_norm" || kind == "k_norm" ? 1 : 0;
  };
  std::vector<tensor_destination> s;
  s.push_back({naming.embedding, {uint64_t(c.vocab_size), d}, "token_embedding"});
  s.push_back({naming.final_norm, {d}, "rms_final"});
  if (!tied) s.push_back({naming.classifier, {uint64_t(c.vocab_size), d}, "classifier"});
  const std::vector<layer_tensor_kind> kinds = layer_tensor_kinds(c);
  for (int l = 0; l < c.n_layers; ++l)
    for (const layer_tensor_kind& k : kinds) {
      const row_slice slice = slice_of(naming.suffix.at(k.name));
      const std::string prefix = naming.layer_prefix + std::to_string(l) + ".", suffix = slice.name;
      const std::string target = text::format("layers.{}.{}", l, k.name);
      const size_t per_expert = suffix.find("{e}");
      // A matrix [rows][cols], a vector [rows]; a stack of experts' has [experts] in front (or one per expert).
      const auto shape_of = [&](uint64_t experts, uint64_t rows) {
        std::vector<uint64_t> shape;
        if (experts > 0) shape.push_back(experts);
        shape.push_back(rows);
        if (k.matrix) shape.push_back(k.cols);
        return shape;
      };
      if (k.experts == 0) {
        s.push_back({prefix + suffix, shape_of(0, k.rows), target, rope_heads(k.name)});
      } else if (per_expert == std::string::npos) {
        s.push_back({prefix + suffix, shape_of(k.experts, k.rows / k.experts * slice.stride), target, 0, 0,
                     slice.offset, slice.stride});
      } else {
        for (uint64_t e = 0; e < k.experts; ++e) {
          std::string name = suffix;
          name.replace(per_expert, 3, std::to_string(e));
          s.push_back({prefix + name, shape_of(0, k.rows / k.experts), target, 0, e * (k.rows / k.experts)});
        }
      }
    }
  return s;
}

matrix_types matrix_types_of(const std::vector<tensor_destination>& destinations,
                             const std::vector<stored_tensor>& tensors, std::optional<dtype> wanted) {
  matrix_types types;
  for (const tensor_destination& d : destinations)
    if (const stored_tensor* t = named(tensors, d.name))
      types[d.target] = wanted ? matrix_type_for(*wanted, d.shape.back()) : t->type;
  return types;
}

status fill_tensors(model_weights& weights, const std::vector<tensor_destination>& destinations,
                    const std::vector<stored_tensor>& tensors, uint64_t head_dim, const std::string& file,
                    const std::string& model, const std::function<bool(const std::string&)>& ignorable) {
  std::map<std::string, tensor_view> views;
  for (tensor_view& v : weights.tensors()) views[v.name] = v;
  for (const tensor_destination& d : destinations) {
    const stored_tensor* t = named(tensors, d.name);
    if (!t) return {status_code::corrupt_model, text::format("{}: no tensor {} ({} has it)", file, d.name, model)};
    const auto v = views.find(d.target);
    if (v == views.end())
      return {status_code::internal, text::format("{}: tensor {} goes to {}, which the model lacks", file, d.name, d.target)};
    ILLM_RETURN_IF_ERROR(fill(d, *t, rows_of(v->second, d), head_dim, model));
  }
  for (const stored_tensor& t : tensors)
    if (!ignorable(t.name) &&
        std::none_of(destinations.begin(), destinations.end(), [&](const tensor_destination& d) { return d.name == t.name; }))
      return {status_code::corrupt_model,
              text::format("{}: tensor {} is not part of {}", t.file->path(), t.describe(), model)};
  return status::ok();
}

}  // namespace illm::gpu
