#include "gpu/formats/gguf.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

using json = nlohmann::json;

/// Limits that no real file reaches: a count past them is a lie, refused before anything is allocated for it.
constexpr uint64_t max_entries = uint64_t(1) << 20;
constexpr uint64_t max_array = uint64_t(1) << 24;
constexpr int max_depth = 2;  // arrays of arrays at most

/// Reads the header's values in order, each bounded by the bytes the file has.
class reader {
 public:
  reader(const uint8_t* data, uint64_t size, std::string file) : data_(data), size_(size), file_(std::move(file)) {}

  template <typename T>
  T number() {
    need(sizeof(T), "a number");
    T v;
    std::memcpy(&v, data_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string() {
    const uint64_t length = number<uint64_t>();
    need(length, "a string");
    std::string s(reinterpret_cast<const char*>(data_ + at_), length);
    at_ += length;
    return s;
  }
  /// A value of GGUF type `type` as JSON.
  json value(uint32_t type, int depth = 0) {
    switch (type) {
      case 0: return number<uint8_t>();
      case 1: return number<int8_t>();
      case 2: return number<uint16_t>();
      case 3: return number<int16_t>();
      case 4: return number<uint32_t>();
      case 5: return number<int32_t>();
      case 6: return number<float>();
      case 7: return number<uint8_t>() != 0;
      case 8: return string();
      case 9: return array(depth);
      case 10: return number<uint64_t>();
      case 11: return number<int64_t>();
      case 12: return number<double>();
      default: throw error(text::format("unknown value type {}", type));
    }
  }
  uint64_t at() const { return at_; }
  std::runtime_error error(const std::string& what) const {
    return std::runtime_error(text::format("{}: {} (at byte {})", file_, what, at_));
  }

 private:
  json array(int depth) {
    if (depth >= max_depth) throw error("arrays nested too deeply");
    const uint32_t type = number<uint32_t>();
    const uint64_t count = number<uint64_t>();
    // Every element takes at least a byte: a count past the bytes left is a lie.
    if (count > max_array || count > size_ - at_) throw error(text::format("an array of {} elements", count));
    json out = json::array();
    for (uint64_t i = 0; i < count; ++i) out.push_back(value(type, depth + 1));
    return out;
  }
  void need(uint64_t bytes, const char* what) const {
    if (bytes > size_ - at_) throw error(text::format("{} of {} bytes runs past the end of the file", what, bytes));
  }

  const uint8_t* data_;
  uint64_t size_;
  uint64_t at_ = 0;
  std::string file_;
};

/// The ggml types this reader reads, by their number in the file.
std::optional<dtype> type_of(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return dtype::f32;
    case 1: return dtype::f16;
    case 6: return dtype::q5_0;
    case 8: return dtype::q8_0;
    case 12: return dtype::q4_k;
    case 14: return dtype::q6_k;
    case 30: return dtype::bf16;
    case 39: return dtype::mxfp4;
    default: return std::nullopt;
  }
}

/// A tensor's header entry.
struct tensor_entry {
  std::string name;
  std::vector<uint64_t> shape;  // outermost first
  uint32_t ggml_type = 0;
  uint64_t offset = 0;
};

tensor_entry read_tensor(reader& r) {
  tensor_entry t;
  t.name = r.string();
  const uint32_t dims = r.number<uint32_t>();
  if (dims == 0 || dims > 4) throw r.error(text::format("tensor {} has {} dimensions", t.name, dims));
  uint64_t elements = 1;
  for (uint32_t d = 0; d < dims; ++d) {
    const uint64_t n = r.number<uint64_t>();
    if (n == 0 || n > (uint64_t(1) << 40) || elements > (uint64_t(1) << 48) / n)
      throw r.error(text::format("tensor {} has a dimension of {}", t.name, n));
    elements *= n;
    t.shape.insert(t.shape.begin(), n);
  }
  t.ggml_type = r.number<uint32_t>();
  t.offset = r.number<uint64_t>();
  return t;
}

}  // namespace

result<gguf_file> gguf_file::open(const std::string& path) {
  auto mapped = mapped_file::open(path);
  if (!mapped.is_ok()) return mapped.error();
  const auto& f = mapped.value();
  gguf_file out;
  out.path_ = path;
  try {
    reader r(f->data(), f->size(), path);
    if (f->size() < 4 || std::memcmp(f->data(), "GGUF", 4) != 0) throw r.error("not a GGUF file (no GGUF magic)");
    r.number<uint32_t>();
    const uint32_t version = r.number<uint32_t>();
    if (version != 2 && version != 3) throw r.error(text::format("GGUF version {} (versions 2 and 3 are read)", version));
    const uint64_t tensor_count = r.number<uint64_t>(), kv_count = r.number<uint64_t>();
    if (tensor_count > max_entries || kv_count > max_entries)
      throw r.error(text::format("{} tensors and {} metadata entries", tensor_count, kv_count));
    out.metadata_ = json::object();
    for (uint64_t i = 0; i < kv_count; ++i) {
      std::string key = r.string();
      out.metadata_[key] = r.value(r.number<uint32_t>());
    }
    std::vector<tensor_entry> entries;
    for (uint64_t i = 0; i < tensor_count; ++i) entries.push_back(read_tensor(r));
    const json& alignment_value = out.metadata_.contains("general.alignment") ? out.metadata_["general.alignment"] : json(32);
    const uint64_t alignment =
        alignment_value.is_number_integer() && alignment_value.get<int64_t>() > 0 ? alignment_value.get<uint64_t>() : 0;
    if (alignment == 0 || alignment > 4096 || (alignment & (alignment - 1)) != 0)
      throw r.error(text::format("general.alignment {} is not a power of two up to 4096", alignment_value.dump()));
    const uint64_t data_at = (r.at() + alignment - 1) / alignment * alignment;
    if (data_at > f->size()) throw r.error("the data section starts past the end of the file");
    const uint64_t data_bytes = f->size() - data_at;
    for (const tensor_entry& e : entries) {
      const auto type = type_of(e.ggml_type);
      if (!type)
        throw r.error(text::format("tensor {} has ggml type {} (F32, F16, BF16, Q8_0, Q5_0, Q4_K, Q6_K and MXFP4 are read)", e.name, e.ggml_type));
      uint64_t elements = 1;
      for (uint64_t d : e.shape) elements *= d;
      const uint64_t bytes = stored_bytes(*type, elements);
      if (bytes == 0 || e.shape.back() % block_elements(*type) != 0)
        throw r.error(text::format("tensor {}: {} elements in rows of {} do not fill {} blocks", e.name, elements,
                                   e.shape.back(), file_name(*type)));
      if (e.offset % alignment != 0 || e.offset > data_bytes || bytes > data_bytes - e.offset)
        throw r.error(text::format("tensor {}: offset {} and {} bytes run past the data's {} bytes (or are not aligned)",
                                   e.name, e.offset, bytes, data_bytes));
      out.tensors_.push_back({e.name, *type, e.shape, f->data() + data_at + e.offset, bytes, f});
    }
  } catch (const std::runtime_error& e) {
    return status{status_code::corrupt_model, e.what()};
  }
  std::sort(out.tensors_.begin(), out.tensors_.end(), [](const auto& a, const auto& b) { return a.data < b.data; });
  for (size_t i = 1; i < out.tensors_.size(); ++i)
    if (out.tensors_[i].data < out.tensors_[i - 1].data + out.tensors_[i - 1].bytes)
      return status{status_code::corrupt_model, text::format("{}: tensors {} and {} overlap", path, out.tensors_[i - 1].name,
                                                             out.tensors_[i].name)};
  if (const stored_tensor* twice = sort_by_name(out.tensors_))
    return status{status_code::corrupt_model, text::format("{}: two tensors are named {}", path, twice->name)};
  return out;
}

const stored_tensor* gguf_file::find(std::string_view name) const {
  return find_by_name(tensors_, name);
}

}  // namespace illm::gpu
