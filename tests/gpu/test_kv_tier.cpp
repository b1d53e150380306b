// The KV tiers below the pools (gpu/tier): blocks demoted and promoted by key, checked on every read; the least
// recently used evicted; writes behind a bounded queue (a full queue drops, a failing medium drops, a block being
// written is never found); a disk tier found again by the same identity and started empty by another; corrupt,
// cut-short and foreign files never give a block.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "gpu/prefix_cache.hpp"
#include "gpu/tier/kv_tier.hpp"
#include "gpu/tier/tier_moves.hpp"
#include "tests/gpu/support.hpp"

using namespace illm::gpu;

namespace {

constexpr uint64_t test_block_bytes = 3000;  // not a multiple of the I/O unit: slots pad it

/// Block i's id: a chain of keys from one root, its tokens made from i.
tier_block_id block_id(int i) {
  tier_block_id id;
  for (int t = 0; t < kv_block_tokens; ++t) id.tokens[size_t(t)] = 100 * i + t;
  id.parent = root_key("tier test model", std::to_string(i));
  id.key = next_key(id.parent, id.tokens);
  return id;
}

/// Block i's bytes.
std::vector<std::byte> block_bytes_of(int i) {
  std::vector<std::byte> b(test_block_bytes);
  for (size_t j = 0; j < b.size(); ++j) b[j] = std::byte((j * 31 + size_t(i) * 7) & 0xff);
  return b;
}

/// A tier of `slots` slots of test blocks, as `--kv-tier` would give it.
tier_spec spec_of(tier_kind kind, uint32_t slots, const std::string& path = {}) {
  tier_spec s;
  s.kind = kind;
  s.path = path;
  s.bytes = tier_io_align + uint64_t(slots) * (tier_io_align + 4096);  // a 3000-byte block takes one page
  return s;
}

std::unique_ptr<kv_tier> open_tier(const tier_spec& spec, std::string_view identity = "model A f16",
                                   std::string* note = nullptr, tier_options options = {}) {
  auto t = kv_tier::open(spec, identity, test_block_bytes, options, note);
  REQUIRE_MESSAGE(t.is_ok(), t.error().message());
  return std::move(t.value());
}

bool reads_back(kv_tier& tier, int i) {
  std::vector<std::byte> out(test_block_bytes);
  return tier.promote(block_id(i).key, out) == tier_read::ok && out == block_bytes_of(i);
}

/// A fresh path in the build's temporary folder (removed with its index at the end of the scope).
struct temp_path {
  std::string path = "/tmp/illm-tier-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter());
  ~temp_path() {
    std::remove(path.c_str());
    std::remove((path + ".index").c_str());
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

/// A host-memory medium whose writes wait until released, or fail (a stalled or full disk).
class gated_medium : public tier_medium {
 public:
  explicit gated_medium(uint64_t bytes) : inner_(std::move(open_memory_medium(bytes).value())) {}
  status read_at(uint64_t offset, std::span<std::byte> out) override { return inner_->read_at(offset, out); }
  status write_at(uint64_t offset, std::span<const std::byte> in) override {
    std::unique_lock lock(mutex);
    ++writes_started;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
    if (fail) return {status_code::io_error, "no space left on the test's device"};
    return inner_->write_at(offset, in);
  }
  uint64_t size() const override { return inner_->size(); }
  bool persistent() const override { return false; }
  std::string describe() const override { return "a gated test medium"; }
  void release(bool failing) {
    const std::lock_guard lock(mutex);
    open = true;
    fail = failing;
    changed.notify_all();
  }
  void wait_writes(int n) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return writes_started >= n; });
  }
  std::mutex mutex;
  std::condition_variable changed;
  bool open = false, fail = false;
  int writes_started = 0;

 private:
  std::unique_ptr<tier_medium> inner_;
};

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("--kv-tier reads host:SIZE and disk:PATH:SIZE and names what is wrong") {
    auto host = parse_tier_spec("host:64G");
    REQUIRE(host.is_ok());
    CHECK(host->kind == tier_kind::host);
    CHECK(host->bytes == uint64_t(64) << 30);
    auto disk = parse_tier_spec("disk:/var/cache/a:b/tier:512MiB");
    REQUIRE(disk.is_ok());
    CHECK(disk->path == "/var/cache/a:b/tier");
    CHECK(disk->bytes == uint64_t(512) << 20);
    CHECK(parse_tier_spec("disk:/x:1048576")->bytes == 1048576);
    for (const char* bad : {"", "host", "host:", "host:12Q", "host:1.5G", "host:-1G", "host:1K", "tape:/x:1G",
                            "disk:1G", "disk::1G", "host:/x:1G", "host:99999999999999999T", "host:2048T"}) {
      auto r = parse_tier_spec(bad);
      CHECK_MESSAGE(!r.is_ok(), bad);
      if (!r.is_ok()) CHECK(r.error().message().find("--kv-tier") != std::string::npos);
    }
  }

  TEST_CASE("a tier gives back the blocks demoted to it, checked, and evicts the least recently used") {
    for (tier_kind kind : {tier_kind::host, tier_kind::disk}) {
      temp_path file;
      auto tier = open_tier(spec_of(kind, 4, file.path));
      CHECK(tier->stats().slots == 4);
      for (int i = 0; i < 4; ++i) CHECK(tier->demote(block_id(i), block_bytes_of(i)));
      CHECK_FALSE(tier->demote(block_id(5), std::vector<std::byte>(10)));  // not a block's size
      tier->drain();
      CHECK_FALSE(tier->demote(block_id(2), block_bytes_of(2)));  // held already
      for (int i = 0; i < 4; ++i) CHECK(reads_back(*tier, i));
      CHECK(reads_back(*tier, 0));  // block 1 is now the least recently used
      CHECK(tier->demote(block_id(4), block_bytes_of(4)));
      tier->drain();
      CHECK_FALSE(tier->holds(block_id(1).key));
      for (int i : {0, 2, 3, 4}) CHECK(reads_back(*tier, i));
      std::vector<std::byte> out(test_block_bytes);
      CHECK(tier->promote(block_id(1).key, out) == tier_read::absent);
      const tier_stats s = tier->stats();
      CHECK(s.held == 4);
      CHECK(s.written_blocks == 5);
      CHECK(s.evicted_blocks == 1);
      CHECK(s.read_blocks == 9);
      CHECK(s.corrupt_blocks == 0);
      tier_block_id id;
      CHECK(tier->holds(block_id(3).key, &id));
      CHECK(id.tokens == block_id(3).tokens);
      CHECK(id.parent == block_id(3).parent);
    }
  }

  TEST_CASE("a tier's writes wait in a bounded queue: a full queue drops, a failing medium drops, and a block being "
            "written is never found") {
    const uint64_t bytes = tier_io_align + 8 * (tier_io_align + 4096);
    auto medium = std::make_unique<gated_medium>(bytes);
    gated_medium& gate = *medium;
    tier_options options;
    options.queue_depth = 1;
    auto made = kv_tier::over(std::move(medium), "model A f16", test_block_bytes, options);
    REQUIRE(made.is_ok());
    kv_tier& tier = *made.value();
    CHECK(tier.demote(block_id(0), block_bytes_of(0)));
    gate.wait_writes(1);  // block 0 is being written: the queue is empty again
    CHECK_FALSE(tier.holds(block_id(0).key));
    std::vector<std::byte> out(test_block_bytes);
    CHECK(tier.promote(block_id(0).key, out) == tier_read::absent);
    CHECK(tier.demote(block_id(1), block_bytes_of(1)));        // waits in the queue
    CHECK_FALSE(tier.demote(block_id(2), block_bytes_of(2)));  // the queue is full: dropped
    CHECK_FALSE(tier.demote(block_id(0), block_bytes_of(0)));  // being written already
    CHECK(tier.stats().dropped_queue_full == 1);
    CHECK(tier.stats().queued == 1);
    gate.release(/*failing=*/true);
    tier.drain();
    const tier_stats s = tier.stats();
    CHECK(s.dropped_failed == 2);
    CHECK(s.held == 0);
    CHECK(s.written_blocks == 0);
    CHECK(tier.demote(block_id(3), block_bytes_of(3)));  // the failed writes gave their slots back
  }

  TEST_CASE("a disk tier's block that is corrupt or cut short is dropped, never given") {
    temp_path file;
    auto tier = open_tier(spec_of(tier_kind::disk, 4, file.path));
    for (int i = 0; i < 3; ++i) CHECK(tier->demote(block_id(i), block_bytes_of(i)));
    tier->drain();
    {  // one byte of block 1's data changed under the tier (slots are taken from 0: block 1 is in slot 1)
      std::fstream f(file.path, std::ios::in | std::ios::out | std::ios::binary);
      const std::streamoff at = std::streamoff(tier_io_align + (tier_io_align + 4096) + tier_io_align + 100);
      f.seekg(at);
      char c = 0;
      f.get(c);
      f.seekp(at);
      f.put(char(c ^ 0x10));
    }
    std::vector<std::byte> out(test_block_bytes);
    CHECK(tier->promote(block_id(1).key, out) == tier_read::corrupt);
    CHECK_FALSE(tier->holds(block_id(1).key));
    CHECK(reads_back(*tier, 0));
    REQUIRE(::truncate(file.path.c_str(), off_t(tier_io_align + (tier_io_align + 4096) * 2 + 100)) == 0);
    CHECK(tier->promote(block_id(2).key, out) == tier_read::corrupt);  // its slot was cut short
    CHECK(reads_back(*tier, 0));
    CHECK(tier->stats().corrupt_blocks == 2);
  }

  TEST_CASE("a disk tier opened again finds its blocks under the same identity, and starts empty under another") {
    temp_path file;
    const tier_spec spec = spec_of(tier_kind::disk, 6, file.path);
    {
      std::string note;
      auto tier = open_tier(spec, "model A f16", &note);
      CHECK(note.empty());  // a new file
      for (int i = 0; i < 3; ++i) CHECK(tier->demote(block_id(i), block_bytes_of(i)));
    }  // closed: the writes finished and the index written
    {
      std::string note;
      auto tier = open_tier(spec, "model A f16", &note);
      CHECK_MESSAGE(note.find("found 3 blocks") != std::string::npos, note);
      for (int i = 0; i < 3; ++i) CHECK(reads_back(*tier, i));
      CHECK(tier->demote(block_id(3), block_bytes_of(3)));
    }
    {
      std::string note;
      auto tier = open_tier(spec, "model B f16", &note);
      CHECK_MESSAGE(note.find("another model or KV type") != std::string::npos, note);
      CHECK(tier->stats().held == 0);
      std::vector<std::byte> out(test_block_bytes);
      CHECK(tier->promote(block_id(0).key, out) == tier_read::absent);
    }
    {
      std::string note;
      auto tier = open_tier(spec, "model A f16", &note);  // the file now holds model B's KV: nothing of A is read
      CHECK_MESSAGE(note.find("starting it empty") != std::string::npos, note);
      CHECK(tier->stats().held == 0);
      CHECK(tier->demote(block_id(0), block_bytes_of(0)));
    }
    std::string note;
    auto other = kv_tier::open(spec, "model A f16", test_block_bytes * 2, {}, &note);  // blocks of another size
    REQUIRE(other.is_ok());
    CHECK_MESSAGE(note.find("blocks of 3000 bytes, not 6000") != std::string::npos, note);
    CHECK(other.value()->stats().held == 0);
  }

  TEST_CASE("a disk tier never overwrites a file that is not one, and refuses a size that holds no block") {
    temp_path file;
    { std::ofstream(file.path) << "an operator's notes"; }
    auto refused = kv_tier::open(spec_of(tier_kind::disk, 4, file.path), "model A f16", test_block_bytes, {}, nullptr);
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.error().message().find("not a KV tier file") != std::string::npos);
    std::ifstream in(file.path);
    std::string kept;
    std::getline(in, kept);
    CHECK(kept == "an operator's notes");
    tier_spec tiny = spec_of(tier_kind::host, 1);
    tiny.bytes = tier_io_align * 2;
    CHECK_FALSE(kv_tier::open(tiny, "model A f16", test_block_bytes, {}, nullptr).is_ok());
  }

  TEST_CASE("demotion writes down the cache's oldest spare blocks, never replicas, and a block reclaimed is not read") {
    auto made = kv_pool::create(illm::test::cpu_device(), {1, 1, 8, dtype::f32}, 8);  // blocks of 1024 bytes
    REQUIRE(made.is_ok());
    auto pool = std::make_shared<kv_pool>(std::move(made.value()));
    auto cache = prefix_cache::over(pool, 7);
    const block_key root = root_key("model f32 f32", "");
    std::vector<int32_t> tokens(4 * kv_block_tokens);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i + 5);
    const std::vector<block_key> keys = chain_keys(root, tokens, 4);
    std::vector<uint32_t> blocks;
    for (size_t i = 0; i < keys.size(); ++i) {  // a request computes four blocks, each filled with its index
      const uint32_t b = pool->allocate({1, 7}).value();
      std::vector<float> contents(256, float(i + 1));
      std::memcpy(pool->block_data(b), contents.data(), 1024);
      REQUIRE(cache->offer(keys[i], i ? keys[i - 1] : root,
                           std::span(tokens).subspan(i * kv_block_tokens, kv_block_tokens), b));
      blocks.push_back(b);
    }
    for (uint32_t b : blocks) CHECK(cache->release(b));  // spare now, the cache's
    const uint32_t replica = pool->allocate({2, 9}).value();
    (void)pool->make_spare(std::span(&replica, 1), spare_user::replicas);

    tier_spec spec;
    spec.bytes = tier_io_align + 8 * 2 * tier_io_align;
    auto tier = kv_tier::open(spec, "model f32 f32", 1024, {}, nullptr);
    REQUIRE(tier.is_ok());
    const demotion_pass first = demote_oldest_spare(*cache, *pool, *tier.value(), 16);
    CHECK(first.demoted == 4);
    CHECK(first.reclaimed == 0);
    tier.value()->drain();
    CHECK(tier.value()->stats().held == 4);  // the replica stays above
    for (size_t i = 0; i < keys.size(); ++i) {
      tier_block_id id;
      REQUIRE(tier.value()->holds(keys[i], &id));
      CHECK(id.parent == (i ? keys[i - 1] : root));
      std::vector<std::byte> out(1024);
      REQUIRE(tier.value()->promote(keys[i], out) == tier_read::ok);
      float first_value = 0;
      std::memcpy(&first_value, out.data(), sizeof first_value);
      CHECK(first_value == float(i + 1));
    }
    CHECK(demote_oldest_spare(*cache, *pool, *tier.value(), 16).held == 4);

    const std::vector<spare_entry> oldest = cache->oldest_spare(1);
    REQUIRE(oldest.size() == 1);
    CHECK(oldest.front().key == keys[0]);
    for (int i = 0; i < 4; ++i) (void)pool->allocate({3, 7}).value();  // the free list, then the oldest spare block
    std::vector<std::byte> out(1024);
    CHECK_FALSE(pool->copy_spare(oldest.front().name, out));  // reclaimed: its name is stale
    CHECK(pool->check().is_ok());
  }
}
