#include "gpu/dtype.hpp"

#include <cctype>
#include <string>

namespace illm::gpu {

const char* to_string(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
    case dtype::q8_0: return "q8_0";
    case dtype::q5_0: return "q5_0";
    case dtype::q4_k: return "q4_k";
    case dtype::q6_k: return "q6_k";
    case dtype::mxfp4: return "mxfp4";
  }
  return "unknown";
}

const char* file_name(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::q8_0: return "Q8_0";
    case dtype::q5_0: return "Q5_0";
    case dtype::q4_k: return "Q4_K";
    case dtype::q6_k: return "Q6_K";
    case dtype::mxfp4: return "MXFP4";
  }
  return "UNKNOWN";
}

std::optional<dtype> parse_dtype(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (dtype t : all_dtypes)
    if (lower == to_string(t)) return t;
  return std::nullopt;
}

}  // namespace illm::gpu
