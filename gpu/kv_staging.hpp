#pragma once
// How KV blocks of a pool in device memory cross the host on their way between instances: the data plane
// reads and writes host memory only. At the source, a move's blocks are downloaded chunk by chunk into pinned
// buffers (outgoing_staging) that the puts read. At the destination, the instance registers an arena of host blocks
// (kv_landing, pinned on a GPU) instead of its pool: a move takes as many slots as it has blocks when it is
// granted, the sender's puts land in them, and at its commit they are uploaded into the move's blocks of the
// pool and the slots go back. An instance whose pool is host memory needs neither: puts read and write the pool.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "gpu/checksum.hpp"

#include "gpu/backend.hpp"
#include "gpu/kv_pool.hpp"

namespace illm::gpu {

/// Blocks of a device pool read into host memory for the data plane's puts: one buffer of an outgoing_staging,
/// free again when the last reference goes (keep one in every put's completion until the put is done).
class outgoing_blocks {
 public:
  /// Block i of the chunk (host memory).
  const void* data(size_t i) const { return static_cast<const char*>(buffer_.get()) + i * block_bytes_; }
  size_t size() const { return count_; }
  /// The checksum of the blocks in order, chained from `from` (a move's chunks chain into the checksum of all of
  /// its blocks, equal to kv_pool::checksum of them).
  uint64_t checksum(uint64_t from = checksum_seed) const;

 private:
  friend class outgoing_staging;
  outgoing_blocks(std::shared_ptr<void> buffer, size_t block_bytes, size_t count)
      : buffer_(std::move(buffer)), block_bytes_(block_bytes), count_(count) {}

  std::shared_ptr<void> buffer_;  // gives the buffer back to its staging when the chunk is freed
  size_t block_bytes_;
  size_t count_;
};

/// Pinned host buffers that moves out of a device pool read their blocks into, a chunk at a time: a move reads
/// its next chunk into one buffer while the puts of the chunk before still read the other (double-buffered), so
/// the device's reads overlap the network's. Thread-safe: chunks are freed on the data plane's threads.
class outgoing_staging : public std::enable_shared_from_this<outgoing_staging> {
 public:
  /// `buffers` buffers of `chunk_blocks` blocks of `block_bytes` in host memory from `via` (a backend of the
  /// pool's device, on its own stream; kept until the staging is freed).
  static result<std::shared_ptr<outgoing_staging>> create(std::shared_ptr<backend> via, size_t block_bytes,
                                                          uint32_t chunk_blocks, uint32_t buffers = 2);
  ~outgoing_staging();
  outgoing_staging(const outgoing_staging&) = delete;
  outgoing_staging& operator=(const outgoing_staging&) = delete;

  /// Blocks `blocks` (at most chunk_blocks) of `pool` downloaded into a free buffer; null when every buffer is
  /// in use (read again once a chunk is freed).
  result<std::shared_ptr<const outgoing_blocks>> read(const kv_pool& pool, std::span<const uint32_t> blocks);
  uint32_t chunk_blocks() const { return chunk_blocks_; }
  uint32_t free_buffers() const;
  uint32_t total_buffers() const { return uint32_t(buffers_.size()); }

 private:
  outgoing_staging(std::shared_ptr<backend> via, size_t block_bytes, uint32_t chunk_blocks)
      : via_(std::move(via)), block_bytes_(block_bytes), chunk_blocks_(chunk_blocks) {}
  void give_back(size_t buffer);

  std::shared_ptr<backend> via_;
  size_t block_bytes_;
  uint32_t chunk_blocks_;
  std::vector<void*> buffers_;
  mutable std::mutex mutex_;
  std::vector<size_t> free_;  // under mutex_
};

/// A fixed arena of host blocks for moves into a device pool. Thread-safe.
class kv_landing {
 public:
  /// `slots` blocks of `block_bytes` of host memory from `device` (its allocate_host; kept until the arena is freed).
  static result<std::unique_ptr<kv_landing>> create(std::shared_ptr<backend> device, size_t block_bytes,
                                                    uint32_t slots);
  ~kv_landing();
  kv_landing(const kv_landing&) = delete;
  kv_landing& operator=(const kv_landing&) = delete;

  /// `n` free slots, or none (empty) when fewer are free.
  std::vector<uint32_t> take(uint32_t n);
  /// Slots back to the free list (a slot not taken is ignored).
  void give_back(std::span<const uint32_t> slots);
  uint32_t free_slots() const;
  uint32_t total_slots() const { return total_; }

  void* base() const { return base_; }
  uint64_t bytes() const { return uint64_t(total_) * block_bytes_; }
  const void* slot_data(uint32_t slot) const { return static_cast<const char*>(base_) + size_t(slot) * block_bytes_; }

  /// Uploads slot `slots[i]` into block `blocks[i]` of `pool`, for every i, with `via` (a backend of the pool's
  /// device).
  status land(backend& via, const kv_pool& pool, std::span<const uint32_t> slots,
              std::span<const uint32_t> blocks) const;

 private:
  kv_landing(std::shared_ptr<backend> device, void* base, size_t block_bytes, uint32_t slots);

  std::shared_ptr<backend> device_;
  void* base_;
  size_t block_bytes_;
  uint32_t total_;
  mutable std::mutex mutex_;
  std::vector<uint32_t> free_;   // under mutex_
  std::vector<bool> taken_;      // under mutex_
};

/// The device pools of one process by instance id, and the GPU of each: a move between two pools on one GPU
/// copies device to device (backend::copy_blocks) instead of crossing the host. Thread-safe.
class local_device_pools {
 public:
  /// A pool and its GPU.
  struct entry {
    std::shared_ptr<kv_pool> pool;
    int device = 0;
  };
  void add(uint32_t id, entry e);
  void remove(uint32_t id);
  /// Pool `id` when it is in this process.
  std::optional<entry> find(uint32_t id) const;

 private:
  mutable std::mutex mutex_;
  std::map<uint32_t, entry> pools_;  // under mutex_
};

}  // namespace illm::gpu
