#pragma once
// The KV block pool: a fixed arena of equal blocks allocated once, a free list, an owner per block,
// and accounting that can be checked. A block holds 16 tokens of K and V for every layer.
//
// Each block also says how many of its layers are written, for a reader on another thread that must not
// attend a block still being computed (a chunk of a long prompt prefilled here while later chunks, on
// other instances, already attend it): a block taken with allocate() counts as written (its owner writes
// it as it goes and is the only one to read it meanwhile); one taken with allocate_many() (reserved for
// a move or a chunk computed here) as empty, until its writer marks layers written or its move commits.
//
// A used block can be made *spare*: it keeps its contents and owner (a replica, a second copy of another
// block) but counts as free, and allocation takes spare blocks, oldest first, once the free list is empty,
// telling the reclaim listener which ones it took. So memory held by replicas is never missed by anyone who
// needs a block. A spare block is named by (block, generation): the generation changes every time a block
// is made spare, so a stale name never reaches a block that was reclaimed and made spare again.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// Blocks needed for `tokens` tokens.
inline uint32_t blocks_for_tokens(int64_t tokens) {
  return uint32_t((tokens + kv_block_tokens - 1) / kv_block_tokens);
}

/// Element layout of one block: [n_layers][2: K, V][n_kv_heads][16 tokens][head_dim], so one layer's
/// K (or V) of a head is one contiguous run and a whole block is one contiguous copy.
struct kv_layout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  dtype type = dtype::f32;

  /// Elements between two heads' runs (16 x head_dim).
  size_t head_stride() const { return size_t(kv_block_tokens) * head_dim; }
  /// Elements of one block.
  size_t block_elements() const { return size_t(n_layers) * 2 * n_kv_heads * head_stride(); }
  size_t block_bytes() const { return block_elements() * dtype_bytes(type); }
  /// Element offset of the K run of (layer, head 0) inside a block; V follows n_kv_heads runs later.
  size_t k_offset(int layer) const { return size_t(layer) * 2 * n_kv_heads * head_stride(); }
  size_t v_offset(int layer) const { return k_offset(layer) + size_t(n_kv_heads) * head_stride(); }
};

/// Who a block belongs to: the request, and the instance that owns the request (for hosted blocks).
struct block_owner {
  uint64_t request = 0;
  uint32_t instance = 0;
  bool operator==(const block_owner&) const = default;
};

/// Who made a block spare: the pool tells each of them of its own blocks that an allocation reclaimed.
enum class spare_user : uint8_t {
  replicas,      ///< second copies of other blocks (the rManager)
  prefix_cache,  ///< cached blocks no request reads (gpu/prefix_cache.hpp)
};
inline constexpr size_t spare_user_count = 2;

/// A spare block, by its place and the generation it was made spare in.
struct spare_block {
  uint32_t block = 0;
  uint64_t generation = 0;
  bool operator==(const spare_block&) const = default;
};

/// A fixed arena of KV blocks in one backend's memory. The accounting is thread-safe (an instance's
/// engine, manager and attention server share the pool); block contents are coordinated by the
/// protocol (a block is written only by its owner, and only until it is full).
class kv_pool {
 public:
  /// Allocates `n_blocks` blocks at once on `device`; nothing is allocated afterwards.
  static result<kv_pool> create(backend& device, const kv_layout& layout, uint32_t n_blocks);
  kv_pool(kv_pool&&) noexcept;
  kv_pool& operator=(kv_pool&&) noexcept;
  ~kv_pool();

  /// Takes a free block for `owner`; out_of_blocks when none is left.
  result<uint32_t> allocate(const block_owner& owner);
  /// Returns a block to the free list; releasing a free or unknown block is an error.
  status release(uint32_t block);

  /// Takes `n` free blocks for `owner` at once, or none (out_of_blocks) when fewer are free.
  result<std::vector<uint32_t>> allocate_many(const block_owner& owner, uint32_t n);

  /// Makes used blocks spare for `user` (they must all be used): free for anyone who allocates, their contents
  /// kept until then. Returns their names, in order.
  std::vector<spare_block> make_spare(std::span<const uint32_t> blocks, spare_user user = spare_user::replicas);
  /// Takes spare blocks back as used blocks of their owner, all or none: false when one was reclaimed meanwhile.
  bool claim_spare(std::span<const spare_block> blocks);
  /// Frees a spare block that is still spare under that name (one reclaimed meanwhile is left alone).
  void release_spare(const spare_block& block);
  /// The oldest `n` blocks `user` made spare that are spare now, oldest first: the next ones an allocation reclaims.
  std::vector<spare_block> oldest_spare(spare_user user, size_t n) const;
  /// Copies spare block `s` into host memory `out` (block_bytes()), with `via` as for checksum(): false when it is
  /// not spare under that name before or after the copy (reclaimed meanwhile, its copy possibly torn: dropped).
  bool copy_spare(const spare_block& s, std::span<std::byte> out, backend* via = nullptr) const;
  /// Writes host memory `bytes` (block_bytes()) into used block `block`, with `via` as for checksum().
  status write_block(uint32_t block, std::span<const std::byte> bytes, backend* via = nullptr);
  /// Called after an allocation reclaimed spare blocks of `user`, on the allocating thread, outside the pool's lock.
  void set_reclaim_listener(spare_user user, std::function<void(const std::vector<spare_block>&)> listener);

  uint32_t total_blocks() const { return total_; }
  /// Blocks anyone may allocate: the free list and the spare blocks.
  uint32_t free_blocks() const;
  /// Of the free blocks, those that are spare (their contents kept until they are taken).
  uint32_t spare_blocks() const;
  /// Of those, the ones `user` made spare.
  uint32_t spare_blocks(spare_user user) const;
  uint32_t used_blocks() const { return total_blocks() - free_blocks(); }
  bool is_used(uint32_t block) const;
  /// The owner of a used block (a default owner for a free one).
  block_owner owner(uint32_t block) const;
  /// Blocks held for `request`.
  uint32_t blocks_of(uint64_t request) const;
  /// Gives used blocks a new owner (a request taken over by another instance), all or none: false when one is
  /// not used.
  bool set_owner(std::span<const uint32_t> blocks, const block_owner& owner);

  const kv_layout& layout() const { return layout_; }
  /// Base of the arena (device memory); block b starts at base + b * block_elements().
  void* base() const { return base_; }
  /// Typed view of the arena for fp32 pools.
  float* base_f32() const { return static_cast<float*>(base_); }
  void* block_data(uint32_t block) const {
    return static_cast<char*>(base_) + size_t(block) * layout_.block_bytes();
  }

  /// The view attention and store_kv take of one layer of this pool.
  kv_layer_view layer_view(int layer) const {
    return {base_, layout_.type, layout_.block_elements(), layout_.k_offset(layer), layout_.v_offset(layer),
            layout_.head_stride()};
  }

  /// The checksum (gpu/checksum.hpp) of the contents of `blocks`, in that order; device pools are read
  /// through the host, with `via` when given (a backend of the pool's device that the caller's thread owns),
  /// else with the pool's own.
  result<uint64_t> checksum(const std::vector<uint32_t>& blocks, backend* via = nullptr) const;

  /// Verifies the accounting: every block is on the free list once, spare or used, never two of them.
  status check() const;

  /// Layers of `block` whose K and V are written for all its tokens (0 for a block outside the pool).
  uint32_t layers_written(uint32_t block) const;
  /// Marks the first `layers` layers of `blocks` written (never fewer than before), then calls the listener.
  void mark_written(std::span<const uint32_t> blocks, uint32_t layers);
  /// Called after every mark_written, on the writer's thread: how a reader waiting for blocks hears of them.
  void set_written_listener(std::function<void()> listener);

 private:
  kv_pool() = default;
  /// A spare block is spare no more (under the lock): the counts follow.
  void unspare(uint32_t block);
  /// Spare blocks an allocation took, and who had made each spare.
  struct reclaimed_blocks {
    std::vector<spare_block> blocks;
    std::vector<spare_user> users;
  };
  /// Takes one block for allocation, from the free list or else the oldest spare block (noted in `reclaimed`).
  uint32_t take_block(reclaimed_blocks& reclaimed);
  /// Tells each user's reclaim listener of its blocks reclaimed (called without the lock).
  void tell_reclaimed(const reclaimed_blocks& reclaimed) const;
  using reclaim_listener = std::shared_ptr<const std::function<void(const std::vector<spare_block>&)>>;

  std::unique_ptr<std::mutex> mutex_;
  uint32_t total_ = 0;
  backend* device_ = nullptr;
  kv_layout layout_;
  void* base_ = nullptr;
  std::vector<uint32_t> free_list_;
  std::vector<block_owner> owners_;
  std::vector<bool> used_;
  std::vector<bool> spare_;
  std::vector<uint64_t> generation_;            // of each block's latest make_spare
  std::vector<spare_user> spare_user_;          // of each block's latest make_spare
  std::deque<spare_block> spare_queue_;         // oldest first; entries no longer spare are skipped
  uint32_t spare_count_ = 0;
  std::array<uint32_t, spare_user_count> spare_by_user_{};
  uint64_t next_generation_ = 1;
  std::array<reclaim_listener, spare_user_count> reclaim_listeners_;  // by spare_user, under mutex_
  std::unique_ptr<std::atomic<uint32_t>[]> written_;  // layers written, per block
  std::shared_ptr<const std::function<void()>> listener_;  // under mutex_
};

/// Where one logical block of a request lives.
struct block_ref {
  /// The pool of a table entry whose block is gone (its KV was lost): a block is allocated for it again.
  static constexpr uint32_t no_pool = 0xffffffffu;
  uint32_t pool = 0;   ///< pool (instance) id
  uint32_t block = 0;  ///< physical block in that pool
  bool operator==(const block_ref&) const = default;
  /// Whether no block holds this entry (it is to be allocated and computed again).
  bool absent() const { return pool == no_pool; }
};

/// A request's block table: logical block i holds positions [16 i, 16 i + 16).
using block_table = std::vector<block_ref>;

}  // namespace illm::gpu
