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

TEST_SUITE("gpu") {
  TEST_CASE("a GGUF SentencePiece vocabulary follows its token types and add_space_prefix") {
    // Control tokens after <unk>, <s>, </s> (as Mistral's vocabulary has them), a user-defined one, the byte tokens
    // after them (not at 3..258), an unused piece, then the normal pieces.
    using type = gpu::spm_token_type;
    std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "[INST]", "<tool>"};
    std::vector<type> types = {type::unknown, type::control, type::control, type::control, type::user_defined};
    const int32_t first_byte = int32_t(pieces.size());
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      pieces.push_back(hex);
      types.push_back(type::byte);
    }
    const int32_t unused = int32_t(pieces.size());
    pieces.push_back("zz");
    types.push_back(type::unused);
    const int32_t normal = int32_t(pieces.size());
    for (const char* p : {" ", "h", "i", "z", " h", "hi", " hi"}) {
      pieces.push_back(p);
      types.push_back(type::normal);
    }
    const auto id = [&](const std::string& p) {
      return int32_t(std::find(pieces.begin() + normal, pieces.end(), p) - pieces.begin());
    };
    std::vector<float> scores(pieces.size(), 0.0f);
    scores[size_t(id(" hi"))] = 2.0f;
    scores[size_t(id("hi"))] = 1.0f;
    auto with_prefix = gpu::llama2c_tokenizer::from_pieces(pieces, scores, {types, true});
    auto without = gpu::llama2c_tokenizer::from_pieces(pieces, scores, {types, false});
    CHECK(with_prefix.encode("hi", false) == std::vector<int32_t>{id(" hi")});
    CHECK(without.encode("hi", false) == std::vector<int32_t>{id("hi")});
    // Control and user-defined tokens are matched whole; the text after each gets the leading space again.
    CHECK(with_prefix.encode("[INST]hi<tool>hi", true) ==
          std::vector<int32_t>{1, 3, id(" hi"), 4, id(" hi")});
    CHECK(without.encode("[INST]hi", false) == std::vector<int32_t>{3, id("hi")});
    // Bytes no piece covers fall back to the byte tokens where they lie; the unused piece is never matched.
    CHECK(without.encode("a", false) == std::vector<int32_t>{first_byte + 'a'});
    CHECK(without.encode("zz", false) == std::vector<int32_t>{id("z"), id("z")});
    CHECK(unused > first_byte);
    // Decoding: control tokens are no text, user-defined ones are theirs, byte tokens their byte; the leading space
    // after BOS goes only with the prefix.
    CHECK(with_prefix.decode(-1, 3).empty());
    CHECK(with_prefix.is_special(3));
    CHECK_FALSE(with_prefix.is_special(4));
    CHECK(with_prefix.decode(-1, 4) == "<tool>");
    CHECK(with_prefix.decode(-1, first_byte + 0xC3) == "\xC3");
    CHECK(with_prefix.decode(1, id(" hi")) == "hi");
    CHECK(without.decode(1, id(" hi")) == " hi");
  }
}
