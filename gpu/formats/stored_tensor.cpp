#include "gpu/formats/stored_tensor.hpp"

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
  }
  return "?";
}

uint32_t element_bytes(stored_type t) { return t == stored_type::f32 ? 4 : 2; }

uint64_t stored_tensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string stored_tensor::describe() const {
  return text::format("{} [{}] {}", name, text::join(shape, ", "), to_string(type));
}

status read_floats(const stored_tensor& t, uint64_t first, uint64_t n, float* out) {
  const uint8_t* at = t.data + first * element_bytes(t.type);
  for (uint64_t i = 0; i < n; ++i) {
    if (t.type == stored_type::f32) {
      std::memcpy(&out[i], at + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, at + 2 * i, 2);
      out[i] = t.type == stored_type::f16 ? f16_to_float(h) : bf16_to_float(h);
    }
    if (!std::isfinite(out[i]))
      return {status_code::corrupt_model, text::format("{}: tensor {}: element {} is {}", t.file ? t.file->path() : "",
                                                       t.name, first + i, out[i])};
  }
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

}  // namespace illm::gpu
