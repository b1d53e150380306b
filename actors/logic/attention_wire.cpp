#include "actors/logic/attention_wire.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "gpu/backend.hpp"

namespace illm::actors {

namespace {

constexpr uint32_t attend_magic = 0x41544e44;    // "ATND"
constexpr uint32_t partials_magic = 0x50525453;  // "PRTS"
constexpr uint64_t max_array = uint64_t(1) << 28;  // elements; far above any real payload

class writer {
 public:
  template <class T>
  void value(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  template <class T>
  void array(const std::vector<T>& v) {
    value(uint64_t(v.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out_.insert(out_.end(), p, p + v.size() * sizeof(T));
  }
  void text(const std::string& s) {
    value(uint64_t(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class reader {
 public:
  explicit reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <class T>
  bool value(T& v) {
    if (in_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  template <class T>
  bool array(std::vector<T>& v) {
    uint64_t n = 0;
    if (!skip_array<T>(n)) return false;
    v.resize(n);
    if (n > 0) std::memcpy(v.data(), in_.data() + at_ - n * sizeof(T), n * sizeof(T));  // an empty one's data() may be null
    return true;
  }
  bool text(std::string& s) {
    uint64_t n = 0;
    if (!value(n) || n > in_.size() - at_) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + at_), n);
    at_ += n;
    return true;
  }
  bool at_end() const { return at_ == in_.size(); }
  /// Passes over an array of T, its length checked against what is left; `n` gets its length.
  template <class T>
  bool skip_array(uint64_t& n) {
    if (!value(n) || n > max_array || (in_.size() - at_) / sizeof(T) < n) return false;
    at_ += n * sizeof(T);
    return true;
  }

 private:
  const std::vector<uint8_t>& in_;
  size_t at_ = 0;
};

constexpr uint64_t max_forwards = 64;

bool read_forwards(reader& r, std::vector<attend::forward>& out) {
  uint64_t n = 0;
  if (!r.value(n) || n > max_forwards) return false;
  out.resize(size_t(n));
  for (attend::forward& f : out)
    if (!r.value(f.peer) || !r.array(f.blocks) || !r.array(f.block_pos)) return false;
  return true;
}

/// Whether `runs` are (first, count) pairs of nonzero counts adding up to `blocks` (or there are none).
bool runs_add_up(const std::vector<uint32_t>& runs, uint32_t blocks) {
  if (runs.empty()) return true;
  if (runs.size() % 2 != 0) return false;
  uint64_t total = 0;
  for (size_t i = 0; i < runs.size(); i += 2) {
    if (runs[i + 1] == 0) return false;
    total += runs[i + 1];
  }
  return total == blocks;
}

gpu::status corrupt(const char* what) {
  return {gpu::status_code::invalid_argument, fmt::format("malformed {} payload from a peer", what)};
}

}  // namespace

std::vector<uint8_t> encode(const attend& a) {
  writer w;
  w.value(attend_magic);
  w.value(a.tag);
  w.value(a.req_id);
  w.value(a.owner);
  w.value(a.layer);
  w.value(a.n_q);
  w.value(a.num_blocks);
  w.array(a.q);
  w.array(a.q_pos);
  w.array(a.blocks);
  w.array(a.block_pos);
  w.value(uint64_t(a.forwards.size()));
  for (const attend::forward& f : a.forwards) {
    w.value(f.peer);
    w.array(f.blocks);
    w.array(f.block_pos);
  }
  w.array(a.logical_runs);
  return w.take();
}

std::vector<uint32_t> logical_runs(std::vector<uint32_t> logical) {
  std::sort(logical.begin(), logical.end());
  std::vector<uint32_t> runs;
  for (size_t i = 0; i < logical.size(); ++i) {
    if (!runs.empty() && runs[runs.size() - 2] + runs.back() == logical[i]) {
      ++runs.back();
      continue;
    }
    runs.push_back(logical[i]);
    runs.push_back(1);
  }
  return runs;
}

std::vector<uint32_t> logical_runs_of(std::span<const int32_t> block_pos) {
  std::vector<uint32_t> logical;
  for (int32_t pos : block_pos) logical.push_back(uint32_t(pos) / uint32_t(gpu::kv_block_tokens));
  return logical_runs(std::move(logical));
}

std::vector<uint8_t> encode(const partials& p) {
  writer w;
  w.value(partials_magic);
  w.value(p.tag);
  w.value(uint8_t(p.ok));
  w.text(p.error);
  w.array(p.m);
  w.array(p.e);
  w.array(p.ma);
  return w.take();
}

gpu::result<attend> decode_attend(const std::vector<uint8_t>& bytes) {
  reader r(bytes);
  attend a;
  uint32_t magic = 0;
  if (!r.value(magic) || magic != attend_magic || !r.value(a.tag) || !r.value(a.req_id) || !r.value(a.owner) ||
      !r.value(a.layer) || !r.value(a.n_q) || !r.value(a.num_blocks) || !r.array(a.q) || !r.array(a.q_pos) ||
      !r.array(a.blocks) || !r.array(a.block_pos) || !read_forwards(r, a.forwards) || !r.array(a.logical_runs) ||
      !r.at_end())
    return corrupt("attend");
  if (!runs_add_up(a.logical_runs, a.num_blocks)) return corrupt("attend");
  for (const attend::forward& f : a.forwards)
    if (f.blocks.empty() || f.blocks.size() != f.block_pos.size()) return corrupt("attend");
  if (a.n_q <= 0 || a.q_pos.size() != size_t(a.n_q) || a.q.size() % size_t(a.n_q) != 0 || a.layer < 0 ||
      a.blocks.size() != a.block_pos.size() || (!a.blocks.empty() && a.blocks.size() != a.num_blocks))
    return corrupt("attend");
  return a;
}

bool is_decode_attend(const std::vector<uint8_t>& bytes) {
  reader r(bytes);
  uint32_t magic = 0, owner = 0, num_blocks = 0;
  uint64_t tag = 0, req_id = 0, q = 0, q_pos = 0, blocks = 0, block_pos = 0, forwards = 0;
  int32_t layer = 0, n_q = 0;
  return r.value(magic) && magic == attend_magic && r.value(tag) && r.value(req_id) && r.value(owner) &&
         r.value(layer) && r.value(n_q) && n_q == 1 && r.value(num_blocks) && r.skip_array<float>(q) &&
         r.skip_array<int32_t>(q_pos) && r.skip_array<uint32_t>(blocks) && blocks == 0 &&
         r.skip_array<int32_t>(block_pos) && r.value(forwards) && forwards == 0;
}

gpu::result<partials> decode_partials(const std::vector<uint8_t>& bytes) {
  reader r(bytes);
  partials p;
  uint32_t magic = 0;
  uint8_t ok = 0;
  if (!r.value(magic) || magic != partials_magic || !r.value(p.tag) || !r.value(ok) || !r.text(p.error) ||
      !r.array(p.m) || !r.array(p.e) || !r.array(p.ma) || !r.at_end() || p.m.size() != p.e.size())
    return corrupt("partials");
  p.ok = ok != 0;
  return p;
}

void merge_partials(partials& a, const partials& b, int head_dim) {
  const size_t hd = size_t(head_dim);
  for (size_t r = 0; r < a.m.size() && r < b.m.size(); ++r) {
    if (b.e[r] == 0.0f) continue;
    if (a.e[r] == 0.0f) {
      a.m[r] = b.m[r];
      a.e[r] = b.e[r];
      std::copy_n(b.ma.begin() + std::ptrdiff_t(r * hd), hd, a.ma.begin() + std::ptrdiff_t(r * hd));
      continue;
    }
    const float top = std::max(a.m[r], b.m[r]), sa = std::exp(a.m[r] - top), sb = std::exp(b.m[r] - top);
    a.m[r] = top;
    a.e[r] = a.e[r] * sa + b.e[r] * sb;
    for (size_t d = 0; d < hd; ++d) a.ma[r * hd + d] = a.ma[r * hd + d] * sa + b.ma[r * hd + d] * sb;
  }
}

std::optional<uint64_t> partials_tag(const std::vector<uint8_t>& bytes) {
  uint32_t magic = 0;
  uint64_t tag = 0;
  if (bytes.size() < sizeof(magic) + sizeof(tag)) return std::nullopt;
  std::memcpy(&magic, bytes.data(), sizeof(magic));
  std::memcpy(&tag, bytes.data() + sizeof(magic), sizeof(tag));
  if (magic != partials_magic) return std::nullopt;
  return tag;
}

}  // namespace illm::actors
