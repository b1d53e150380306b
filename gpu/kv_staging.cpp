#include "gpu/kv_staging.hpp"

#include <algorithm>

#include "gpu/text.hpp"

namespace illm::gpu {

uint64_t outgoing_blocks::checksum(uint64_t from) const {
  uint64_t h = from;
  for (size_t i = 0; i < count_; ++i) h = checksum_words(data(i), block_bytes_, h);
  return h;
}

result<std::shared_ptr<outgoing_staging>> outgoing_staging::create(std::shared_ptr<backend> via, size_t block_bytes,
                                                                   uint32_t chunk_blocks, uint32_t buffers) {
  if (block_bytes == 0 || chunk_blocks == 0 || buffers == 0)
    return status{status_code::invalid_argument, "an outgoing staging needs blocks and buffers"};
  std::shared_ptr<outgoing_staging> staging(new outgoing_staging(std::move(via), block_bytes, chunk_blocks));
  for (uint32_t i = 0; i < buffers; ++i) {
    void* buffer = staging->via_->allocate_host(block_bytes * chunk_blocks);
    if (!buffer)
      return status{status_code::out_of_memory, text::format("cannot stage {} blocks of {} bytes in host memory",
                                                             chunk_blocks, block_bytes)};
    staging->buffers_.push_back(buffer);
    staging->free_.push_back(i);
  }
  return staging;
}

outgoing_staging::~outgoing_staging() {
  for (void* b : buffers_) via_->deallocate_host(b);
}

uint32_t outgoing_staging::free_buffers() const {
  std::lock_guard lock(mutex_);
  return uint32_t(free_.size());
}

void outgoing_staging::give_back(size_t buffer) {
  std::lock_guard lock(mutex_);
  free_.push_back(buffer);
}

result<std::shared_ptr<const outgoing_blocks>> outgoing_staging::read(const kv_pool& pool,
                                                                      std::span<const uint32_t> blocks) {
  if (blocks.size() > chunk_blocks_ || pool.layout().block_bytes() != block_bytes_)
    return status{status_code::invalid_argument, text::format("{} blocks of {} bytes into chunks of {} of {}", blocks.size(),
                                                             pool.layout().block_bytes(), chunk_blocks_, block_bytes_)};
  for (uint32_t b : blocks)
    if (b >= pool.total_blocks())
      return status{status_code::invalid_argument, text::format("block {} of a pool of {}", b, pool.total_blocks())};
  size_t buffer = 0;
  {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return std::shared_ptr<const outgoing_blocks>();
    buffer = free_.back();
    free_.pop_back();
  }
  // The buffer goes back to this staging when the chunk is freed (the staging lives while a chunk does).
  std::shared_ptr<void> held(buffers_[buffer], [self = shared_from_this(), buffer](void*) { self->give_back(buffer); });
  ILLM_RETURN_IF_ERROR(via_->download_blocks(held.get(), pool.base(), blocks.data(), int(blocks.size()), block_bytes_));
  return std::shared_ptr<const outgoing_blocks>(new outgoing_blocks(std::move(held), block_bytes_, blocks.size()));
}

result<std::unique_ptr<kv_landing>> kv_landing::create(std::shared_ptr<backend> device, size_t block_bytes,
                                                       uint32_t slots) {
  if (block_bytes == 0 || slots == 0) return status{status_code::invalid_argument, "a landing arena needs blocks"};
  void* base = device->allocate_host(block_bytes * slots);
  if (!base)
    return status{status_code::out_of_memory, text::format("cannot allocate {} landing blocks of {} bytes in host memory",
                                                           slots, block_bytes)};
  return std::unique_ptr<kv_landing>(new kv_landing(std::move(device), base, block_bytes, slots));
}

kv_landing::kv_landing(std::shared_ptr<backend> device, void* base, size_t block_bytes, uint32_t slots)
    : device_(std::move(device)), base_(base), block_bytes_(block_bytes), total_(slots), taken_(slots, false) {
  free_.reserve(slots);
  for (uint32_t s = slots; s > 0; --s) free_.push_back(s - 1);
}

kv_landing::~kv_landing() { device_->deallocate_host(base_); }

std::vector<uint32_t> kv_landing::take(uint32_t n) {
  std::lock_guard lock(mutex_);
  if (n > free_.size()) return {};
  std::vector<uint32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - n);
  for (uint32_t s : out) taken_[s] = true;
  return out;
}

void kv_landing::give_back(std::span<const uint32_t> slots) {
  std::lock_guard lock(mutex_);
  for (uint32_t s : slots)
    if (s < total_ && taken_[s]) {
      taken_[s] = false;
      free_.push_back(s);
    }
}

uint32_t kv_landing::free_slots() const {
  std::lock_guard lock(mutex_);
  return uint32_t(free_.size());
}

status kv_landing::land(backend& via, const kv_pool& pool, std::span<const uint32_t> slots,
                        std::span<const uint32_t> blocks) const {
  if (slots.size() != blocks.size()) return {status_code::invalid_argument, "one landing slot per block"};
  if (pool.layout().block_bytes() != block_bytes_)
    return {status_code::invalid_argument, "the landing arena's blocks are not the pool's"};
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i] >= total_ || blocks[i] >= pool.total_blocks())
      return {status_code::invalid_argument, text::format("landing slot {} into block {}", slots[i], blocks[i])};
  return via.upload_blocks(pool.base(), blocks.data(), base_, slots.data(), int(slots.size()), block_bytes_);
}

void local_device_pools::add(uint32_t id, entry e) {
  std::lock_guard lock(mutex_);
  pools_[id] = std::move(e);
}

void local_device_pools::remove(uint32_t id) {
  std::lock_guard lock(mutex_);
  pools_.erase(id);
}

std::optional<local_device_pools::entry> local_device_pools::find(uint32_t id) const {
  std::lock_guard lock(mutex_);
  const auto it = pools_.find(id);
  if (it == pools_.end()) return std::nullopt;
  return it->second;
}

}  // namespace illm::gpu
