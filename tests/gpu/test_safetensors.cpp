// Safetensors checkpoints are read where they lie: one file or the shards of an index, every tensor's dtype,
// shape and bytes as written; and a file that lies (too short, a header past its end or not JSON, an unknown
// dtype, offsets past the data or overlapping, sizes that disagree with the shape, an index that names a
// tensor its shard lacks) is refused with an error naming the file and the tensor.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/formats/safetensors.hpp"

using namespace illm::gpu;
using json = nlohmann::json;

namespace {

/// A tensor to write: its dtype name, shape and bytes.
struct written {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

/// The bytes of a safetensors file holding `tensors` in order (`header` edits the JSON before it is written).
std::string file_bytes(const std::vector<written>& tensors, const std::function<void(json&)>& edit = nullptr) {
  json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const written& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.append(t.bytes.begin(), t.bytes.end());
  }
  if (edit) edit(header);
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text + data;
}

std::vector<uint8_t> counting(size_t n, uint8_t from = 0) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(from + i);
  return v;
}

struct folder {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("illm-st-" + std::to_string(::getpid()));
  folder() { std::filesystem::create_directories(path); }
  ~folder() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

/// The error opening `bytes` as a file gives.
std::string error_of(const folder& f, const std::string& bytes) {
  auto opened = safetensors_checkpoint::open(f.write("bad.safetensors", bytes));
  REQUIRE_FALSE(opened.is_ok());
  CHECK(opened.error().code() == status_code::corrupt_model);
  return opened.error().message();
}

}  // namespace

TEST_CASE("safetensors: a file's tensors are read where they lie, with their dtype, shape and bytes") {
  folder f;
  const std::vector<written> tensors = {{"model.embed_tokens.weight", "BF16", {4, 3}, counting(24)},
                                        {"model.norm.weight", "F32", {3}, counting(12, 100)},
                                        {"lm_head.weight", "F16", {2, 2}, counting(8, 200)},
                                        {"scalar", "F32", {}, counting(4, 50)}};
  auto opened = safetensors_checkpoint::open(f.write("model.safetensors", file_bytes(tensors)));
  REQUIRE_MESSAGE(opened.is_ok(), opened.error().message());
  const safetensors_checkpoint& c = opened.value();
  CHECK(c.tensors().size() == 4);
  for (const written& w : tensors) {
    const stored_tensor* t = c.find(w.name);
    REQUIRE_MESSAGE(t, w.name);
    CHECK(file_name(t->type) == w.dtype);
    CHECK(t->shape == w.shape);
    CHECK(stored_bytes(t->type, t->elements()) == t->bytes);
    CHECK(std::vector<uint8_t>(t->data, t->data + t->bytes) == w.bytes);
  }
  CHECK_FALSE(c.find("model.layers.0.self_attn.q_proj.weight"));
}

TEST_CASE("safetensors: an index's shards are opened once each, and every name it maps is found in its shard") {
  folder f;
  f.write("model-00001-of-00002.safetensors",
          file_bytes({{"a", "F32", {2}, counting(8)}, {"b", "F16", {2}, counting(4, 9)}}));
  f.write("model-00002-of-00002.safetensors", file_bytes({{"c", "BF16", {3}, counting(6, 20)}}));
  json index = {{"metadata", {{"total_size", 18}}},
                {"weight_map",
                 {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"},
                  {"c", "model-00002-of-00002.safetensors"}}}};
  const std::string path = f.write("model.safetensors.index.json", index.dump());
  auto opened = safetensors_checkpoint::open(path);
  REQUIRE_MESSAGE(opened.is_ok(), opened.error().message());
  REQUIRE(opened.value().tensors().size() == 3);
  CHECK(opened.value().find("c")->data[0] == 20);
  CHECK(opened.value().find("a")->file != opened.value().find("c")->file);

  index["weight_map"]["d"] = "model-00002-of-00002.safetensors";  // a name its shard lacks
  auto lying = safetensors_checkpoint::open(f.write("model.safetensors.index.json", index.dump()));
  REQUIRE_FALSE(lying.is_ok());
  CHECK(lying.error().message().find("tensor d is not in model-00002-of-00002.safetensors") != std::string::npos);
  index["weight_map"].erase("d");
  index["weight_map"]["c"] = "model-00003-of-00002.safetensors";  // a file that is not there
  auto missing = safetensors_checkpoint::open(f.write("model.safetensors.index.json", index.dump()));
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.error().message().find("model-00003-of-00002.safetensors: cannot open it") != std::string::npos);
  index["weight_map"]["c"] = "../escape.safetensors";
  auto escape = safetensors_checkpoint::open(f.write("model.safetensors.index.json", index.dump()));
  REQUIRE_FALSE(escape.is_ok());
  CHECK(escape.error().message().find("names no file of this folder") != std::string::npos);
}

TEST_CASE("safetensors: a file that lies is refused, naming the file and the tensor") {
  folder f;
  const std::vector<written> good = {{"w", "F32", {2, 2}, counting(16)}, {"v", "F16", {4}, counting(8)}};
  auto has = [](const std::string& message, const std::string& part) {
    CHECK_MESSAGE(message.find(part) != std::string::npos, message);
    CHECK_MESSAGE(message.find("bad.safetensors") != std::string::npos, message);
  };
  has(error_of(f, "abc"), "too short for a safetensors header");
  std::string huge = file_bytes(good);
  huge[5] = char(0x7f);  // a header length of terabytes
  has(error_of(f, huge), "a header of");
  std::string not_json = file_bytes(good);
  not_json[8] = '[';
  has(error_of(f, not_json), "the header is not a JSON object");
  has(error_of(f, file_bytes(good, [](json& h) { h["w"]["dtype"] = "F64"; })), "tensor w: dtype F64 is not one of");
  has(error_of(f, file_bytes(good, [](json& h) { h["w"]["data_offsets"] = {0, 4096}; })),
      "tensor w: data_offsets [0, 4096] run past the data's 24 bytes");
  has(error_of(f, file_bytes(good, [](json& h) { h["w"]["shape"] = {3, 2}; })),
      "tensor w: data_offsets [0, 16] hold 16 bytes, its shape and dtype 24");
  has(error_of(f, file_bytes(good, [](json& h) { h["v"]["data_offsets"] = {8, 16}; })), "overlap");
  has(error_of(f, file_bytes(good, [](json& h) { h["w"].erase("shape"); })), "tensor w: no shape");
  has(error_of(f, file_bytes(good, [](json& h) { h["w"]["shape"] = {-2, 2}; })), "not a whole number");
  std::string truncated = file_bytes(good);
  truncated.resize(truncated.size() - 3);
  has(error_of(f, truncated), "run past the data's");
}
