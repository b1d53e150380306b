#pragma once
// How KV blocks of a pool in device memory cross the host on their way between instances: the data plane
// reads and writes host memory only. At the source, a move's blocks are downloaded into a host buffer
// (outgoing_blocks) that the puts read. At the destination, the instance registers an arena of host blocks
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

/// A move's blocks as the data plane reads them: the pool's own memory when it is host memory, else a copy
/// downloaded into host memory (pinned on a GPU), freed with the last reference.
class outgoing_blocks {
 public:
  /// Blocks `blocks` of `pool`, read with `via` (a backend of the pool's device, kept until the copy is freed).
  static result<std::shared_ptr<const outgoing_blocks>> read(std::shared_ptr<backend> via, const kv_pool& pool,
                                                             std::span<const uint32_t> blocks);
  ~outgoing_blocks();
  outgoing_blocks(const outgoing_blocks&) = delete;
  outgoing_blocks& operator=(const outgoing_blocks&) = delete;

  /// Block i of the move (host memory).
  const void* data(size_t i) const { return blocks_[i]; }
  size_t size() const { return blocks_.size(); }
  /// The checksum of the blocks in order (equal to kv_pool::checksum of them).
  uint64_t checksum() const;

 private:
  outgoing_blocks(std::shared_ptr<backend> via, size_t block_bytes) : via_(std::move(via)), block_bytes_(block_bytes) {}

  std::shared_ptr<backend> via_;
  size_t block_bytes_;
  void* staging_ = nullptr;  // null: the blocks are the pool's memory
  std::vector<const void*> blocks_;
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
