// The llama2.c loader: a written checkpoint loads back bit for bit (shared or separate classifier),
// and truncated, oversized, malformed or non-finite files give errors that name what is wrong.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gpu/checkpoint.hpp"
#include "gpu/model_files.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("illm_test_" + name)).string();
}

gpu::model_weights tiny(bool shared) {
  auto w = gpu::synthetic_weights(gpu::preset_config("tiny-gqa").value(), 11, shared);
  REQUIRE(w.is_ok());
  return std::move(w).value();
}

std::string load_error(const std::string& path) {
  auto w = gpu::load_llama2c(path);
  REQUIRE_FALSE(w.is_ok());
  return w.error().message();
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("checkpoint round trip keeps every weight") {
    for (bool shared : {true, false}) {
      const gpu::model_weights w = tiny(shared);
      const std::string path = temp_file("roundtrip.bin");
      REQUIRE(gpu::write_llama2c(w, path).is_ok());
      CHECK(std::filesystem::file_size(path) == gpu::llama2c_file_bytes(w.config(), shared));
      auto back = gpu::load_llama2c(path);
      REQUIRE(back.is_ok());
      CHECK(back->shared_classifier() == shared);
      CHECK(back->config().n_kv_heads == 2);
      REQUIRE(back->bytes() == w.bytes());
      CHECK(std::memcmp(back->data(), w.data(), w.bytes()) == 0);
      std::filesystem::remove(path);
    }
  }

  TEST_CASE("checkpoint errors name what is wrong") {
    const gpu::model_weights w = tiny(true);
    const std::string path = temp_file("broken.bin");
    REQUIRE(gpu::write_llama2c(w, path).is_ok());
    const auto size = std::filesystem::file_size(path);

    std::filesystem::resize_file(path, size - 4);
    CHECK(load_error(path).find("truncated") != std::string::npos);
    std::filesystem::resize_file(path, size + 4);
    CHECK(load_error(path).find("oversized") != std::string::npos);
    std::filesystem::resize_file(path, 10);
    CHECK(load_error(path).find("truncated") != std::string::npos);

    auto patch = [&](long offset, const void* bytes, size_t n) {
      REQUIRE(gpu::write_llama2c(w, path).is_ok());
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(offset);
      f.write(static_cast<const char*>(bytes), std::streamsize(n));
    };
    const int32_t zero = 0, seven = 7, huge = 1 << 30;
    patch(3 * 4, &zero, 4);  // n_heads = 0
    CHECK(load_error(path).find("bad header") != std::string::npos);
    patch(4 * 4, &seven, 4);  // n_kv_heads does not divide n_heads
    CHECK(load_error(path).find("n_kv_heads") != std::string::npos);
    patch(0, &huge, 4);  // absurd dim
    CHECK(load_error(path).find("bad header") != std::string::npos);
    const float nan = std::nanf("");
    const long wq0 = long(gpu::llama2c_header_bytes + 4 * (uint64_t(1000) * 128 + 3 * 128));  // layers.0.wq
    patch(wq0 + 8, &nan, 4);
    const std::string message = load_error(path);
    CHECK(message.find("non-finite") != std::string::npos);
    CHECK(message.find("layers.0.wq") != std::string::npos);
    CHECK(load_error(temp_file("does-not-exist.bin")).find("does-not-exist") != std::string::npos);
    std::filesystem::remove(path);
  }

  TEST_CASE("the real checkpoint loads with its known shape") {
    const auto& c = test::real_model().weights->config();
    CHECK(c.dim == 288);
    CHECK(c.n_layers == 6);
    CHECK(c.n_heads == 6);
    CHECK(c.vocab_size == 32000);
    CHECK(test::real_model().weights->shared_classifier());
  }

  TEST_CASE("model lookup explains a missing model") {
    auto missing = gpu::resolve_model("no-such-model");
    REQUIRE_FALSE(missing.is_ok());
    CHECK(missing.error().message().find("fetch-model") != std::string::npos);
  }

  TEST_CASE("synthetic presets have their published shapes and are reproducible") {
    CHECK(gpu::preset_config("llama2-70b")->n_kv_heads == 8);
    CHECK(gpu::preset_config("llama3-8b")->vocab_size == 128256);
    CHECK(gpu::preset_config("llama2-13b")->dim == 5120);
    CHECK(gpu::preset_config("llama2-7b")->parameter_count(false) == 6738415616ull);
    // Mixtures of experts count every expert and the routers, as their model cards do.
    CHECK(gpu::preset_config("mixtral-8x7b")->parameter_count(false) == 46702792704ull);
    CHECK(gpu::preset_config("qwen3-30b-a3b")->parameter_count(false) == 30532122624ull);
    CHECK_FALSE(gpu::preset_config("gpt-5").is_ok());
    CHECK(gpu::preset_config("Stories15M")->dim == 288);  // names as models spell them: case does not matter
    CHECK_FALSE(gpu::preset_config("llama2-7").is_ok());
    const gpu::model_weights a = tiny(true), b = tiny(true);
    CHECK(std::memcmp(a.data(), b.data(), a.bytes()) == 0);
  }
}
