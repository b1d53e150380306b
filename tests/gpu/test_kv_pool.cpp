// The KV pool: the block byte layout of the design, allocation until exhaustion, release errors,
// accounting that check() verifies, the layers written per block that readers of chunks wait for, and spare
// blocks (replicas) that count as free and are reclaimed, oldest first, only when the free list is empty.
#include "gpu/kv_pool.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

TEST_SUITE("gpu") {
  TEST_CASE("kv block layout is layers then K and V then kv heads then 16 tokens then head_dim") {
    const gpu::kv_layout l{6, 6, 48, gpu::dtype::f32};
    CHECK(l.head_stride() == 16 * 48);
    CHECK(l.block_elements() == 6 * 2 * 6 * 16 * 48);
    CHECK(l.block_bytes() == 6 * 2 * 6 * 16 * 48 * 4);
    CHECK(l.k_offset(0) == 0);
    CHECK(l.v_offset(0) == 6 * 16 * 48);
    CHECK(l.k_offset(1) == 2 * 6 * 16 * 48);
    CHECK(l.v_offset(5) + 6 * l.head_stride() == l.block_elements());
    const gpu::kv_layout half{32, 32, 128, gpu::dtype::f16};
    CHECK(half.block_bytes() == 32 * 2 * 32 * 16 * 128 * 2);
  }

  TEST_CASE("kv pool hands out every block once and accounts for them") {
    auto made = gpu::kv_pool::create(test::cpu_device(), {2, 2, 32, gpu::dtype::f32}, 8);
    REQUIRE(made.is_ok());
    gpu::kv_pool& pool = made.value();
    std::vector<uint32_t> got;
    for (int i = 0; i < 8; ++i) {
      auto b = pool.allocate({uint64_t(i % 2), 3});
      REQUIRE(b.is_ok());
      got.push_back(b.value());
    }
    std::sort(got.begin(), got.end());
    CHECK(std::unique(got.begin(), got.end()) == got.end());
    CHECK(pool.free_blocks() == 0);
    auto full = pool.allocate({9, 0});
    REQUIRE_FALSE(full.is_ok());
    CHECK(full.error().code() == gpu::status_code::out_of_blocks);
    CHECK(pool.blocks_of(1) == 4);
    CHECK(pool.owner(got[0]).instance == 3);
    CHECK(pool.check().is_ok());
    CHECK(pool.release(got[0]).is_ok());
    CHECK_FALSE(pool.release(got[0]).is_ok());  // already free
    CHECK_FALSE(pool.release(8).is_ok());       // outside the pool
    CHECK(pool.free_blocks() == 1);
    CHECK(pool.check().is_ok());
    for (size_t i = 1; i < got.size(); ++i) CHECK(pool.release(got[i]).is_ok());
    CHECK(pool.used_blocks() == 0);
    CHECK(pool.check().is_ok());
  }

  TEST_CASE("kv pool blocks are contiguous in one arena") {
    auto pool = gpu::kv_pool::create(test::cpu_device(), {1, 1, 16, gpu::dtype::f32}, 4).value();
    const auto* base = static_cast<const char*>(pool.base());
    CHECK(static_cast<const char*>(pool.block_data(3)) - base == 3 * 16 * 16 * 2 * 4);
    CHECK_FALSE(gpu::kv_pool::create(test::cpu_device(), {1, 1, 16, gpu::dtype::f32}, 0).is_ok());
  }

  TEST_CASE("a reserved block counts as empty until its layers are marked; an allocated one as written") {
    auto pool = gpu::kv_pool::create(test::cpu_device(), {3, 1, 16, gpu::dtype::f32}, 4).value();
    int heard = 0;
    pool.set_written_listener([&] { ++heard; });
    const uint32_t own = pool.allocate({1, 0}).value();
    CHECK(pool.layers_written(own) == 3);
    const auto reserved = pool.allocate_many({2, 5}, 2).value();
    for (uint32_t b : reserved) CHECK(pool.layers_written(b) == 0);
    pool.mark_written(reserved, 2);
    CHECK(heard == 1);
    for (uint32_t b : reserved) CHECK(pool.layers_written(b) == 2);
    pool.mark_written(reserved, 1);  // never back
    for (uint32_t b : reserved) CHECK(pool.layers_written(b) == 2);
    CHECK(pool.layers_written(4) == 0);  // outside the pool
    for (uint32_t b : reserved) REQUIRE(pool.release(b).is_ok());
    const auto again = pool.allocate_many({3, 5}, 3).value();  // a reused block starts empty again
    for (uint32_t b : again) CHECK(pool.layers_written(b) == 0);
  }

  TEST_CASE("spare blocks count as free, keep their contents until reclaimed oldest first, and stale names do nothing") {
    auto pool = gpu::kv_pool::create(test::cpu_device(), {1, 1, 16, gpu::dtype::f32}, 4).value();
    std::vector<gpu::spare_block> reclaimed;
    pool.set_reclaim_listener(gpu::spare_user::replicas, [&](const std::vector<gpu::spare_block>& r) { reclaimed.insert(reclaimed.end(), r.begin(), r.end()); });
    const auto replicas = pool.allocate_many({7, 1}, 3).value();
    const std::vector<uint32_t> older{replicas[0]}, newer{replicas[1], replicas[2]};
    const auto first = pool.make_spare(older);
    const auto second = pool.make_spare(newer);
    REQUIRE(first.size() == 1);
    REQUIRE(second.size() == 2);
    CHECK(pool.free_blocks() == 4);
    CHECK(pool.spare_blocks() == 3);
    CHECK(pool.used_blocks() == 0);
    CHECK(pool.check().is_ok());
    CHECK(pool.blocks_of(7) == 0);
    // The free block goes first; then the oldest spare one.
    const uint32_t a = pool.allocate({1, 0}).value();
    CHECK(reclaimed.empty());
    const uint32_t b = pool.allocate({1, 0}).value();
    CHECK(b == older[0]);
    REQUIRE(reclaimed.size() == 1);
    CHECK(reclaimed[0] == first[0]);
    CHECK_FALSE(pool.claim_spare(first));  // reclaimed: its name is stale
    pool.release_spare(first[0]);          // and releasing it does nothing
    CHECK(pool.is_used(b));
    CHECK(pool.check().is_ok());
    // A spare block claimed back is used by its owner again, with a stale name in the same claim: none is taken.
    CHECK_FALSE(pool.claim_spare(std::vector<gpu::spare_block>{second[0], first[0]}));
    CHECK(pool.spare_blocks() == 2);
    CHECK(pool.claim_spare(std::vector<gpu::spare_block>{second[0]}));
    CHECK(pool.owner(second[0].block).request == 7);
    CHECK(pool.spare_blocks() == 1);
    pool.release_spare(second[1]);
    CHECK(pool.spare_blocks() == 0);
    CHECK(pool.free_blocks() == 1);
    CHECK(pool.check().is_ok());
    // allocate_many reclaims too, and a block made spare again has a new name.
    const auto again = pool.make_spare(std::vector<uint32_t>{second[0].block});
    REQUIRE(again.size() == 1);
    CHECK(again[0].generation != second[0].generation);
    CHECK(pool.allocate_many({2, 0}, 2).is_ok());
    CHECK(reclaimed.back() == again[0]);
    CHECK_FALSE(pool.allocate({3, 0}).is_ok());
    for (uint32_t x : {a, b}) CHECK(pool.release(x).is_ok());
    CHECK(pool.check().is_ok());
  }
}
