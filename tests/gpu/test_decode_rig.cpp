// The decode rig behind `illm bench migration`: its model's KV block is at least 2 MiB, a prefilled
// batch decodes one token per sequence per step, and the full blocks it lists are never written again.
#include <cstring>
#include <vector>

#include "gpu/bench/decode_rig.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

/// The bytes of `blocks` in the rig's pool, one after another.
std::vector<char> block_bytes_of(const gpu::decode_rig& rig, const std::vector<uint32_t>& blocks) {
  std::vector<char> out(blocks.size() * rig.block_bytes());
  for (size_t i = 0; i < blocks.size(); ++i)
    std::memcpy(out.data() + i * rig.block_bytes(), rig.pool().block_data(blocks[i]), rig.block_bytes());
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("decode rig: the migration model is valid and its fp32 KV block is at least 2 MiB") {
    const gpu::model_config c = gpu::migration_bench_config();
    CHECK(c.validate().is_ok());
    const gpu::kv_layout layout{c.n_layers, c.n_kv_heads, c.head_dim(), gpu::dtype::f32};
    CHECK(layout.block_bytes() >= uint64_t(2) << 20);
  }

  TEST_CASE("decode rig: a prefilled batch decodes one token each per step and its full blocks stay as they are") {
    auto preset = gpu::preset_config("tiny");
    REQUIRE(preset.is_ok());
    gpu::decode_rig_options o;
    o.config = preset.value();
    o.threads = 1;
    o.batch = 3;
    o.context_tokens = 33;  // two full blocks each, and one token of a third
    o.decode_steps = 40;
    auto made = gpu::decode_rig::create(o);
    REQUIRE_MESSAGE(made.is_ok(), made.error().message());
    gpu::decode_rig& rig = *made.value();
    REQUIRE(rig.prefill().is_ok());
    const std::vector<uint32_t> full = rig.full_blocks();
    CHECK(full.size() == 6);
    const std::vector<char> before = block_bytes_of(rig, full);
    for (int i = 0; i < o.decode_steps; ++i) {
      auto decoded = rig.step();
      REQUIRE(decoded.is_ok());
      CHECK(decoded.value() == o.batch);
    }
    // 33 + 40 tokens cached (the last sampled one is not yet): 4 full blocks each.
    CHECK(rig.full_blocks().size() == 12);
    CHECK(block_bytes_of(rig, full) == before);
    CHECK(rig.check().is_ok());
  }

  TEST_CASE("decode rig: bad options are refused") {
    gpu::decode_rig_options o;
    o.batch = 0;
    CHECK(!gpu::decode_rig::create(o).is_ok());
  }
}
