#pragma once
// The bytes a tier writes (gpu/tier/kv_tier.hpp): the first page of a disk tier, each slot's header, and the
// index written beside the file. Fixed-size records of whole 64-bit words, each with a checksum of what precedes
// it (gpu/checksum.hpp); the file is read only by the build that wrote it (format_version).

#include <cstdint>
#include <span>

#include "gpu/checksum.hpp"
#include "gpu/tier/kv_tier.hpp"

namespace illm::gpu::tier_format {

inline constexpr char file_magic[8] = {'I', 'L', 'L', 'M', 'T', 'I', 'E', 'R'};
inline constexpr char slot_magic[8] = {'I', 'L', 'L', 'M', 'B', 'L', 'K', '1'};
inline constexpr char index_magic[8] = {'I', 'L', 'L', 'M', 'T', 'I', 'X', '1'};
inline constexpr uint32_t format_version = 1;

/// The first page of a disk tier: what KV it holds and how it is cut.
struct file_header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  block_key identity;
  uint64_t block_bytes, slot_bytes, slots;
  uint64_t checksum;  ///< of the fields above
};

/// The first page of a slot: what block follows it.
struct slot_header {
  char magic[8];
  block_key identity;
  tier_block_id id;
  uint64_t block_bytes;
  uint64_t checksum;         ///< of the block's bytes
  uint64_t header_checksum;  ///< of the fields above
};

/// The start of an index file; its entries follow (most recently used first), then the checksum of everything
/// before it.
struct index_header {
  char magic[8];
  block_key identity;
  uint64_t block_bytes, slot_bytes, slots, count;
};

/// A held slot as the index lists it.
struct index_entry {
  uint32_t slot;
  uint32_t reserved;
  tier_block_id id;
  uint64_t checksum;
};

/// The checksum of the fields of `value` before `field`.
template <class T>
uint64_t checksum_before(const T& value, const uint64_t T::*field) {
  const size_t bytes = size_t(reinterpret_cast<const char*>(&(value.*field)) - reinterpret_cast<const char*>(&value));
  return checksum_words(&value, bytes);
}

inline uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

/// The checksum of a block's bytes (padded with zeros to whole words, as a slot holds them).
inline uint64_t block_checksum(std::span<const std::byte> padded, uint64_t block_bytes) {
  return checksum_words(padded.data(), round_up(block_bytes, 8));
}

}  // namespace illm::gpu::tier_format
