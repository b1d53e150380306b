#include "gpu/tier/kv_tier.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "gpu/tier/tier_format.hpp"

namespace illm::gpu {

namespace {

using namespace tier_format;
constexpr uint32_t max_slots = uint32_t(1) << 30;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Whether the file at `path` is missing, empty, or starts as a tier file (one that is none is never overwritten).
bool may_use_as_tier(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char head[8] = {};
  const ssize_t n = ::read(fd, head, sizeof head);
  ::close(fd);
  return n <= 0 || (n == ssize_t(sizeof head) && std::memcmp(head, file_magic, sizeof head) == 0);
}

}  // namespace

result<std::unique_ptr<kv_tier>> kv_tier::open(const tier_spec& spec, std::string_view identity,
                                               uint64_t block_bytes, const tier_options& options, std::string* note) {
  if (block_bytes == 0) return status{status_code::invalid_argument, "a tier of blocks of 0 bytes"};
  if (options.queue_depth == 0) return status{status_code::invalid_argument, "a tier's write queue of depth 0"};
  const uint64_t slot_bytes = tier_io_align + round_up(block_bytes, tier_io_align);
  if (spec.bytes < tier_io_align + slot_bytes)
    return status{status_code::invalid_argument, "--kv-tier " + spec.text() + ": holds not one block of " +
                                                     std::to_string(block_bytes) + " bytes"};
  std::unique_ptr<tier_medium> medium;
  bool existed = false;
  if (spec.kind == tier_kind::host) {
    auto m = open_memory_medium(spec.bytes);
    if (!m.is_ok()) return m.error();
    medium = std::move(m.value());
  } else {
    if (!may_use_as_tier(spec.path))
      return status{status_code::invalid_argument, "--kv-tier " + spec.text() + ": " + spec.path +
                                                       " is there and is not a KV tier file: name another path"};
    auto m = open_file_medium(spec.path, spec.bytes, &existed);
    if (!m.is_ok()) return m.error();
    medium = std::move(m.value());
  }
  return start(spec, std::move(medium), identity, block_bytes, options, existed, note);
}

result<std::unique_ptr<kv_tier>> kv_tier::over(std::unique_ptr<tier_medium> medium, std::string_view identity,
                                               uint64_t block_bytes, const tier_options& options) {
  if (block_bytes == 0 || options.queue_depth == 0 ||
      medium->size() < tier_io_align + tier_io_align + round_up(block_bytes, tier_io_align))
    return status{status_code::invalid_argument, "a tier over " + medium->describe() + " holds not one block"};
  tier_spec spec;
  spec.kind = medium->persistent() ? tier_kind::disk : tier_kind::host;
  spec.bytes = medium->size();
  return start(spec, std::move(medium), identity, block_bytes, options, false, nullptr);
}

result<std::unique_ptr<kv_tier>> kv_tier::start(const tier_spec& spec, std::unique_ptr<tier_medium> medium,
                                                std::string_view identity, uint64_t block_bytes,
                                                const tier_options& options, bool existed, std::string* note) {
  std::unique_ptr<kv_tier> tier(new kv_tier(spec, std::move(medium), root_key(identity, "kv-tier"), block_bytes,
                                            options));
  if (tier->medium_->persistent()) {
    const std::string why = existed ? tier->recover() : std::string();
    if (note) *note = why;
    if (status s = tier->write_first_page(); !s.is_ok()) return s;
  }
  tier->writer_ = std::thread([t = tier.get()] { t->run_writes(); });
  return tier;
}

kv_tier::kv_tier(const tier_spec& spec, std::unique_ptr<tier_medium> medium, const block_key& identity,
                 uint64_t block_bytes, const tier_options& options)
    : spec_(spec), medium_(std::move(medium)), identity_(identity), block_bytes_(block_bytes),
      slot_bytes_(tier_io_align + round_up(block_bytes, tier_io_align)), options_(options) {
  const uint64_t count = std::min<uint64_t>((medium_->size() - tier_io_align) / slot_bytes_, max_slots);
  slots_.resize(size_t(count));
  free_slots_.reserve(size_t(count));
  for (uint64_t s = count; s-- > 0;) free_slots_.push_back(uint32_t(s));  // slot 0 taken first
  stats_.slots = uint32_t(count);
}

kv_tier::~kv_tier() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (writer_.joinable()) writer_.join();
  (void)write_index();
}

bool kv_tier::demote(const tier_block_id& id, std::span<const std::byte> bytes) {
  if (bytes.size() != block_bytes_) return false;
  uint32_t s = 0;
  {
    const std::lock_guard lock(mutex_);
    if (held_.count(id.key) || writing_.count(id.key) || stopping_) return false;
    if (queue_.size() >= options_.queue_depth || !take_slot(&s)) {
      ++stats_.dropped_queue_full;
      return false;
    }
    slots_[s].state = slot_state::writing;
    writing_[id.key] = s;
    queue_.push_back({s, id, std::vector<std::byte>(bytes.begin(), bytes.end())});
  }
  changed_.notify_all();
  return true;
}

bool kv_tier::take_slot(uint32_t* out) {
  if (!free_slots_.empty()) {
    *out = free_slots_.back();
    free_slots_.pop_back();
    return true;
  }
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    if (slots_[*it].readers) continue;
    const uint32_t s = *it;
    let_go(s);
    free_slots_.pop_back();  // let_go gave it to the free list: it is taken at once
    ++stats_.evicted_blocks;
    *out = s;
    return true;
  }
  return false;
}

void kv_tier::hold(uint32_t s, const tier_block_id& id, uint64_t checksum) {
  slot& sl = slots_[s];
  sl.state = slot_state::held;
  sl.id = id;
  sl.checksum = checksum;
  held_[id.key] = s;
  recent_.push_front(s);
  sl.recent = recent_.begin();
}

void kv_tier::let_go(uint32_t s) {
  slot& sl = slots_[s];
  if (sl.state == slot_state::held) {
    held_.erase(sl.id.key);
    recent_.erase(sl.recent);
  }
  sl.state = slot_state::free;
  free_slots_.push_back(s);
}

void kv_tier::run_writes() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every write done
    write_job job = std::move(queue_.front());
    queue_.pop_front();
    writer_busy_ = true;
    lock.unlock();
    write_one(job);
    lock.lock();
    writer_busy_ = false;
    const bool index_due = keeps_index() && ++writes_since_index_ >= options_.index_every_writes;
    if (index_due) {
      writes_since_index_ = 0;
      lock.unlock();
      (void)write_index();
      lock.lock();
    }
    changed_.notify_all();
  }
}

void kv_tier::write_one(write_job& job) {
  aligned_buffer buffer{size_t(slot_bytes_)};
  std::memcpy(buffer.data.get() + tier_io_align, job.bytes.data(), job.bytes.size());
  slot_header header{};
  std::memcpy(header.magic, slot_magic, sizeof header.magic);
  header.identity = identity_;
  header.id = job.id;
  header.block_bytes = block_bytes_;
  header.checksum = block_checksum(buffer.span().subspan(tier_io_align), block_bytes_);
  header.header_checksum = checksum_before(header, &slot_header::header_checksum);
  std::memcpy(buffer.data.get(), &header, sizeof header);
  const auto start = std::chrono::steady_clock::now();
  const status written = medium_->write_at(slot_offset(job.slot), buffer.span());
  const double took = seconds_since(start);
  const std::lock_guard lock(mutex_);
  writing_.erase(job.id.key);
  stats_.write_seconds += took;
  if (!written.is_ok()) {
    let_go(job.slot);
    ++stats_.dropped_failed;
    return;
  }
  hold(job.slot, job.id, header.checksum);
  ++stats_.written_blocks;
  stats_.written_bytes += block_bytes_;
}

bool kv_tier::holds(const block_key& key, tier_block_id* id) const {
  const std::lock_guard lock(mutex_);
  const auto it = held_.find(key);
  if (it == held_.end()) return false;
  if (id) *id = slots_[it->second].id;
  return true;
}

tier_read kv_tier::promote(const block_key& key, std::span<std::byte> out) {
  uint32_t s = 0;
  tier_block_id id;
  uint64_t expected = 0;
  {
    const std::lock_guard lock(mutex_);
    const auto it = held_.find(key);
    if (it == held_.end() || out.size() != block_bytes_) return tier_read::absent;
    s = it->second;
    ++slots_[s].readers;
    id = slots_[s].id;
    expected = slots_[s].checksum;
  }
  aligned_buffer buffer{size_t(slot_bytes_)};
  const auto start = std::chrono::steady_clock::now();
  const status read = medium_->read_at(slot_offset(s), buffer.span());
  const double took = seconds_since(start);
  slot_header header{};
  std::memcpy(&header, buffer.data.get(), sizeof header);
  const bool good = read.is_ok() && std::memcmp(header.magic, slot_magic, sizeof header.magic) == 0 &&
                    header.header_checksum == checksum_before(header, &slot_header::header_checksum) &&
                    header.identity == identity_ && header.id.key == key && header.id.parent == id.parent &&
                    header.id.tokens == id.tokens && header.block_bytes == block_bytes_ &&
                    header.checksum == expected &&
                    block_checksum(buffer.span().subspan(tier_io_align), block_bytes_) == expected;
  if (good) std::memcpy(out.data(), buffer.data.get() + tier_io_align, out.size());
  const std::lock_guard lock(mutex_);
  --slots_[s].readers;
  stats_.read_seconds += took;
  if (!good) {
    ++stats_.corrupt_blocks;
    if (slots_[s].state == slot_state::held && slots_[s].id.key == key) let_go(s);
    return tier_read::corrupt;
  }
  recent_.splice(recent_.begin(), recent_, slots_[s].recent);
  ++stats_.read_blocks;
  stats_.read_bytes += block_bytes_;
  return tier_read::ok;
}

void kv_tier::drain() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && !writer_busy_; });
}

std::vector<block_key> kv_tier::keys() const {
  const std::lock_guard lock(mutex_);
  std::vector<block_key> out;
  out.reserve(held_.size());
  for (const auto& [key, s] : held_) out.push_back(key);
  return out;
}

tier_stats kv_tier::stats() const {
  const std::lock_guard lock(mutex_);
  tier_stats s = stats_;
  s.held = uint32_t(held_.size());
  s.queued = uint32_t(queue_.size());
  return s;
}

}  // namespace illm::gpu
