// A disk tier's files: its first page (what KV it holds and how it is cut) and the index beside it (the slots it
// held), written so that a tier opened again with the same identity finds its blocks, and read back here.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "gpu/tier/kv_tier.hpp"
#include "gpu/tier/tier_format.hpp"

namespace illm::gpu {

using namespace tier_format;

status kv_tier::write_first_page() {
  aligned_buffer page(tier_io_align);
  file_header h{};
  std::memcpy(h.magic, file_magic, sizeof h.magic);
  h.version = format_version;
  h.identity = identity_;
  h.block_bytes = block_bytes_;
  h.slot_bytes = slot_bytes_;
  h.slots = slots_.size();
  h.checksum = checksum_before(h, &file_header::checksum);
  std::memcpy(page.data.get(), &h, sizeof h);
  return medium_->write_at(0, page.span());
}

status kv_tier::write_index() {
  if (!keeps_index()) return status::ok();
  std::vector<index_entry> entries;
  {
    const std::lock_guard lock(mutex_);
    for (uint32_t s : recent_) entries.push_back({s, 0, slots_[s].id, slots_[s].checksum});
  }
  index_header h{};
  std::memcpy(h.magic, index_magic, sizeof h.magic);
  h.identity = identity_;
  h.block_bytes = block_bytes_;
  h.slot_bytes = slot_bytes_;
  h.slots = slots_.size();
  h.count = entries.size();
  std::vector<char> bytes(sizeof h + entries.size() * sizeof(index_entry));
  std::memcpy(bytes.data(), &h, sizeof h);
  if (!entries.empty()) std::memcpy(bytes.data() + sizeof h, entries.data(), entries.size() * sizeof(index_entry));
  const uint64_t sum = checksum_words(bytes.data(), bytes.size());
  const std::string temporary = index_path() + ".new";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.write(reinterpret_cast<const char*>(&sum), sizeof sum);
    if (!out.flush()) return {status_code::io_error, temporary + ": cannot write the tier's index"};
  }
  if (std::rename(temporary.c_str(), index_path().c_str()) != 0)
    return {status_code::io_error, index_path() + ": cannot replace the tier's index"};
  return status::ok();
}

std::string kv_tier::recover() {
  auto start_empty = [&](const std::string& why) {
    std::remove(index_path().c_str());
    return spec_.path + ": " + why + ": starting it empty";
  };
  aligned_buffer page(tier_io_align);
  if (!medium_->read_at(0, page.span()).is_ok()) return start_empty("its first page cannot be read");
  file_header h{};
  std::memcpy(&h, page.data.get(), sizeof h);
  if (std::memcmp(h.magic, file_magic, sizeof h.magic) != 0 || h.version != format_version ||
      h.checksum != checksum_before(h, &file_header::checksum))
    return start_empty("not a KV tier of this format");
  if (h.identity != identity_) return start_empty("it held KV of another model or KV type");
  if (h.block_bytes != block_bytes_)
    return start_empty("it held blocks of " + std::to_string(h.block_bytes) + " bytes, not " +
                       std::to_string(block_bytes_));
  std::ifstream in(index_path(), std::ios::binary);
  if (!in) return start_empty("no index beside it (its last run did not close)");
  const size_t most = sizeof(index_header) + size_t(h.slots) * sizeof(index_entry) + sizeof(uint64_t);
  std::vector<char> bytes;
  char chunk[65536];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    bytes.insert(bytes.end(), chunk, chunk + in.gcount());
    if (bytes.size() > most) return start_empty("its index is larger than its slots allow");
  }
  index_header ih{};
  if (bytes.size() < sizeof ih + sizeof(uint64_t)) return start_empty("its index is cut short");
  std::memcpy(&ih, bytes.data(), sizeof ih);
  uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + bytes.size() - sizeof sum, sizeof sum);
  if (std::memcmp(ih.magic, index_magic, sizeof ih.magic) != 0 || ih.identity != identity_ ||
      ih.block_bytes != h.block_bytes || ih.slot_bytes != h.slot_bytes || ih.slots != h.slots ||
      ih.count > ih.slots || bytes.size() != sizeof ih + ih.count * sizeof(index_entry) + sizeof sum ||
      sum != checksum_words(bytes.data(), bytes.size() - sizeof sum))
    return start_empty("its index does not match it");
  std::vector<index_entry> entries(size_t(ih.count));
  if (!entries.empty()) std::memcpy(entries.data(), bytes.data() + sizeof ih, entries.size() * sizeof(index_entry));
  const std::lock_guard lock(mutex_);
  size_t found = 0, outside = 0;
  for (auto e = entries.rbegin(); e != entries.rend(); ++e) {  // least recent first: each found goes to the front
    if (e->slot >= slots_.size()) {
      ++outside;
      continue;
    }
    if (slots_[e->slot].state != slot_state::free || held_.count(e->id.key)) continue;
    hold(e->slot, e->id, e->checksum);
    ++found;
  }
  free_slots_.clear();
  for (size_t s = slots_.size(); s-- > 0;)
    if (slots_[s].state == slot_state::free) free_slots_.push_back(uint32_t(s));
  std::string note = spec_.path + ": found " + std::to_string(found) + " blocks of its last run (each checked when read)";
  if (outside) note += "; " + std::to_string(outside) + " lay past its new size";
  return note;
}

}  // namespace illm::gpu
