#pragma once
// A checksum of memory for verifying copies (KV blocks moved between instances): FNV-1a over 64-bit
// words. Order matters, so a block in the wrong slot changes it, and summing pieces one after another
// (continuing from the last value) equals one pass over them.

#include <cstdint>
#include <cstring>

namespace illm::gpu {

/// Where a checksum starts.
inline constexpr uint64_t checksum_seed = 0xcbf29ce484222325ull;

/// The checksum of [data, data + bytes) (whole words; a tail of under 8 bytes is left out), from `h`.
inline uint64_t checksum_words(const void* data, uint64_t bytes, uint64_t h = checksum_seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace illm::gpu
