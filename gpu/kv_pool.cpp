#include "gpu/kv_pool.hpp"

#include <algorithm>
#include <utility>

#include "gpu/checksum.hpp"
#include "gpu/text.hpp"

namespace illm::gpu {

result<kv_pool> kv_pool::create(backend& device, const kv_layout& layout, uint32_t n_blocks) {
  if (layout.n_layers <= 0 || layout.n_kv_heads <= 0 || layout.head_dim <= 0 || n_blocks == 0)
    return status{status_code::invalid_argument,
                  text::format("KV pool needs a positive shape and block count (got {} blocks)", n_blocks)};
  kv_pool pool;
  pool.mutex_ = std::make_unique<std::mutex>();
  pool.total_ = n_blocks;
  pool.device_ = &device;
  pool.layout_ = layout;
  const size_t bytes = size_t(n_blocks) * layout.block_bytes();
  pool.base_ = device.allocate(bytes);
  if (!pool.base_)
    return status{status_code::out_of_memory,
                  text::format("cannot allocate a KV pool of {} blocks ({:.1f} MiB)", n_blocks, bytes / 1048576.0)};
  pool.owners_.resize(n_blocks);
  pool.used_.assign(n_blocks, false);
  pool.written_ = std::make_unique<std::atomic<uint32_t>[]>(n_blocks);
  pool.free_list_.resize(n_blocks);
  // Lowest block ids are handed out first.
  for (uint32_t b = 0; b < n_blocks; ++b) pool.free_list_[b] = n_blocks - 1 - b;
  return pool;
}

kv_pool::kv_pool(kv_pool&& o) noexcept { *this = std::move(o); }

kv_pool& kv_pool::operator=(kv_pool&& o) noexcept {
  if (this != &o) {
    if (base_) device_->deallocate(base_);
    mutex_ = std::move(o.mutex_);
    total_ = std::exchange(o.total_, 0);
    device_ = std::exchange(o.device_, nullptr);
    layout_ = o.layout_;
    base_ = std::exchange(o.base_, nullptr);
    free_list_ = std::move(o.free_list_);
    owners_ = std::move(o.owners_);
    used_ = std::move(o.used_);
    written_ = std::move(o.written_);
    listener_ = std::move(o.listener_);
  }
  return *this;
}

kv_pool::~kv_pool() {
  if (base_) device_->deallocate(base_);
}

result<uint32_t> kv_pool::allocate(const block_owner& owner) {
  std::lock_guard lock(*mutex_);
  if (free_list_.empty())
    return status{status_code::out_of_blocks, text::format("KV pool full ({} blocks in use)", total_blocks())};
  const uint32_t b = free_list_.back();
  free_list_.pop_back();
  used_[b] = true;
  owners_[b] = owner;
  written_[b] = uint32_t(layout_.n_layers);
  return b;
}

result<std::vector<uint32_t>> kv_pool::allocate_many(const block_owner& owner, uint32_t n) {
  std::lock_guard lock(*mutex_);
  if (free_list_.size() < n)
    return status{status_code::out_of_blocks, text::format("{} blocks asked, {} free", n, free_list_.size())};
  std::vector<uint32_t> blocks;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t b = free_list_.back();
    free_list_.pop_back();
    used_[b] = true;
    owners_[b] = owner;
    written_[b] = 0;
    blocks.push_back(b);
  }
  return blocks;
}

uint32_t kv_pool::free_blocks() const {
  std::lock_guard lock(*mutex_);
  return uint32_t(free_list_.size());
}

bool kv_pool::is_used(uint32_t block) const {
  std::lock_guard lock(*mutex_);
  return block < total_ && used_[block];
}

block_owner kv_pool::owner(uint32_t block) const {
  std::lock_guard lock(*mutex_);
  return block < total_ && used_[block] ? owners_[block] : block_owner{};
}

status kv_pool::release(uint32_t block) {
  std::lock_guard lock(*mutex_);
  if (block >= total_blocks())
    return {status_code::invalid_argument, text::format("release of block {} outside the pool", block)};
  if (!used_[block]) return {status_code::invalid_argument, text::format("release of free block {}", block)};
  used_[block] = false;
  owners_[block] = {};
  free_list_.push_back(block);
  return status::ok();
}

uint32_t kv_pool::blocks_of(uint64_t request) const {
  std::lock_guard lock(*mutex_);
  uint32_t n = 0;
  for (uint32_t b = 0; b < total_blocks(); ++b) n += used_[b] && owners_[b].request == request;
  return n;
}

result<uint64_t> kv_pool::checksum(const std::vector<uint32_t>& blocks) const {
  const size_t bytes = layout_.block_bytes();
  uint64_t h = checksum_seed;
  std::vector<char> staged;
  for (uint32_t b : blocks) {
    if (b >= total_) return status{status_code::invalid_argument, "checksum of block " + std::to_string(b) + " of " +
                                                                      std::to_string(total_)};
    if (device_->host_memory()) {
      h = checksum_words(block_data(b), bytes, h);
      continue;
    }
    staged.resize(bytes);
    ILLM_RETURN_IF_ERROR(device_->download(staged.data(), block_data(b), bytes));
    h = checksum_words(staged.data(), bytes, h);
  }
  return h;
}

status kv_pool::check() const {
  std::lock_guard lock(*mutex_);
  std::vector<bool> seen(total_blocks(), false);
  for (uint32_t b : free_list_) {
    if (b >= total_blocks()) return {status_code::internal, text::format("free list holds block {} outside the pool", b)};
    if (seen[b]) return {status_code::internal, text::format("block {} is on the free list twice", b)};
    if (used_[b]) return {status_code::internal, text::format("block {} is both used and free", b)};
    seen[b] = true;
  }
  const auto used = uint32_t(std::count(used_.begin(), used_.end(), true));
  if (used + free_list_.size() != total_blocks())
    return {status_code::internal,
            text::format("{} used + {} free != {} blocks", used, free_list_.size(), total_blocks())};
  return status::ok();
}

uint32_t kv_pool::layers_written(uint32_t block) const { return block < total_ ? written_[block].load() : 0; }

void kv_pool::mark_written(std::span<const uint32_t> blocks, uint32_t layers) {
  for (uint32_t b : blocks)
    if (b < total_) {
      uint32_t now = written_[b].load();
      while (now < layers && !written_[b].compare_exchange_weak(now, layers)) {
      }
    }
  std::shared_ptr<const std::function<void()>> listener;
  {
    std::lock_guard lock(*mutex_);
    listener = listener_;
  }
  if (listener && *listener) (*listener)();
}

void kv_pool::set_written_listener(std::function<void()> listener) {
  auto shared = std::make_shared<const std::function<void()>>(std::move(listener));
  std::lock_guard lock(*mutex_);
  listener_ = std::move(shared);
}

}  // namespace illm::gpu
