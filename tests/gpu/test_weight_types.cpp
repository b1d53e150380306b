// Weight types on the cpu backend: the block layouts written and read back (and read as llama.cpp's gguf-py reads
// llama-quantize's blocks), and products with weights of every type against the reference (the weights read back
// to fp32 and, for a block type, the activations as quantized to 8 bits), at decode and batch shapes.
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/quant/blocks.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

std::vector<float> normal_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

/// n values written as `type`.
std::vector<uint8_t> stored(gpu::dtype type, const std::vector<float>& values) {
  std::vector<uint8_t> out(gpu::stored_bytes(type, values.size()));
  gpu::quantize(type, values.data(), values.size(), out.data());
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("every weight type reads back what it wrote within its precision") {
    const auto values = normal_vector(4096, 3);
    // Root-mean-square error relative to the values' own, by type.
    for (auto [type, bound] : {std::pair{gpu::dtype::f32, 0.0}, std::pair{gpu::dtype::bf16, 4e-3},
                               std::pair{gpu::dtype::f16, 5e-4}, std::pair{gpu::dtype::q8_0, 1e-2},
                               std::pair{gpu::dtype::q6_k, 3e-2}, std::pair{gpu::dtype::q5_0, 6e-2},
                               std::pair{gpu::dtype::q4_k, 1.2e-1}, std::pair{gpu::dtype::mxfp4, 1.6e-1}}) {
      std::vector<float> back(values.size());
      gpu::dequantize(type, stored(type, values).data(), values.size(), back.data());
      double error = 0, norm = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        error += (back[i] - values[i]) * double(back[i] - values[i]);
        norm += double(values[i]) * values[i];
      }
      const double relative = std::sqrt(error / norm);
      MESSAGE(std::string(gpu::to_string(type)), ": relative rms error ", relative);
      CHECK(relative <= bound);
      CHECK(gpu::parse_dtype(gpu::to_string(type)) == type);
      CHECK(gpu::parse_dtype(gpu::file_name(type)) == type);
      CHECK_FALSE(gpu::first_non_finite(type, stored(type, values).data(), values.size()));
    }
  }

  TEST_CASE("MXFP4 blocks are written and read as llama.cpp's gguf-py writes and reads them") {
    // tests/data/mxfp4_gguf_py.json: gguf-py's quantize and dequantize (tests/models/mxfp4_vectors.py).
    std::ifstream in(std::string(ILLM_TEST_DATA_DIR) + "/mxfp4_gguf_py.json");
    REQUIRE(in);
    const auto cases = nlohmann::json::parse(in);
    REQUIRE(cases.size() == 4);
    for (const auto& c : cases) {
      const auto hex = c["blocks"].get<std::string>();
      std::vector<uint8_t> blocks(hex.size() / 2);
      for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      const auto want = c["dequantized"].get<std::vector<float>>();
      REQUIRE(blocks.size() == gpu::stored_bytes(gpu::dtype::mxfp4, want.size()));
      std::vector<float> got(want.size());
      gpu::dequantize(gpu::dtype::mxfp4, blocks.data(), want.size(), got.data());
      CHECK_MESSAGE(got == want, c["name"].get<std::string>());
      if (c.contains("values")) {
        const auto values = c["values"].get<std::vector<float>>();
        CHECK_MESSAGE(stored(gpu::dtype::mxfp4, values) == blocks, c["name"].get<std::string>());
      }
    }
    std::vector<uint8_t> block(17, 0x11);
    block[0] = 255;  // E8M0's not-a-number
    CHECK(gpu::first_non_finite(gpu::dtype::mxfp4, block.data(), 32) == uint64_t(0));
  }

  TEST_CASE("a block whose scale is not finite is found") {
    auto q = stored(gpu::dtype::q4_k, normal_vector(512, 4));
    q[144] = 0x00;
    q[145] = 0x7c;  // the second block's d: f16 infinity
    const auto bad = gpu::first_non_finite(gpu::dtype::q4_k, q.data(), 512);
    REQUIRE(bad);
    CHECK(*bad >= 256);
  }

  TEST_CASE("products with weights of every type match the reference over the weights read back") {
    gpu::cpu::cpu_backend fast(2, gpu::cpu::cpu_mode::fast), reference(1, gpu::cpu::cpu_mode::reference);
    for (gpu::dtype type : gpu::all_dtypes) {
      if (type == gpu::dtype::f32) continue;
      for (auto [k, n] : {std::pair{256, 40}, std::pair{512, 3}, std::pair{768, 33}}) {
        const auto w = stored(type, normal_vector(size_t(n) * k, 7 + n, 0.05f));
        for (int m : {1, 2, 3, 4, 5, 17, 64, 65, 130}) {
          const auto x = normal_vector(size_t(m) * k, 11 + m);
          for (bool accumulate : {false, true}) {
            std::vector<float> got(size_t(m) * n, 0.5f), want(size_t(m) * n, 0.5f);
            REQUIRE(fast.gemm(x.data(), k, m, k, w.data(), type, k, n, got.data(), n, accumulate).is_ok());
            REQUIRE(reference.gemm(x.data(), k, m, k, w.data(), type, k, n, want.data(), n, accumulate).is_ok());
            double worst = 0, scale = 0;
            for (size_t i = 0; i < got.size(); ++i) {
              worst = std::max(worst, double(std::abs(got[i] - want[i])));
              scale = std::max(scale, double(std::abs(want[i])));
            }
            CHECK_MESSAGE(worst <= 1e-4 * std::max(1.0, scale), gpu::to_string(type), " m=", m, " k=", k, " n=", n,
                          " accumulate ", accumulate, ": largest difference ", worst, " of ", scale);
          }
        }
      }
    }
  }

  TEST_CASE("the embedding reads a row of a table of any type") {
    gpu::backend& device = test::cpu_device();
    const int vocab = 10, dim = 256;
    const auto table = normal_vector(size_t(vocab) * dim, 5);
    const std::vector<int32_t> tokens = {3, 0, 9, 3};
    for (gpu::dtype type : gpu::all_dtypes) {
      const auto t = stored(type, table);
      std::vector<float> out(tokens.size() * dim), row(dim);
      REQUIRE(device.embed(tokens.data(), int(tokens.size()), t.data(), type, dim, out.data(), dim).is_ok());
      for (size_t i = 0; i < tokens.size(); ++i) {
        gpu::dequantize(type, t.data() + size_t(tokens[i]) * gpu::row_bytes(type, dim), dim, row.data());
        CHECK(std::equal(row.begin(), row.end(), out.begin() + long(i * dim)));
      }
    }
  }
}

namespace {

/// A small model whose rows are whole super-blocks (256), so that every block type holds every matrix.
std::shared_ptr<const gpu::model_weights> block_sized_model() {
  const gpu::model_config c{.dim = 256, .hidden_dim = 512, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                            .vocab_size = 300, .max_seq = 256};
  static auto w = std::make_shared<const gpu::model_weights>(gpu::synthetic_weights(c, 11, false).value());
  return w;
}

std::shared_ptr<const gpu::model_weights> converted(gpu::dtype type) {
  return std::make_shared<const gpu::model_weights>(gpu::convert_weights(*block_sized_model(), type).value());
}

/// How far one run's logits are from another's.
struct logit_gap {
  double worst = 0;       ///< the largest difference of any logit
  double worst_nmse = 0;  ///< the NMSE of the worst step
  int steps_over = 0;     ///< steps with a logit more than 1e-4 apart
};

logit_gap logit_difference(const test::greedy_run& a, const test::greedy_run& b) {
  logit_gap g;
  for (size_t step = 0; step < a.logits.size(); ++step) {
    double error = 0, norm = 0, step_worst = 0;
    for (size_t i = 0; i < a.logits[step].size(); ++i) {
      const double d = double(a.logits[step][i]) - b.logits[step][i];
      step_worst = std::max(step_worst, std::abs(d));
      error += d * d;
      norm += double(b.logits[step][i]) * b.logits[step][i];
    }
    g.worst = std::max(g.worst, step_worst);
    g.worst_nmse = std::max(g.worst_nmse, error / norm);
    g.steps_over += step_worst > 1e-4;
  }
  return g;
}

const std::vector<int32_t> prompt = {1, 17, 200, 42, 99, 5, 77, 123, 256, 289, 11, 12, 13, 14, 15, 16, 17, 18, 19};

/// A small mixture of experts (4 experts, 2 a token, a shared expert) whose rows are whole super-blocks, in `type`;
/// its matrices stored in tiles where `tiles`.
std::shared_ptr<const gpu::model_weights> experts_model(gpu::dtype type, bool tiles) {
  const gpu::model_config c{.dim = 256, .hidden_dim = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                            .vocab_size = 300, .max_seq = 256, .n_experts = 4, .n_experts_used = 2,
                            .norm_topk = false, .shared_hidden_dim = 256};
  auto w = gpu::convert_weights(gpu::synthetic_weights(c, 5, false).value(), type).value();
  if (tiles) w.store_in_tiles();
  return std::make_shared<const gpu::model_weights>(std::move(w));
}

/// A small gpt-oss-shaped model in `type`: every other layer sliding over 8 positions, sink logits, YaRN, biases on
/// q, k, v, the output, the router and the experts, and the clamped gate.
std::shared_ptr<const gpu::model_weights> gpt_oss_model(gpu::dtype type) {
  gpu::model_config c{.dim = 256, .hidden_dim = 256, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                      .vocab_size = 300, .max_seq = 256, .rope_theta = 150000.0f, .qkv_bias = true,
                      .n_experts = 4, .n_experts_used = 2, .norm_topk = true, .sliding_window = 8,
                      .sliding_period = 2, .attention_sinks = true, .o_bias = true, .expert_bias = true,
                      .activation = {1.702f, 7.0f, 1.0f}};
  c.rope_scaling.scaling = gpu::rope_scaling_kind::yarn;
  c.rope_scaling.factor = 32.0f;
  c.rope_scaling.original_positions = 64;
  c.rope_scaling.truncate = false;
  auto w = gpu::convert_weights(gpu::synthetic_weights(c, 9, false).value(), type).value();
  return std::make_shared<const gpu::model_weights>(std::move(w));
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a model of every weight type gives the reference backend's ids and logits, over pools and chunks") {
    gpu::cpu::cpu_backend reference(2, gpu::cpu::cpu_mode::reference);
    for (gpu::dtype type : gpu::all_dtypes) {
      const auto weights = converted(type);
      for (auto [pools, chunk] : {std::pair{1, 512}, std::pair{3, 5}}) {
        test::greedy_options o;
        o.keep_logits = true;
        o.pools = pools;
        o.chunk = chunk;
        const auto fast = test::run_greedy(weights, prompt, 12, o);
        o.device = &reference;
        const auto slow = test::run_greedy(weights, prompt, 12, o);
        // The activations of a block-type product are rounded to 8 bits: where the two backends' fp32 sums leave
        // one at a rounding boundary, it rounds apart and the logits move by a level (3e-2 here), from that step on
        // when it happened in the prompt (its KV carries it); 16-bit and fp32 weights stay within 1e-4.
        const logit_gap gap = logit_difference(fast, slow);
        MESSAGE(std::string(gpu::to_string(type)), ", ", pools, " pool(s): logits within ", gap.worst,
                " of the reference backend's (NMSE ", gap.worst_nmse, "), ", gap.steps_over, " of 12 steps over 1e-4");
        CHECK(fast.ids == slow.ids);
        CHECK(gap.worst_nmse <= (gpu::is_block_type(type) ? 1e-3 : 1e-8));
        CHECK(gap.worst <= (gpu::is_block_type(type) ? 0.1 : 1e-4));
      }
    }
  }

  TEST_CASE("matrices stored in tiles give the file layout's ids and logits on both cpu backends") {
    gpu::cpu::cpu_backend reference(2, gpu::cpu::cpu_mode::reference);
    for (gpu::dtype type : {gpu::dtype::q8_0, gpu::dtype::q4_k}) {
      auto tiled = gpu::convert_weights(*block_sized_model(), type).value();
      const std::string sample = tiled.sampled_bytes();
      tiled.store_in_tiles();
      CHECK(tiled.sampled_bytes() == sample);  // model_identity sees the layout as loaded
      CHECK(tiled.layer(1).w2.tiled);
      CHECK_FALSE(tiled.token_embedding().tiled);  // rows the embedding looks up one at a time
      const auto tiles = std::make_shared<const gpu::model_weights>(std::move(tiled));
      // Read back through convert_weights, every weight is where the file layout has it.
      const auto back = gpu::convert_weights(*tiles, gpu::dtype::f32).value();
      const auto want = gpu::convert_weights(*converted(type), gpu::dtype::f32).value();
      CHECK(std::equal(back.data(), back.data() + back.bytes(), want.data()));
      for (gpu::backend* device : {static_cast<gpu::backend*>(nullptr), static_cast<gpu::backend*>(&reference)}) {
        test::greedy_options o;
        o.keep_logits = true;
        o.device = device;
        const auto rows = test::run_greedy(converted(type), prompt, 12, o);
        const auto tiled_run = test::run_greedy(tiles, prompt, 12, o);
        const logit_gap gap = logit_difference(tiled_run, rows);
        MESSAGE(std::string(gpu::to_string(type)), std::string(device ? " reference" : " fast"), ": tiles' logits within ",
                gap.worst, " of the file layout's (NMSE ", gap.worst_nmse, ")");
        CHECK(tiled_run.ids == rows.ids);
        // The reference reads each row back in the file's layout: the same sums. The fast kernels add in another
        // order (tiles at every batch size, where the file layout reads rows one at a time below 5 rows).
        CHECK(gap.worst <= (device ? 0.0 : 0.1));
        CHECK(gap.worst_nmse <= 1e-3);
      }
    }
  }

  TEST_CASE("a mixture of experts in block types, in rows or tiles, gives the reference backend's ids and logits") {
    gpu::cpu::cpu_backend reference(2, gpu::cpu::cpu_mode::reference);
    for (gpu::dtype type : {gpu::dtype::q8_0, gpu::dtype::q4_k}) {
      const auto rows = experts_model(type, false), tiles = experts_model(type, true);
      CHECK(tiles->layer(1).w2.tiled);  // each expert's rows whole tiles of the stack
      test::greedy_options o;
      o.keep_logits = true;
      o.pools = 3;
      o.chunk = 5;
      o.device = &reference;
      const auto slow = test::run_greedy(rows, prompt, 12, o);
      // The reference reads each expert's tiles back in the file's layout: the same sums to the bit.
      const logit_gap exact = logit_difference(test::run_greedy(tiles, prompt, 12, o), slow);
      CHECK(exact.worst == 0.0);
      o.device = nullptr;
      for (const auto& weights : {rows, tiles}) {
        const auto fast = test::run_greedy(weights, prompt, 12, o);
        const logit_gap gap = logit_difference(fast, slow);
        MESSAGE(std::string(gpu::to_string(type)), std::string(weights == tiles ? " tiles" : " rows"), ": experts' logits within ",
                gap.worst, " of the reference backend's (NMSE ", gap.worst_nmse, ")");
        CHECK(fast.ids == slow.ids);
        CHECK(gap.worst_nmse <= 1e-3);
      }
    }
  }

  TEST_CASE("gpt-oss's layers with MXFP4 weights give the reference backend's ids and logits, over pools") {
    // 19 prompt tokens and 12 more: the sliding layer's window (8) leaves most keys behind, across pools.
    gpu::cpu::cpu_backend reference(2, gpu::cpu::cpu_mode::reference);
    const auto weights = gpt_oss_model(gpu::dtype::mxfp4);
    test::greedy_options o;
    o.keep_logits = true;
    o.device = &reference;
    const auto slow = test::run_greedy(weights, prompt, 12, o);
    o.device = nullptr;
    for (auto [pools, chunk] : {std::pair{1, 512}, std::pair{3, 5}}) {
      o.pools = pools;
      o.chunk = chunk;
      const auto fast = test::run_greedy(weights, prompt, 12, o);
      const logit_gap gap = logit_difference(fast, slow);
      MESSAGE(pools, " pool(s): gpt-oss-shaped logits within ", gap.worst, " of the reference backend's (NMSE ",
              gap.worst_nmse, ")");
      CHECK(fast.ids == slow.ids);
      CHECK(gap.worst_nmse <= 1e-3);
    }
  }

  TEST_CASE("16-bit weights stay close to the fp32 model") {
    test::greedy_options o;
    o.keep_logits = true;
    const auto full = test::run_greedy(block_sized_model(), prompt, 12, o);
    for (auto [type, bound] : {std::pair{gpu::dtype::f16, 1e-5}, std::pair{gpu::dtype::bf16, 1e-3}}) {
      const auto run = test::run_greedy(converted(type), prompt, 12, o);
      const logit_gap gap = logit_difference(run, full);
      MESSAGE(std::string(gpu::to_string(type)), " weights: logits NMSE ", gap.worst_nmse, " from fp32, ids ",
              std::string(run.ids == full.ids ? "equal" : "not equal"));
      CHECK(gap.worst_nmse <= bound);
      CHECK(run.ids == full.ids);
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("16-bit KV pools give the reference backend's logits over pools and chunks, close to fp32 KV") {
    gpu::cpu::cpu_backend reference(2, gpu::cpu::cpu_mode::reference);
    test::greedy_options o;
    o.keep_logits = true;
    const auto full = test::run_greedy(block_sized_model(), prompt, 12, o);
    for (auto [kv, bound] : {std::pair{gpu::dtype::f16, 1e-5}, std::pair{gpu::dtype::bf16, 1e-3}}) {
      o.kv_type = kv;
      o.device = nullptr;
      o.pools = 1;
      o.chunk = 512;
      const auto one = test::run_greedy(block_sized_model(), prompt, 12, o);
      o.pools = 3;
      o.chunk = 5;
      const auto spread = test::run_greedy(block_sized_model(), prompt, 12, o);
      o.device = &reference;
      const auto slow = test::run_greedy(block_sized_model(), prompt, 12, o);
      const logit_gap from_full = logit_difference(one, full), from_reference = logit_difference(spread, slow);
      MESSAGE(std::string(gpu::to_string(kv)), " KV: logits NMSE ", from_full.worst_nmse, " from fp32 KV; over 3 pools within ",
              from_reference.worst, " of the reference backend's");
      CHECK(spread.ids == one.ids);
      CHECK(logit_difference(spread, one).worst <= 1e-4);
      // K and V are rounded to 16 bits as they are stored: where the two backends' fp32 sums round apart, a value
      // lands one 16-bit step away (1e-3 of it), which moves the logits by about 1e-4.
      CHECK(from_reference.worst <= 1e-3);
      CHECK(from_full.worst_nmse <= bound);
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("quantized blocks decode as llama.cpp's own gguf-py decodes llama-quantize's output, bit for bit") {
    // tests/data/gguf_py_dequantized.json: a tensor llama-quantize wrote in each type, and gguf-py's values of it
    // (tests/models/gguf_py_dequantize.py): an outside decoder of the block layouts, not this project's writer.
    std::ifstream in(std::string(ILLM_TEST_DATA_DIR) + "/gguf_py_dequantized.json");
    REQUIRE(in.good());
    const auto oracle = nlohmann::json::parse(in);
    REQUIRE(oracle["types"].size() == 4);
    for (const auto& [name, t] : oracle["types"].items()) {
      std::string lower = name;
      for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
      const auto type = gpu::parse_dtype(lower);
      REQUIRE_MESSAGE(type.has_value(), name);
      const std::string hex = t["bytes"].get<std::string>();
      std::vector<uint8_t> bytes(hex.size() / 2);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
      const auto expected = t["float32_bits"].get<std::vector<uint32_t>>();
      REQUIRE(bytes.size() == expected.size() / gpu::block_elements(*type) * gpu::block_bytes(*type));
      std::vector<float> out(expected.size());
      gpu::dequantize(*type, bytes.data(), out.size(), out.data());
      size_t same = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &out[i], 4);
        same += bits == expected[i];
      }
      MESSAGE(name, ": ", same, " of ", out.size(), " values bit for bit as gguf-py's");
      CHECK(same == out.size());
    }
  }
}
