#pragma once
// What an operator asks of a tier below an instance's KV pool (`--kv-tier`): host memory of a size, or a
// preallocated file on local disk of a size.

#include <cstdint>
#include <string>
#include <string_view>

#include "gpu/status.hpp"

namespace illm::gpu {

/// Where a tier keeps its blocks.
enum class tier_kind : uint8_t {
  host,  ///< host memory (pinned under device pools)
  disk,  ///< a preallocated file on local disk
};

/// One tier as `--kv-tier` names it: `host:SIZE` or `disk:PATH:SIZE`.
struct tier_spec {
  tier_kind kind = tier_kind::host;
  std::string path;    ///< the file of a disk tier
  uint64_t bytes = 0;  ///< its size

  /// As the flag writes it (what a log line or an error shows).
  std::string text() const;
};

/// The smallest tier: one block of a real model is about a megabyte, and a tier of a handful is no tier.
inline constexpr uint64_t min_tier_bytes = uint64_t(1) << 20;
/// The largest: 1 PiB (a size past it is a typing error, not a disk).
inline constexpr uint64_t max_tier_bytes = uint64_t(1) << 50;

/// A size as operators write it: whole bytes, or a number with K, M, G or T (powers of 1024, an optional "iB" or
/// "B" after it), e.g. 512M, 64GiB, 1T. Refuses fractions, signs and values past max_tier_bytes.
result<uint64_t> parse_byte_size(std::string_view text);

/// `host:SIZE` or `disk:PATH:SIZE` (PATH may hold colons: SIZE is what follows the last one), with a message naming
/// what is wrong otherwise.
result<tier_spec> parse_tier_spec(std::string_view text);

}  // namespace illm::gpu
