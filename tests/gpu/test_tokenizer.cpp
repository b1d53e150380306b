// The tokenizer against the outside oracle: every golden prompt encodes to the golden ids, a ","
// is 29892 (not the byte token 47), and byte tokens decode to single bytes.
#include <cstdio>
#include <filesystem>

#include "gpu/model_files.hpp"
#include "gpu/tokenizers/llama2c_tokenizer.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

TEST_SUITE("gpu") {
  TEST_CASE("tokenizer encodes every golden prompt to the golden ids") {
    const auto& vocab = *test::real_model().vocab;
    for (const auto& c : test::golden()["cases"]) {
      const auto ids = vocab.encode(c["prompt"].get<std::string>(), true);
      CHECK_MESSAGE(ids == c["prompt_token_ids"].get<std::vector<int32_t>>(), c["prompt"].get<std::string>());
    }
  }

  TEST_CASE("tokenizer prefers pieces to the byte tokens that repeat them") {
    const auto& vocab = *test::real_model().vocab;
    const auto ids = vocab.encode("day, a", false);
    CHECK(std::find(ids.begin(), ids.end(), 29892) != ids.end());
    CHECK(std::find(ids.begin(), ids.end(), 47) == ids.end());  // the byte token that spells "," too
  }

  TEST_CASE("tokenizer falls back to bytes and decodes them as single bytes") {
    const auto& vocab = *test::real_model().vocab;
    const std::string text = "a\x01z";
    const auto ids = vocab.encode(text, false);
    CHECK(std::find(ids.begin(), ids.end(), 0x01 + 3) != ids.end());
    CHECK(vocab.decode(ids, 0) == " " + text);
    // Ids 131..258 are stored as UTF-8 of U+0080..U+00FF but stand for the single byte id - 3.
    CHECK(vocab.decode(0, 0xe9 + 3) == std::string(1, char(0xe9)));
    const std::string accented = "caf\xc3\xa9 \xe2\x82\xac";  // "café €"
    CHECK(vocab.decode(vocab.encode(accented, false), 0) == " " + accented);
  }

  TEST_CASE("tokenizer decodes the golden continuations") {
    const auto& vocab = *test::real_model().vocab;
    const auto& c = test::golden()["cases"][0];
    const auto ids = c["output_token_ids"].get<std::vector<int32_t>>();
    CHECK(vocab.decode(ids, c["prompt_token_ids"].back().get<int32_t>()) == c["output_text"].get<std::string>());
    CHECK(vocab.decode(gpu::token_bos, 9038) == "Once");  // a piece after BOS loses its space
  }

  TEST_CASE("tokenizer rejects truncated and oversized files") {
    const auto paths = gpu::resolve_model("stories15M");
    REQUIRE(paths.is_ok());
    const auto size = std::filesystem::file_size(paths->tokenizer);
    const std::string cut = std::filesystem::temp_directory_path() / "illm_tokenizer_cut.bin";
    std::filesystem::copy_file(paths->tokenizer, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, size - 3);
    auto truncated = gpu::llama2c_tokenizer::load(cut, 32000);
    REQUIRE_FALSE(truncated.is_ok());
    CHECK(truncated.error().message().find("truncated") != std::string::npos);
    std::filesystem::resize_file(cut, size + 5);
    auto oversized = gpu::llama2c_tokenizer::load(cut, 32000);
    REQUIRE_FALSE(oversized.is_ok());
    CHECK(oversized.error().message().find("oversized") != std::string::npos);
    CHECK_FALSE(gpu::llama2c_tokenizer::load("/nonexistent/tokenizer.bin", 32000).is_ok());
    std::filesystem::remove(cut);
  }

  TEST_CASE("tokenizer without byte pieces encodes unknown characters as <unk>, and needs room for its specials") {
    // A tokenizer.bin of six pieces: max length, then per piece its score, length and bytes.
    const std::string path = std::filesystem::temp_directory_path() / "illm_tokenizer_small.bin";
    auto write_vocab = [&](const std::vector<std::string>& pieces) {
      std::FILE* f = std::fopen(path.c_str(), "wb");
      REQUIRE(f);
      const int32_t max_length = 8;
      std::fwrite(&max_length, sizeof max_length, 1, f);
      for (const std::string& p : pieces) {
        const float score = 0;
        const int32_t length = int32_t(p.size());
        std::fwrite(&score, sizeof score, 1, f);
        std::fwrite(&length, sizeof length, 1, f);
        std::fwrite(p.data(), 1, p.size(), f);
      }
      std::fclose(f);
    };
    write_vocab({"<unk>", "<s>", "</s>", " ", "a", " a"});
    auto small = gpu::llama2c_tokenizer::load(path, 6);
    REQUIRE(small.is_ok());
    const auto ids = small->encode("a\x01a", true);
    for (int32_t id : ids) CHECK(id < 6);
    CHECK(std::find(ids.begin(), ids.end(), 0) != ids.end());  // \x01 has no piece and no byte piece
    write_vocab({"<unk>", "<s>"});
    auto tiny = gpu::llama2c_tokenizer::load(path, 2);
    REQUIRE_FALSE(tiny.is_ok());
    CHECK(tiny.error().message().find("no room") != std::string::npos);
    std::filesystem::remove(path);
  }
}
