#include "gpu/formats/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <optional>

#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

#include "gpu/text.hpp"

namespace illm::gpu {

namespace {

using json = nlohmann::json;

status corrupt_safetensors(const std::string& file, const std::string& what) {
  return {status_code::corrupt_model, text::format("{}: {}", file, what)};
}

std::optional<dtype> dtype_named(const std::string& name) {
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16})
    if (name == file_name(t)) return t;
  return std::nullopt;
}

/// Reads one tensor's entry; an error naming it, or empty.
std::string read_entry(const std::string& name, const json& value, uint64_t data_bytes, safetensors_entry& out) {
  if (!value.is_object()) return "its entry is not an object";
  const auto dtype = value.find("dtype"), shape = value.find("shape"), offsets = value.find("data_offsets");
  if (dtype == value.end() || !dtype->is_string()) return "no dtype";
  const bool bytes = dtype->get<std::string>() == "U8";
  const auto type = bytes ? std::optional<gpu::dtype>(dtype::f32) : dtype_named(dtype->get<std::string>());
  if (!type) return text::format("dtype {} is not one of F32, F16, BF16, U8", dtype->get<std::string>());
  if (shape == value.end() || !shape->is_array() || shape->size() > 8) return "no shape (an array of at most 8 sizes)";
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    return "no data_offsets [begin, end]";
  out = {name, *type, bytes, {}, (*offsets)[0].get<uint64_t>(), (*offsets)[1].get<uint64_t>()};
  uint64_t elements = 1;
  for (const json& d : *shape) {
    if (!d.is_number_unsigned()) return "a size of its shape is not a whole number";
    const uint64_t size = d.get<uint64_t>();
    if (size != 0 && elements > (uint64_t(1) << 48) / size) return "its shape is too large";
    elements *= size;
    out.shape.push_back(size);
  }
  if (out.begin > out.end || out.end > data_bytes)
    return text::format("data_offsets [{}, {}] run past the data's {} bytes", out.begin, out.end, data_bytes);
  const uint64_t element_bytes = bytes ? 1 : block_bytes(*type);
  if (out.end - out.begin != elements * element_bytes)
    return text::format("data_offsets [{}, {}] hold {} bytes, its shape and dtype {}", out.begin, out.end,
                        out.end - out.begin, elements * element_bytes);
  return {};
}

/// The tensors of one mapped file; its U8 tensors (halves of MXFP4 pairs) into `bytes`, typed as f32 until paired.
result<std::vector<stored_tensor>> tensors_of(const std::shared_ptr<const mapped_file>& f, std::vector<stored_tensor>& bytes) {
  if (f->size() < 8) return corrupt_safetensors(f->path(), text::format("{} bytes: too short for a safetensors header", f->size()));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | f->data()[i];  // little-endian
  if (header_bytes > max_safetensors_header_bytes || header_bytes > f->size() - 8)
    return corrupt_safetensors(f->path(), text::format("a header of {} bytes, in a file of {} (at most {} are read)", header_bytes,
                                           f->size(), max_safetensors_header_bytes));
  const std::string_view json_text(reinterpret_cast<const char*>(f->data()) + 8, header_bytes);
  const uint64_t data_at = 8 + header_bytes;
  auto entries = parse_safetensors_header(json_text, f->size() - data_at, f->path());
  if (!entries.is_ok()) return entries.error();
  std::vector<stored_tensor> out;
  for (safetensors_entry& e : entries.value())
    (e.bytes ? bytes : out).push_back({std::move(e.name), e.type, std::move(e.shape), f->data() + data_at + e.begin,
                                       e.end - e.begin, f});
  return out;
}

/// `name` without `suffix`, or empty when it does not end so.
std::string stem(const std::string& name, std::string_view suffix) {
  return name.size() > suffix.size() && name.ends_with(suffix) ? name.substr(0, name.size() - suffix.size()) : "";
}

/// Each name_blocks [..., groups, 16] with its name_scales [..., groups] as one MXFP4 tensor `name` [..., groups * 32]
/// into `out`; a U8 tensor of no such pair is refused.
status pair_mxfp4(const std::vector<stored_tensor>& bytes, std::vector<stored_tensor>& out) {
  std::map<std::string, const stored_tensor*> scales;
  for (const stored_tensor& t : bytes)
    if (const std::string s = stem(t.name, "_scales"); !s.empty()) scales[s] = &t;
  std::set<std::string> used;
  for (const stored_tensor& blocks : bytes) {
    const std::string name = stem(blocks.name, "_blocks");
    const auto it = scales.find(name);
    if (name.empty() || it == scales.end()) continue;
    const stored_tensor& s = *it->second;
    std::vector<uint64_t> shape = blocks.shape;
    if (shape.size() < 2 || shape.back() != 16 || std::vector<uint64_t>(shape.begin(), shape.end() - 1) != s.shape)
      return corrupt_safetensors(blocks.file->path(),
                                 text::format("{} [{}] and {} [{}] are no MXFP4 pair ([..., groups, 16] and [..., groups])",
                                              blocks.name, text::join(blocks.shape, ", "), s.name,
                                              text::join(s.shape, ", ")));
    shape.pop_back();
    shape.back() *= 32;
    out.push_back({name, dtype::mxfp4, std::move(shape), blocks.data, blocks.bytes, blocks.file, s.data, s.file});
    used.insert({blocks.name, s.name});
  }
  for (const stored_tensor& t : bytes)
    if (!used.count(t.name))
      return corrupt_safetensors(t.file->path(),
                                 text::format("tensor {}: U8, but not half of an MXFP4 pair (name_blocks and name_scales)",
                                              t.name));
  return status::ok();
}

/// The shards an index names, and which shard each tensor is in.
result<std::map<std::string, std::string>> read_index(const std::string& path) {
  auto f = mapped_file::open(path);
  if (!f.is_ok()) return f.error();
  json index = parse_bounded_or_discarded<json>(
      std::string_view(reinterpret_cast<const char*>(f.value()->data()), f.value()->size()), json_depth_outside_requests);
  if (index.is_discarded() || !index.is_object()) return corrupt_safetensors(path, "not a JSON object");
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty()) return corrupt_safetensors(path, "no weight_map of tensor names to files");
  std::map<std::string, std::string> out;
  for (const auto& [name, shard] : map->items()) {
    const std::string file = shard.is_string() ? shard.get<std::string>() : "";
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      return corrupt_safetensors(path, text::format("weight_map: tensor {} names no file of this folder", name));
    out[name] = file;
  }
  return out;
}

}  // namespace

result<std::vector<safetensors_entry>> parse_safetensors_header(std::string_view json_text, uint64_t data_bytes,
                                                                const std::string& file) {
  json header = parse_bounded_or_discarded<json>(json_text, json_depth_outside_requests);
  if (header.is_discarded() || !header.is_object()) return corrupt_safetensors(file, "the header is not a JSON object");
  std::vector<safetensors_entry> out;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return corrupt_safetensors(file, "__metadata__ is not an object");
      continue;
    }
    safetensors_entry e;
    if (std::string why = read_entry(name, value, data_bytes, e); !why.empty())
      return corrupt_safetensors(file, text::format("tensor {}: {}", name, why));
    out.push_back(std::move(e));
  }
  std::vector<const safetensors_entry*> by_offset;
  for (const safetensors_entry& e : out) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      return corrupt_safetensors(file, text::format("tensors {} and {} overlap", by_offset[i - 1]->name, by_offset[i]->name));
  return out;
}

result<safetensors_checkpoint> safetensors_checkpoint::open(const std::string& path) {
  safetensors_checkpoint out;
  const bool is_index = path.size() >= 11 && path.compare(path.size() - 11, 11, ".index.json") == 0;
  std::map<std::string, std::string> index;
  std::vector<std::string> files{path};
  if (is_index) {
    auto read = read_index(path);
    if (!read.is_ok()) return read.error();
    index = std::move(read).value();
    files.clear();
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    for (const auto& [name, shard] : index)
      if (std::find(files.begin(), files.end(), (folder / shard).string()) == files.end())
        files.push_back((folder / shard).string());
  }
  std::vector<stored_tensor> bytes;
  for (const std::string& file : files) {
    auto f = mapped_file::open(file);
    if (!f.is_ok()) return f.error();
    auto tensors = tensors_of(f.value(), bytes);
    if (!tensors.is_ok()) return tensors.error();
    for (stored_tensor& t : tensors.value()) out.tensors_.push_back(std::move(t));
  }
  std::multimap<std::string, std::string> file_of;  // tensor name -> file name, U8 halves included
  for (const auto* list : {&out.tensors_, &bytes})
    for (const stored_tensor& t : *list) file_of.emplace(t.name, std::filesystem::path(t.file->path()).filename());
  for (const auto& entry : index) {
    const std::string& shard = entry.second;
    const auto [first, last] = file_of.equal_range(entry.first);
    if (std::none_of(first, last, [&](const auto& held) { return held.second == shard; }))
      return corrupt_safetensors(path, text::format("weight_map: tensor {} is not in {}", entry.first, shard));
  }
  ILLM_RETURN_IF_ERROR(pair_mxfp4(bytes, out.tensors_));
  if (const stored_tensor* twice = sort_by_name(out.tensors_))
    return corrupt_safetensors(twice->file->path(), text::format("tensor {} is in two files", twice->name));
  return out;
}

const stored_tensor* safetensors_checkpoint::find(std::string_view name) const {
  return find_by_name(tensors_, name);
}

}  // namespace illm::gpu
