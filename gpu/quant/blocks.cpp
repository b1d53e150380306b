#include "gpu/quant/blocks.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gpu/half.hpp"

namespace illm::gpu {

namespace {

void write_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

int nearest(float x) { return int(std::lrintf(x)); }

// --- q8_0 ---

void read_q8_0(const uint8_t* b, float* y) {
  const float d = f16_to_float(read_u16(b));
  for (int i = 0; i < 32; ++i) y[i] = d * float(int8_t(b[2 + i]));
}

void write_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t d = float_to_f16(amax / 127.0f);
  const float stored = f16_to_float(d), inverse = stored != 0.0f ? 1.0f / stored : 0.0f;
  write_u16(b, d);
  for (int i = 0; i < 32; ++i) b[2 + i] = uint8_t(int8_t(std::clamp(nearest(x[i] * inverse), -127, 127)));
}

// --- q5_0 ---

void read_q5_0(const uint8_t* b, float* y) {
  const float d = f16_to_float(read_u16(b));
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0f) | int(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * float(lo - 16);
    y[j + 16] = d * float(hi - 16);
  }
}

void write_q5_0(const float* x, uint8_t* b) {
  // The value of largest magnitude maps to level 0 (-16 d), so d carries its sign and the other end reaches +15 d.
  float extreme = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > std::fabs(extreme)) extreme = x[i];
  const uint16_t d = float_to_f16(extreme / -16.0f);
  const float stored = f16_to_float(d), inverse = stored != 0.0f ? 1.0f / stored : 0.0f;
  write_u16(b, d);
  uint32_t qh = 0;
  uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::clamp(nearest(x[j] * inverse) + 16, 0, 31);
    const int hi = std::clamp(nearest(x[j + 16] * inverse) + 16, 0, 31);
    qs[j] = uint8_t((lo & 0x0f) | ((hi & 0x0f) << 4));
    qh |= uint32_t(lo >> 4) << j;
    qh |= uint32_t(hi >> 4) << (j + 16);
  }
  std::memcpy(b + 2, &qh, 4);
}

// --- mxfp4 ---

void read_mxfp4(const uint8_t* b, float* y) {
  const float d = mxfp4_scale(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(mxfp4_levels[b[1 + j] & 0x0f]);
    y[j + 16] = d * float(mxfp4_levels[b[1 + j] >> 4]);
  }
}

/// The code of the level nearest x / d (of equal distances the first code, as gguf-py's argmin takes).
int nearest_mxfp4_code(float x, float d) {
  int best = 0;
  float best_error = std::fabs(x);
  for (int code = 1; code < 16; ++code) {
    const float error = std::fabs(d * float(mxfp4_levels[code]) - x);
    if (error < best_error) best = code, best_error = error;
  }
  return best;
}

void write_mxfp4(const float* x, uint8_t* b) {
  // As gguf-py quantizes: the exponent puts the block's largest magnitude among the top levels (floor(log2) - 2).
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int exponent = amax > 0.0f ? std::clamp(int(std::floor(std::log2(amax))) - 2 + 127, 0, 254) : 0;
  b[0] = uint8_t(exponent);
  const float d = mxfp4_scale(b[0]);
  for (int j = 0; j < 16; ++j) b[1 + j] = uint8_t(nearest_mxfp4_code(x[j], d) | (nearest_mxfp4_code(x[j + 16], d) << 4));
}

// --- q4_k ---

}  // namespace


void q4_k_scale_min(int j, const uint8_t* s, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

namespace {

void read_q4_k(const uint8_t* b, float* y) {
  const float d = f16_to_float(read_u16(b)), dmin = f16_to_float(read_u16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c) {
    int sc0, m0, sc1, m1;
    q4_k_scale_min(2 * c, scales, sc0, m0);
    q4_k_scale_min(2 * c + 1, scales, sc1, m1);
    for (int l = 0; l < 32; ++l) {
      y[64 * c + l] = d * float(sc0) * float(qs[32 * c + l] & 0x0f) - dmin * float(m0);
      y[64 * c + 32 + l] = d * float(sc1) * float(qs[32 * c + l] >> 4) - dmin * float(m1);
    }
  }
}

void write_q4_k(const float* x, uint8_t* b) {
  // Each sub-block spans [lo, hi] with lo <= 0: x = scale * q - min_value, scale = (hi - lo) / 15, min_value = -lo.
  float scale[8], min_value[8], scale_max = 0.0f, min_max = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* s = x + 32 * j;
    const float lo = std::min(0.0f, *std::min_element(s, s + 32)), hi = std::max(lo, *std::max_element(s, s + 32));
    scale[j] = (hi - lo) / 15.0f;
    min_value[j] = -lo;
    scale_max = std::max(scale_max, scale[j]);
    min_max = std::max(min_max, min_value[j]);
  }
  const uint16_t d_bits = float_to_f16(scale_max / 63.0f), dmin_bits = float_to_f16(min_max / 63.0f);
  const float d = f16_to_float(d_bits), dmin = f16_to_float(dmin_bits);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0.0f ? std::clamp(nearest(scale[j] / d), 0, 63) : 0;
    m[j] = dmin > 0.0f ? std::clamp(nearest(min_value[j] / dmin), 0, 63) : 0;
  }
  write_u16(b, d_bits);
  write_u16(b + 2, dmin_bits);
  uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = uint8_t((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
  uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      int q[2];
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;
        const float step = d * float(sc[j]);
        q[half] = step > 0.0f ? std::clamp(nearest((x[32 * j + l] + dmin * float(m[j])) / step), 0, 15) : 0;
      }
      qs[32 * c + l] = uint8_t(q[0] | (q[1] << 4));
    }
}

// --- q6_k ---

void read_q6_k(const uint8_t* b, float* y) {
  const float d = f16_to_float(read_u16(b + 208));
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = b + 64 * n;
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = scales + 8 * n;
    float* out = y + 128 * n;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * float(sc[is]) * float(q1);
      out[l + 32] = d * float(sc[is + 2]) * float(q2);
      out[l + 64] = d * float(sc[is + 4]) * float(q3);
      out[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

void write_q6_k(const float* x, uint8_t* b) {
  // Sub-block i (16 elements) reaches -32 levels of its scale at its value of largest magnitude.
  float scale[16], scale_max = 0.0f;
  for (int i = 0; i < 16; ++i) {
    float extreme = 0.0f;
    for (int l = 0; l < 16; ++l)
      if (std::fabs(x[16 * i + l]) > std::fabs(extreme)) extreme = x[16 * i + l];
    scale[i] = extreme / -32.0f;
    scale_max = std::max(scale_max, std::fabs(scale[i]));
  }
  const uint16_t d_bits = float_to_f16(scale_max / 127.0f);
  const float d = f16_to_float(d_bits);
  int q[256];
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int i = 0; i < 16; ++i) {
    sc[i] = int8_t(d > 0.0f ? std::clamp(nearest(scale[i] / d), -127, 127) : 0);
    const float step = d * float(sc[i]);
    for (int l = 0; l < 16; ++l)
      q[16 * i + l] = step != 0.0f ? std::clamp(nearest(x[16 * i + l] / step) + 32, 0, 63) : 32;
  }
  for (int n = 0; n < 2; ++n) {
    uint8_t* ql = b + 64 * n;
    uint8_t* qh = b + 128 + 32 * n;
    const int* v = q + 128 * n;
    for (int l = 0; l < 32; ++l) {
      ql[l] = uint8_t((v[l] & 0x0f) | ((v[l + 64] & 0x0f) << 4));
      ql[l + 32] = uint8_t((v[l + 32] & 0x0f) | ((v[l + 96] & 0x0f) << 4));
      qh[l] = uint8_t((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
    }
  }
  write_u16(b + 208, d_bits);
}

using block_reader = void (*)(const uint8_t*, float*);
using block_writer = void (*)(const float*, uint8_t*);

block_reader reader_of(dtype t) {
  switch (t) {
    case dtype::q8_0: return read_q8_0;
    case dtype::q5_0: return read_q5_0;
    case dtype::q4_k: return read_q4_k;
    case dtype::q6_k: return read_q6_k;
    case dtype::mxfp4: return read_mxfp4;
    default: return nullptr;
  }
}

block_writer writer_of(dtype t) {
  switch (t) {
    case dtype::q8_0: return write_q8_0;
    case dtype::q5_0: return write_q5_0;
    case dtype::q4_k: return write_q4_k;
    case dtype::q6_k: return write_q6_k;
    case dtype::mxfp4: return write_mxfp4;
    default: return nullptr;
  }
}

}  // namespace

void dequantize(dtype t, const void* src, size_t n, float* out) {
  const auto* in = static_cast<const uint8_t*>(src);
  switch (t) {
    case dtype::f32: std::memcpy(out, src, n * sizeof(float)); return;
    case dtype::f16:
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_float(read_u16(in + 2 * i));
      return;
    case dtype::bf16:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(read_u16(in + 2 * i));
      return;
    default: break;
  }
  const block_reader read = reader_of(t);
  const size_t per = block_elements(t), bytes = block_bytes(t);
  for (size_t b = 0; b < n / per; ++b) read(in + b * bytes, out + b * per);
}

void quantize(dtype t, const float* src, size_t n, void* out) {
  if (!is_block_type(t)) {
    convert_floats(src, n, t, out);
    return;
  }
  const block_writer write = writer_of(t);
  auto* o = static_cast<uint8_t*>(out);
  const size_t per = block_elements(t), bytes = block_bytes(t);
  for (size_t b = 0; b < n / per; ++b) write(src + b * per, o + b * bytes);
}

std::optional<uint64_t> first_non_finite(dtype t, const void* src, uint64_t n) {
  // Read a block (or 256 elements) at a time; a block's values are finite exactly when its scales are.
  const uint64_t per = is_block_type(t) ? block_elements(t) : 256;
  const auto* in = static_cast<const uint8_t*>(src);
  float values[256];
  for (uint64_t first = 0; first < n; first += per) {
    const uint64_t count = std::min(per, n - first);
    dequantize(t, in + stored_bytes(t, first), size_t(count), values);
    for (uint64_t i = 0; i < count; ++i)
      if (!std::isfinite(values[i])) return first + i;
  }
  return std::nullopt;
}

}  // namespace illm::gpu
