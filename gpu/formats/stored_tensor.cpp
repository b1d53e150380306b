#include "gpu/formats/stored_tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gpu/half.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

const char* to_string(stored_type t) {
  switch (t) {
    case stored_type::f32: return "F32";
    case stored_type::f16: return "F16";
    case stored_type::bf16: return "BF16";
    case stored_type::q8_0: return "Q8_0";
  }
  return "?";
}

uint32_t element_bytes(stored_type t) { return t == stored_type::f32 ? 4 : t == stored_type::q8_0 ? 34 : 2; }

uint32_t block_elements(stored_type t) { return t == stored_type::q8_0 ? 32 : 1; }

uint64_t stored_bytes(stored_type t, uint64_t elements) {
  const uint32_t per_block = block_elements(t);
  return elements % per_block == 0 ? elements / per_block * element_bytes(t) : 0;
}

uint64_t stored_tensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string stored_tensor::describe() const {
  return text::format("{} [{}] {}", name, text::join(shape, ", "), to_string(type));
}

namespace {

/// Q8_0: per block of 32, an f16 scale d and 32 int8 q; element i is d * q[i].
void read_q8_0(const uint8_t* at, uint64_t first, uint64_t n, float* out) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t e = first + i;
    const uint8_t* block = at + e / 32 * 34;
    uint16_t d;
    std::memcpy(&d, block, 2);
    out[i] = f16_to_float(d) * float(int8_t(block[2 + e % 32]));
  }
}

}  // namespace

status read_floats(const stored_tensor& t, uint64_t first, uint64_t n, float* out) {
  if (t.type == stored_type::q8_0) {
    read_q8_0(t.data, first, n, out);
  } else {
    const uint8_t* at = t.data + first * element_bytes(t.type);
    for (uint64_t i = 0; i < n; ++i) {
      if (t.type == stored_type::f32) {
        std::memcpy(&out[i], at + 4 * i, 4);
        continue;
      }
      uint16_t h;
      std::memcpy(&h, at + 2 * i, 2);
      out[i] = t.type == stored_type::f16 ? f16_to_float(h) : bf16_to_float(h);
    }
  }
  for (uint64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[i]))
      return {status_code::corrupt_model, text::format("{}: tensor {}: element {} is {}", t.file ? t.file->path() : "",
                                                       t.name, first + i, out[i])};
  return status::ok();
}

void interleave_rope_halves(float* x, uint64_t heads, uint64_t head_dim, uint64_t cols) {
  const uint64_t half = head_dim / 2;
  std::vector<float> head(head_dim * cols);
  for (uint64_t h = 0; h < heads; ++h) {
    float* rows = x + h * head_dim * cols;
    std::memcpy(head.data(), rows, head.size() * sizeof(float));
    for (uint64_t i = 0; i < half; ++i) {
      std::memcpy(rows + (2 * i) * cols, head.data() + i * cols, cols * sizeof(float));
      std::memcpy(rows + (2 * i + 1) * cols, head.data() + (half + i) * cols, cols * sizeof(float));
    }
  }
}

namespace {

const stored_tensor* named(const std::vector<stored_tensor>& tensors, const std::string& name) {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const stored_tensor& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

status fill(const tensor_destination& d, const stored_tensor& t, uint64_t head_dim, const std::string& model) {
  if (t.shape != d.shape)
    return {status_code::corrupt_model, text::format("{}: tensor {} has shape [{}], {} has [{}]", t.file->path(), t.name,
                                                     text::join(t.shape, ", "), model, text::join(d.shape, ", "))};
  ILLM_RETURN_IF_ERROR(read_floats(t, 0, t.elements(), d.dst));
  if (d.rope_heads > 0) interleave_rope_halves(d.dst, d.rope_heads, head_dim, t.shape.size() == 2 ? t.shape[1] : 1);
  t.file->drop(t.data, t.bytes);
  return status::ok();
}

}  // namespace

status fill_tensors(const std::vector<tensor_destination>& destinations, const std::vector<stored_tensor>& tensors,
                    uint64_t head_dim, const std::string& file, const std::string& model,
                    const std::function<bool(const std::string&)>& ignorable) {
  for (const tensor_destination& d : destinations) {
    const stored_tensor* t = named(tensors, d.name);
    if (!t) return {status_code::corrupt_model, text::format("{}: no tensor {} ({} has it)", file, d.name, model)};
    ILLM_RETURN_IF_ERROR(fill(d, *t, head_dim, model));
  }
  for (const stored_tensor& t : tensors)
    if (!ignorable(t.name) &&
        std::none_of(destinations.begin(), destinations.end(), [&](const tensor_destination& d) { return d.name == t.name; }))
      return {status_code::corrupt_model,
              text::format("{}: tensor {} is not part of {}", t.file->path(), t.describe(), model)};
  return status::ok();
}

}  // namespace illm::gpu
