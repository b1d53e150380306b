#pragma once
// Where a tier's bytes lie: host memory, or a preallocated file on local disk read and written with O_DIRECT
// where the filesystem allows it (page-aligned buffers, offsets and sizes: the store keeps to tier_io_align).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "gpu/status.hpp"

namespace illm::gpu {

/// Offsets, sizes and buffers of tier I/O are multiples of this (O_DIRECT's rule on every common filesystem).
inline constexpr size_t tier_io_align = 4096;

/// A byte range of fixed size that reads and writes at offsets.
class tier_medium {
 public:
  virtual ~tier_medium() = default;
  /// Reads out.size() bytes at `offset`; an io_error names a short read (a file cut shorter) or the error.
  virtual status read_at(uint64_t offset, std::span<std::byte> out) = 0;
  /// Writes `in` at `offset`; an io_error names the error (a full disk, a failing one).
  virtual status write_at(uint64_t offset, std::span<const std::byte> in) = 0;
  virtual uint64_t size() const = 0;
  /// Whether its contents outlive the process (a file's do).
  virtual bool persistent() const = 0;
  /// What it is, for log lines ("host memory", "file PATH (O_DIRECT)").
  virtual std::string describe() const = 0;
};

/// `bytes` of host memory (zeroed).
result<std::unique_ptr<tier_medium>> open_memory_medium(uint64_t bytes);

/// The file at `path`, created when missing and preallocated to `bytes` (a larger one is cut to it); `existed`
/// says whether it was there before. Fails with the reason when the file cannot be opened or the disk cannot hold it.
result<std::unique_ptr<tier_medium>> open_file_medium(const std::string& path, uint64_t bytes, bool* existed);

/// A buffer of `bytes` (a multiple of tier_io_align) aligned to tier_io_align, zeroed.
struct aligned_buffer {
  explicit aligned_buffer(size_t bytes);
  std::span<std::byte> span() { return {data.get(), bytes}; }
  std::span<const std::byte> span() const { return {data.get(), bytes}; }
  struct free_aligned {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, free_aligned> data;
  size_t bytes = 0;
};

}  // namespace illm::gpu
