#include "gpu/kv_pool.hpp"

#include <algorithm>
#include <cstring>
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
  // Host memory is committed now, not page by page as blocks are first used: a serving process's resident
  // memory is its size from the start, rather than growing with the most blocks ever in use at once.
  if (device.host_memory()) std::memset(pool.base_, 0, bytes);
  pool.owners_.resize(n_blocks);
  pool.used_.assign(n_blocks, false);
  pool.spare_.assign(n_blocks, false);
  pool.generation_.assign(n_blocks, 0);
  pool.spare_user_.assign(n_blocks, spare_user::replicas);
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
    spare_ = std::move(o.spare_);
    generation_ = std::move(o.generation_);
    spare_user_ = std::move(o.spare_user_);
    spare_queue_ = std::move(o.spare_queue_);
    spare_count_ = std::exchange(o.spare_count_, 0);
    spare_by_user_ = std::exchange(o.spare_by_user_, {});
    next_generation_ = o.next_generation_;
    reclaim_listeners_ = std::move(o.reclaim_listeners_);
    written_ = std::move(o.written_);
    listener_ = std::move(o.listener_);
  }
  return *this;
}

kv_pool::~kv_pool() {
  if (base_) device_->deallocate(base_);
}

uint32_t kv_pool::take_block(reclaimed_blocks& reclaimed) {
  if (free_list_.empty()) {
    while (!spare_[spare_queue_.front().block] || generation_[spare_queue_.front().block] != spare_queue_.front().generation)
      spare_queue_.pop_front();  // claimed or released since
    const spare_block oldest = spare_queue_.front();
    spare_queue_.pop_front();
    unspare(oldest.block);
    reclaimed.blocks.push_back(oldest);
    reclaimed.users.push_back(spare_user_[oldest.block]);
    return oldest.block;
  }
  const uint32_t b = free_list_.back();
  free_list_.pop_back();
  return b;
}

void kv_pool::tell_reclaimed(const reclaimed_blocks& reclaimed) const {
  if (reclaimed.blocks.empty()) return;
  std::array<reclaim_listener, spare_user_count> listeners;
  std::array<std::vector<spare_block>, spare_user_count> by_user;
  {
    std::lock_guard lock(*mutex_);
    listeners = reclaim_listeners_;
    for (size_t i = 0; i < reclaimed.blocks.size(); ++i)
      by_user[size_t(reclaimed.users[i])].push_back(reclaimed.blocks[i]);
  }
  for (size_t u = 0; u < spare_user_count; ++u)
    if (!by_user[u].empty() && listeners[u] && *listeners[u]) (*listeners[u])(by_user[u]);
}

result<uint32_t> kv_pool::allocate(const block_owner& owner) {
  reclaimed_blocks reclaimed;
  uint32_t b = 0;
  {
    std::lock_guard lock(*mutex_);
    if (free_list_.empty() && spare_count_ == 0)
      return status{status_code::out_of_blocks, text::format("KV pool full ({} blocks in use)", total_blocks())};
    b = take_block(reclaimed);
    used_[b] = true;
    owners_[b] = owner;
    written_[b] = uint32_t(layout_.n_layers);
  }
  tell_reclaimed(reclaimed);
  return b;
}

result<std::vector<uint32_t>> kv_pool::allocate_many(const block_owner& owner, uint32_t n) {
  reclaimed_blocks reclaimed;
  std::vector<uint32_t> blocks;
  {
    std::lock_guard lock(*mutex_);
    if (free_list_.size() + spare_count_ < n)
      return status{status_code::out_of_blocks,
                    text::format("{} blocks asked, {} free", n, free_list_.size() + spare_count_)};
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t b = take_block(reclaimed);
      used_[b] = true;
      owners_[b] = owner;
      written_[b] = 0;
      blocks.push_back(b);
    }
  }
  tell_reclaimed(reclaimed);
  return blocks;
}

std::vector<spare_block> kv_pool::make_spare(std::span<const uint32_t> blocks, spare_user user) {
  std::lock_guard lock(*mutex_);
  std::vector<spare_block> names;
  for (uint32_t b : blocks) {
    if (b >= total_ || !used_[b]) continue;  // a caller's bug: only used blocks become spare
    used_[b] = false;
    spare_[b] = true;
    generation_[b] = next_generation_++;
    spare_user_[b] = user;
    ++spare_count_;
    ++spare_by_user_[size_t(user)];
    spare_queue_.push_back({b, generation_[b]});
    names.push_back({b, generation_[b]});
  }
  if (spare_queue_.size() > 2 * size_t(total_)) {  // drop the entries of blocks no longer spare
    std::erase_if(spare_queue_, [&](const spare_block& s) { return !spare_[s.block] || generation_[s.block] != s.generation; });
  }
  return names;
}

bool kv_pool::claim_spare(std::span<const spare_block> blocks) {
  std::lock_guard lock(*mutex_);
  for (const spare_block& s : blocks)
    if (s.block >= total_ || !spare_[s.block] || generation_[s.block] != s.generation) return false;
  for (const spare_block& s : blocks) {
    unspare(s.block);
    used_[s.block] = true;
  }
  return true;
}

void kv_pool::release_spare(const spare_block& s) {
  std::lock_guard lock(*mutex_);
  if (s.block >= total_ || !spare_[s.block] || generation_[s.block] != s.generation) return;
  unspare(s.block);
  owners_[s.block] = {};
  free_list_.push_back(s.block);
}

void kv_pool::set_reclaim_listener(spare_user user, std::function<void(const std::vector<spare_block>&)> listener) {
  auto shared = std::make_shared<const std::function<void(const std::vector<spare_block>&)>>(std::move(listener));
  std::lock_guard lock(*mutex_);
  reclaim_listeners_[size_t(user)] = std::move(shared);
}

uint32_t kv_pool::free_blocks() const {
  std::lock_guard lock(*mutex_);
  return uint32_t(free_list_.size()) + spare_count_;
}

uint32_t kv_pool::spare_blocks() const {
  std::lock_guard lock(*mutex_);
  return spare_count_;
}

uint32_t kv_pool::spare_blocks(spare_user user) const {
  std::lock_guard lock(*mutex_);
  return spare_by_user_[size_t(user)];
}

void kv_pool::unspare(uint32_t block) {
  spare_[block] = false;
  --spare_count_;
  --spare_by_user_[size_t(spare_user_[block])];
}

bool kv_pool::is_used(uint32_t block) const {
  std::lock_guard lock(*mutex_);
  return block < total_ && used_[block];
}

bool kv_pool::set_owner(std::span<const uint32_t> blocks, const block_owner& owner) {
  std::lock_guard lock(*mutex_);
  for (uint32_t b : blocks)
    if (b >= total_ || !used_[b]) return false;
  for (uint32_t b : blocks) owners_[b] = owner;
  return true;
}

block_owner kv_pool::owner(uint32_t block) const {
  std::lock_guard lock(*mutex_);
  return block < total_ && used_[block] ? owners_[block] : block_owner{};
}

status kv_pool::release(uint32_t block) {
  std::lock_guard lock(*mutex_);
  if (block >= total_blocks())
    return {status_code::invalid_argument, text::format("release of block {} outside the pool", block)};
  if (!used_[block])
    return {status_code::invalid_argument,
            text::format("release of {} block {}", spare_[block] ? "spare" : "free", block)};
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

std::vector<spare_block> kv_pool::oldest_spare(spare_user user, size_t n) const {
  std::lock_guard lock(*mutex_);
  std::vector<spare_block> out;
  for (const spare_block& s : spare_queue_) {
    if (out.size() >= n) break;
    if (spare_[s.block] && generation_[s.block] == s.generation && spare_user_[s.block] == user) out.push_back(s);
  }
  return out;
}

bool kv_pool::copy_spare(const spare_block& s, std::span<std::byte> out, backend* via) const {
  const auto still_spare = [&] {
    std::lock_guard lock(*mutex_);
    return s.block < total_ && spare_[s.block] && generation_[s.block] == s.generation;
  };
  // A reclaimed block is written only by its new owner, after the reclaim (under the lock): still spare under the
  // same name after the copy means nobody wrote it during the copy.
  if (out.size() != layout_.block_bytes() || !still_spare()) return false;
  backend& reader = via ? *via : *device_;
  if (reader.host_memory())
    std::memcpy(out.data(), block_data(s.block), out.size());
  else if (!reader.download(out.data(), block_data(s.block), out.size()).is_ok())
    return false;
  return still_spare();
}

status kv_pool::write_block(uint32_t block, std::span<const std::byte> bytes, backend* via) {
  if (bytes.size() != layout_.block_bytes() || !is_used(block))
    return {status_code::invalid_argument, text::format("a write of {} bytes into block {}", bytes.size(), block)};
  backend& writer = via ? *via : *device_;
  if (!writer.host_memory()) return writer.upload(block_data(block), bytes.data(), bytes.size());
  std::memcpy(block_data(block), bytes.data(), bytes.size());
  return status::ok();
}

result<uint64_t> kv_pool::checksum(const std::vector<uint32_t>& blocks, backend* via) const {
  backend& reader = via ? *via : *device_;
  const size_t bytes = layout_.block_bytes();
  uint64_t h = checksum_seed;
  std::vector<char> staged;
  for (uint32_t b : blocks) {
    if (b >= total_) return status{status_code::invalid_argument, "checksum of block " + std::to_string(b) + " of " +
                                                                      std::to_string(total_)};
    if (reader.host_memory()) {
      h = checksum_words(block_data(b), bytes, h);
      continue;
    }
    staged.resize(bytes);
    ILLM_RETURN_IF_ERROR(reader.download(staged.data(), block_data(b), bytes));
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
    if (used_[b] || spare_[b]) return {status_code::internal, text::format("block {} is both used or spare and free", b)};
    seen[b] = true;
  }
  uint32_t used = 0, spare = 0;
  for (uint32_t b = 0; b < total_blocks(); ++b) {
    if (used_[b] && spare_[b]) return {status_code::internal, text::format("block {} is both used and spare", b)};
    used += used_[b];
    spare += spare_[b];
  }
  if (spare != spare_count_)
    return {status_code::internal, text::format("{} spare blocks counted as {}", spare, spare_count_)};
  uint32_t by_users = 0;
  for (uint32_t n : spare_by_user_) by_users += n;
  if (by_users != spare_count_)
    return {status_code::internal, text::format("{} spare blocks by their users, {} in all", by_users, spare_count_)};
  if (used + spare + free_list_.size() != total_blocks())
    return {status_code::internal, text::format("{} used + {} spare + {} free != {} blocks", used, spare,
                                                free_list_.size(), total_blocks())};
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
