#pragma once
// A tier below an instance's KV pool: full blocks of the prefix cache kept by content key in host memory or in a
// preallocated file on local disk, so a prefix the pool had to give up is read back instead of computed again.
//
// The medium is cut into equal slots (a header, then the block's bytes, padded to tier_io_align). Writes go
// through a queue of bounded depth to a thread of the tier's own: demote() never waits for the medium, and when
// the queue is full the block is dropped and counted. A block is found only once its write has finished (a
// block being written is never read half-written); a full tier evicts its least recently used block. Every read
// checks the slot's header (magic, identity, key) and the checksum of its bytes: a block that fails is dropped
// and counted, and its reader computes the block instead.
//
// A disk tier outlives its process: its first page names the KV it holds (the identity of the model and KV type,
// the block size), and an index written beside it (PATH.index, at close and every index_every_writes writes)
// lists the held slots. A tier opened with the same identity finds its blocks again (each still checked on
// read); another identity, or a file that is not a tier, starts empty, and open() says why.

#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpu/block_key.hpp"
#include "gpu/backend.hpp"
#include "gpu/tier/tier_medium.hpp"
#include "gpu/tier/tier_spec.hpp"

namespace illm::gpu {

/// A full block as a tier names it: its key, its parent's key and its tokens (what the prefix cache checks a hit by).
struct tier_block_id {
  block_key key, parent;
  std::array<int32_t, kv_block_tokens> tokens{};
};

/// What a tier holds and has done.
struct tier_stats {
  uint32_t slots = 0;              ///< blocks it can hold
  uint32_t held = 0;               ///< blocks held now (written whole)
  uint32_t queued = 0;             ///< writes waiting now
  uint64_t written_blocks = 0;     ///< writes finished
  uint64_t read_blocks = 0;        ///< reads that gave a block
  uint64_t evicted_blocks = 0;     ///< held blocks given up for newer ones
  uint64_t dropped_queue_full = 0; ///< demotions refused: the writes waiting had reached the queue's depth
  uint64_t dropped_failed = 0;     ///< writes the medium refused (a full or failing disk)
  uint64_t corrupt_blocks = 0;     ///< reads that failed their checks (dropped)
  uint64_t written_bytes = 0, read_bytes = 0;
  double write_seconds = 0, read_seconds = 0;  ///< time spent in the medium's writes and reads
};

/// How a read ended.
enum class tier_read : uint8_t {
  ok,       ///< the block's bytes, checked
  absent,   ///< not held (never written, evicted, or still being written)
  corrupt,  ///< held but failed its checks or its read: dropped, to be computed
};

/// The settings of a tier beyond its spec.
struct tier_options {
  uint32_t queue_depth = 32;          ///< writes waiting at most; past it demotions are dropped
  uint32_t index_every_writes = 256;  ///< a disk tier rewrites its index after this many writes
};

/// One tier of one instance.
class kv_tier {
 public:
  /// Opens the tier `spec` names for blocks of `block_bytes` of KV of `identity` (model_identity's text: model and
  /// KV type). `note` gets a line for the log when a disk tier's file is started empty though it was there (another
  /// identity, another block size, no index) or its index was found (how many blocks).
  static result<std::unique_ptr<kv_tier>> open(const tier_spec& spec, std::string_view identity, uint64_t block_bytes,
                                               const tier_options& options, std::string* note);
  /// A tier over `medium` (a test's: one that stalls or fails), started empty; a persistent medium's index is
  /// written to the spec's path + ".index" only when a path is set (never here).
  static result<std::unique_ptr<kv_tier>> over(std::unique_ptr<tier_medium> medium, std::string_view identity,
                                               uint64_t block_bytes, const tier_options& options);
  /// Finishes the writes queued, then writes the index (a disk tier).
  ~kv_tier();
  kv_tier(const kv_tier&) = delete;
  kv_tier& operator=(const kv_tier&) = delete;

  /// Queues a copy of `bytes` (block_bytes()) to be written as `id`: false when it is held or queued already, or
  /// when the queue is full (dropped and counted).
  bool demote(const tier_block_id& id, std::span<const std::byte> bytes);
  /// Whether `key` is held (written whole), and, when so, its id in `id`.
  bool holds(const block_key& key, tier_block_id* id = nullptr) const;
  /// Reads held block `key` into `out` (block_bytes()) and checks it; a block that fails is dropped.
  tier_read promote(const block_key& key, std::span<std::byte> out);
  /// Waits until every queued write has finished.
  void drain();
  /// Writes the index now (a disk tier; nothing for a host tier).
  status write_index();
  /// The keys held now.
  std::vector<block_key> keys() const;
  tier_stats stats() const;
  uint64_t block_bytes() const { return block_bytes_; }
  const tier_spec& spec() const { return spec_; }
  /// What the medium is (for the log).
  std::string describe() const { return medium_->describe(); }

 private:
  enum class slot_state : uint8_t { free, writing, held };
  struct slot {
    slot_state state = slot_state::free;
    uint32_t readers = 0;  ///< reads under way: never evicted meanwhile
    tier_block_id id;
    uint64_t checksum = 0;
    std::list<uint32_t>::iterator recent;  ///< its place in recent_ while held
  };
  struct write_job {
    uint32_t slot = 0;
    tier_block_id id;
    std::vector<std::byte> bytes;
  };

  kv_tier(const tier_spec& spec, std::unique_ptr<tier_medium> medium, const block_key& identity, uint64_t block_bytes,
          const tier_options& options);
  static result<std::unique_ptr<kv_tier>> start(const tier_spec& spec, std::unique_ptr<tier_medium> medium,
                                                std::string_view identity, uint64_t block_bytes,
                                                const tier_options& options, bool existed, std::string* note);
  /// A slot for a new block (under the lock): a free one, else the least recently used held one nobody reads.
  bool take_slot(uint32_t* out);
  void hold(uint32_t s, const tier_block_id& id, uint64_t checksum);  ///< under the lock
  void let_go(uint32_t s);                                             ///< under the lock: the slot is free
  void run_writes();
  void write_one(write_job& job);
  uint64_t slot_offset(uint32_t s) const { return tier_io_align + uint64_t(s) * slot_bytes_; }
  /// Reads the first page and the index of a disk tier that was there: the slots it held, or a reason to start empty.
  std::string recover();
  status write_first_page();
  std::string index_path() const { return spec_.path + ".index"; }
  /// Whether an index is written beside the medium: a file's, with a path.
  bool keeps_index() const { return medium_->persistent() && !spec_.path.empty(); }

  tier_spec spec_;
  std::unique_ptr<tier_medium> medium_;
  block_key identity_;
  uint64_t block_bytes_ = 0, slot_bytes_ = 0;
  tier_options options_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::list<uint32_t> recent_;  ///< held slots, most recently used first
  std::unordered_map<block_key, uint32_t, block_key_hash> held_;
  std::unordered_map<block_key, uint32_t, block_key_hash> writing_;
  std::deque<write_job> queue_;
  bool writer_busy_ = false;
  bool stopping_ = false;
  uint32_t writes_since_index_ = 0;
  tier_stats stats_;
  std::thread writer_;
};

}  // namespace illm::gpu
