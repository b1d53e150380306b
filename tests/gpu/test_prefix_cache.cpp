// The prefix cache: keys that name whole prefixes, hits checked against tokens, readers counted, blocks no one
// reads kept as spare (free to allocation) and evicted least recently released when the pool runs out, and a
// flush that frees them.
#include <numeric>

#include "gpu/batcher.hpp"
#include "gpu/prefix_cache.hpp"
#include "gpu/tier/kv_tier.hpp"
#include "gpu/tier/tier_moves.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

std::vector<int32_t> tokens_from(int32_t first, size_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

/// The chain of keys of `tokens`' full blocks.
std::vector<gpu::block_key> chain(const gpu::block_key& root, const std::vector<int32_t>& tokens) {
  return gpu::chain_keys(root, tokens, tokens.size());
}

struct fixture {
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<gpu::prefix_cache> cache;
  gpu::block_key root = gpu::root_key("model f32 f32", "");

  explicit fixture(uint32_t blocks) {
    auto made = gpu::kv_pool::create(test::cpu_device(), {1, 1, 8, gpu::dtype::f32}, blocks);
    REQUIRE(made.is_ok());
    pool = std::make_shared<gpu::kv_pool>(std::move(made.value()));
    cache = gpu::prefix_cache::over(pool, 7);
  }

  /// A request computes `tokens` into fresh blocks and offers them all; returns the blocks.
  std::vector<uint32_t> compute(uint64_t request, const std::vector<int32_t>& tokens) {
    const auto keys = chain(root, tokens);
    std::vector<uint32_t> blocks;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto b = pool->allocate({request, 7});
      REQUIRE(b.is_ok());
      blocks.push_back(b.value());
      CHECK(cache->offer(keys[i], i ? keys[i - 1] : root,
                         std::span(tokens).subspan(i * gpu::kv_block_tokens, gpu::kv_block_tokens), b.value()));
    }
    return blocks;
  }

  void release(const std::vector<uint32_t>& blocks) {
    for (uint32_t b : blocks)
      if (!cache->release(b)) REQUIRE(pool->release(b).is_ok());
  }
};

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("a block key names its whole prefix, its model and its namespace") {
    const auto a = tokens_from(1, 32), b = tokens_from(2, 32);
    const gpu::block_key root = gpu::root_key("m", "");
    CHECK(chain(root, a) == chain(root, a));
    CHECK(chain(root, a)[0] != chain(root, b)[0]);
    auto c = a;
    c[3] = 99;  // the first block differs: so does the second block's key, though its tokens are equal
    CHECK(chain(root, c)[1] != chain(root, a)[1]);
    CHECK(chain(gpu::root_key("m", "tenant"), a)[0] != chain(root, a)[0]);
    CHECK(gpu::root_key("ab", "c") != gpu::root_key("a", "bc"));
    CHECK(gpu::cache_namespace("k", "") == "k");
    CHECK(gpu::cache_namespace("a", "b") != gpu::cache_namespace("", "ab"));
    CHECK(gpu::cache_namespace("a", "b") != gpu::cache_namespace("ab", ""));
  }

  TEST_CASE("a block key is SHA-256 over its parent's key and its tokens (Python's hashlib gives the same words)") {
    // hashlib.sha256(b"illm prefix root" + pack("<Q", 1) + b"m" + pack("<Q", 0)), read as four little-endian words;
    // then the first block of tokens 1..16: sha256(root + pack("<Q", 16) + pack("<16i", *range(1, 17))).
    const gpu::block_key root = gpu::root_key("m", "");
    CHECK(root.words == std::array<uint64_t, 4>{0xa523a568eec2e34bull, 0x56af7fae5620acaaull, 0xede6d27db0d43b51ull,
                                                0x3c50fff126d47a2aull});
    CHECK(chain(root, tokens_from(1, 16))[0].words ==
          std::array<uint64_t, 4>{0xaece5f2cbdb0fae1ull, 0x50f39c0ef2ba4f5aull, 0x1be292fb34fa91ecull,
                                  0xe3896746ce8b8eadull});
  }

  TEST_CASE("prefix cache: a second request attaches the longest cached prefix, readers counted") {
    fixture f(16);
    const auto prompt = tokens_from(100, 48);
    const auto first = f.compute(1, prompt);
    CHECK(f.pool->owner(first[0]).request == gpu::prefix_cache_request);
    auto other = prompt;
    other[40] = 5;  // the third block differs
    const auto keys = chain(f.root, other);
    const auto hit = f.cache->attach(f.root, keys, other);
    CHECK(hit == std::vector<uint32_t>{first[0], first[1]});
    auto stats = f.cache->stats();
    CHECK(stats.queried_tokens == 48);
    CHECK(stats.hit_tokens == 32);
    CHECK(stats.shared_blocks == 2);
    f.release(first);
    CHECK(f.pool->used_blocks() == 2);  // still read by the second request
    f.release(hit);
    CHECK(f.pool->used_blocks() == 0);  // kept as spare: free to allocation
    CHECK(f.pool->spare_blocks() == 3);
    CHECK(f.cache->stats().cached_blocks == 3);
    CHECK(f.cache->attach(f.root, chain(f.root, prompt), prompt).size() == 3);  // claimed back from spare
    CHECK(f.pool->check().is_ok());
  }

  TEST_CASE("prefix cache: the cached blocks of a prompt that requests read now (they take no memory more)") {
    fixture f(16);
    const auto prompt = tokens_from(100, 48);
    const auto first = f.compute(1, prompt);                      // three blocks, read by their request
    auto longer = tokens_from(100, 60);                           // their 48 tokens and 12 more
    CHECK(f.cache->read_prefix_blocks(f.root, longer) == 3);
    CHECK(f.cache->read_prefix_blocks(f.root, prompt) == 2);      // the last token's block is computed
    auto forged = longer;
    forged[20] = 7;                                               // the second block differs: only the first
    CHECK(f.cache->read_prefix_blocks(f.root, forged) == 1);
    CHECK(f.cache->read_prefix_blocks(gpu::root_key("other", ""), longer) == 0);
    f.release(first);                                             // spare now: free memory, not read
    CHECK(f.cache->read_prefix_blocks(f.root, longer) == 0);
    CHECK(f.cache->attach(f.root, chain(f.root, prompt), prompt).size() == 3);
    CHECK(f.cache->read_prefix_blocks(f.root, longer) == 3);
  }

  TEST_CASE("prefix cache: a hit is checked against the tokens and the parent, not the key alone") {
    fixture f(8);
    const auto prompt = tokens_from(0, 32);
    f.compute(1, prompt);
    auto keys = chain(f.root, prompt);
    auto forged = prompt;
    forged[20] = 77;  // same keys given, other tokens: as a key collision would be
    CHECK(f.cache->attach(f.root, keys, forged).size() == 1);
    CHECK(f.cache->attach(gpu::root_key("other model", ""), keys, prompt).empty());
  }

  TEST_CASE("prefix cache: blocks no one reads are evicted least recently released, only when memory is needed") {
    fixture f(4);
    const auto a = tokens_from(0, 32), b = tokens_from(1000, 32);
    const auto blocks_a = f.compute(1, a), blocks_b = f.compute(2, b);
    f.release(blocks_a);
    f.release(blocks_b);
    CHECK(f.pool->free_blocks() == 4);
    auto taken = f.pool->allocate({3, 7});  // the free list is empty: a's first block, released first, goes
    REQUIRE(taken.is_ok());
    CHECK(taken.value() == blocks_a[0]);
    CHECK(f.cache->stats().evicted_blocks == 1);
    CHECK(f.cache->attach(f.root, chain(f.root, a), a).empty());  // its chain starts with the lost block
    const auto hit_b = f.cache->attach(f.root, chain(f.root, b), b);
    CHECK(hit_b.size() == 2);
    // a block the cache lost and a request now owns is that request's to release
    CHECK_FALSE(f.cache->release(taken.value()));
    CHECK(f.pool->release(taken.value()).is_ok());
    f.release(hit_b);
    CHECK(f.pool->check().is_ok());
  }

  TEST_CASE("prefix cache: an equal block offered twice stays its offerer's, and a flush frees what no one reads") {
    fixture f(8);
    const auto prompt = tokens_from(0, 16);
    const auto first = f.compute(1, prompt);
    auto second = f.pool->allocate({2, 7});
    REQUIRE(second.is_ok());
    CHECK_FALSE(f.cache->offer(chain(f.root, prompt)[0], f.root, prompt, second.value()));
    CHECK(f.pool->owner(second.value()).request == 2);
    CHECK(f.pool->release(second.value()).is_ok());
    const auto other = f.compute(3, tokens_from(500, 16));
    f.release(other);  // cached, read by none: spare
    const auto reader = f.cache->attach(f.root, chain(f.root, prompt), prompt);
    f.release(first);
    CHECK(f.cache->flush() == 1);  // the spare one freed now; the one still read is forgotten
    CHECK(f.cache->stats().cached_blocks == 0);
    CHECK(f.cache->attach(f.root, chain(f.root, prompt), prompt).empty());
    CHECK(f.pool->used_blocks() == 1);
    f.release(reader);  // its last reader ends: freed
    CHECK(f.pool->spare_blocks() == 0);
    CHECK(f.pool->free_blocks() == 8);
    CHECK(f.pool->check().is_ok());
  }

  TEST_CASE("prefix cache: a block the cache has already, read or forgotten, is never offered as another") {
    fixture f(8);
    const auto prompt = tokens_from(0, 16), other = tokens_from(900, 16);
    const auto first = f.compute(1, prompt);
    const auto read = f.cache->attach(f.root, chain(f.root, prompt), prompt);  // two readers now
    CHECK_FALSE(f.cache->offer(chain(f.root, other)[0], f.root, other, first[0]));
    f.release(first);
    CHECK(f.cache->flush() == 0);  // read: forgotten, not freed
    CHECK_FALSE(f.cache->offer(chain(f.root, other)[0], f.root, other, read[0]));
    f.release(read);
    CHECK(f.pool->free_blocks() == 8);
    CHECK(f.pool->check().is_ok());
  }

  TEST_CASE("the full blocks of a sequence that other pools hold are keyed as its own pool's would be") {
    gpu::sequence seq;
    seq.tokens = tokens_from(0, 4 * 16 + 5);
    seq.n_cached = 4 * 16 + 3;
    seq.cache_scope = "tenant";
    seq.table = {{0, 10}, {1, 20}, {gpu::block_ref::no_pool, 0}, {2, 30}, {1, 21}};
    const gpu::block_key model_root = gpu::root_key("model f32 f32", "");
    const auto keys = gpu::chain_keys(gpu::scoped_root(model_root, "tenant"), seq.tokens, 4);
    const auto kept = gpu::keyed_blocks_elsewhere(model_root, 0, seq);
    REQUIRE(kept.size() == 2);  // not pool 0's, not the lost one, not the last block (not full)
    CHECK((kept[0].pool == 1 && kept[0].block == 20 && kept[0].index == 1));
    CHECK((kept[1].pool == 2 && kept[1].block == 30 && kept[1].index == 3));
    CHECK(kept[0].key == keys[1]);
    CHECK(kept[0].parent == keys[0]);
    CHECK(kept[1].key == keys[3]);
    CHECK(kept[1].tokens == std::vector<int32_t>(seq.tokens.begin() + 48, seq.tokens.begin() + 64));
    CHECK(gpu::well_keyed(kept[1]));
    gpu::keyed_block forged = kept[1];
    forged.tokens[0] += 1;
    CHECK_FALSE(gpu::well_keyed(forged));
    seq.table = {{0, 10}, {0, 11}, {0, 12}, {0, 13}, {0, 14}};
    CHECK(gpu::keyed_blocks_elsewhere(model_root, 0, seq).empty());
  }
}

namespace {

/// One pool whose full blocks a prefix cache keeps, as an instance's blocks are (actors/instance).
class cached_source final : public gpu::block_source {
 public:
  cached_source(std::shared_ptr<gpu::kv_pool> pool, std::shared_ptr<gpu::prefix_cache> cache)
      : pool_(std::move(pool)), cache_(std::move(cache)) {}
  gpu::result<gpu::block_ref> allocate(const gpu::sequence& seq, uint32_t) override {
    auto block = pool_->allocate({seq.id, 0});
    if (!block.is_ok()) return block.error();
    return gpu::block_ref{0, block.value()};
  }
  gpu::status release(const gpu::block_ref& ref) override {
    return cache_ && cache_->release(ref.block) ? gpu::status::ok() : pool_->release(ref.block);
  }
  int attach_prefix(gpu::sequence& seq) override {
    if (!cache_) return 0;
    const int found = gpu::attach_cached_prefix(*cache_, root, 0, seq);
    return found + (tier ? gpu::promote_tier_prefix(*cache_, *pool_, *tier, root, 0, 0, seq) : 0);
  }
  void blocks_computed(gpu::sequence& seq) override {
    if (cache_) gpu::offer_computed_blocks(*cache_, root, 0, seq);
  }
  gpu::block_key root = gpu::root_key("stories15M", "");
  gpu::kv_tier* tier = nullptr;  ///< the tier below the pool, when there is one

 private:
  std::shared_ptr<gpu::kv_pool> pool_;
  std::shared_ptr<gpu::prefix_cache> cache_;
};

/// The real model's engine (64-token steps) over one pool of `blocks`, with a prefix cache or none.
struct cached_rig {
  cached_rig(uint32_t blocks, bool cached)
      : eng(gpu::engine::create(test::real_model().weights, test::cpu_device(), {64, 4}).value()),
        pool(std::make_shared<gpu::kv_pool>(
            gpu::kv_pool::create(test::cpu_device(), eng->pool_layout(), blocks).value())),
        cache(cached ? gpu::prefix_cache::over(pool, 0) : nullptr),
        source(pool, cache),
        steps(*eng, source, {64, 4}) {}

  /// Runs `prompts` greedily (12 new tokens each), all queued at once, to the end; their sequences.
  std::vector<std::shared_ptr<gpu::sequence>> run(const std::vector<std::vector<int32_t>>& prompts) {
    std::vector<std::shared_ptr<gpu::sequence>> seqs;
    for (const auto& p : prompts) {
      auto s = std::make_shared<gpu::sequence>();
      s->id = ++next_id;
      s->tokens = p;
      s->n_prompt = int(p.size());
      s->max_new_tokens = 12;
      s->ignore_eos = true;
      steps.add(s);
      seqs.push_back(s);
    }
    const gpu::kv_pools view{{pool.get()}, 0};
    while (!steps.idle()) REQUIRE(steps.step(view, nullptr).is_ok());
    (void)steps.take_finished();
    return seqs;
  }

  std::unique_ptr<gpu::engine> eng;
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<gpu::prefix_cache> cache;
  cached_source source;
  gpu::batcher steps;
  uint64_t next_id = 0;
};

std::vector<int32_t> generated(const gpu::sequence& s) {
  return {s.tokens.begin() + s.n_prompt, s.tokens.end()};
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("prefix cache on the real model: requests that share a prefix give the ids they give without it") {
    const auto golden_prompt = test::golden()["cases"][6]["prompt_token_ids"].get<std::vector<int32_t>>();  // 604
    std::vector<int32_t> branch(golden_prompt.begin(), golden_prompt.begin() + 300);  // 18 full blocks shared
    for (int32_t t : {450, 11203, 471, 263, 2217, 29889}) branch.push_back(t);
    cached_rig plain(128, false);
    const auto expected = plain.run({golden_prompt, branch});

    cached_rig rig(128, true);
    const auto first = rig.run({golden_prompt});
    CHECK(generated(*first[0]) == generated(*expected[0]));
    CHECK(first[0]->cached_prompt_tokens == 0);
    // The same prompt again, and one that branches off it, side by side: both start on the cached blocks.
    const auto again = rig.run({golden_prompt, branch});
    CHECK(again[0]->cached_prompt_tokens == 37 * 16);  // all its full blocks but the one its last token is in
    CHECK(again[1]->cached_prompt_tokens == 18 * 16);
    CHECK(generated(*again[0]) == generated(*expected[0]));
    CHECK(generated(*again[1]) == generated(*expected[1]));
    const auto stats = rig.cache->stats();
    CHECK(stats.hit_tokens == (37 + 18) * 16);
    CHECK(stats.read_blocks == 0);  // every request ended: nothing is read, everything cached is spare
    CHECK(rig.pool->used_blocks() == 0);
    CHECK(rig.pool->check().is_ok());
    CHECK(rig.cache->flush() == stats.cached_blocks);
    CHECK(rig.pool->spare_blocks() == 0);
  }

  TEST_CASE("prefix cache under memory pressure: cached blocks give way to running requests, ids unchanged") {
    const auto golden_prompt = test::golden()["cases"][6]["prompt_token_ids"].get<std::vector<int32_t>>();  // 604
    std::vector<int32_t> other(golden_prompt.rbegin(), golden_prompt.rend());  // no block in common
    cached_rig plain(48, false);
    const auto expected = plain.run({other});
    cached_rig rig(48, true);  // 48 blocks: one 604-token request at a time, with its 12 new tokens
    rig.run({golden_prompt});
    CHECK(rig.cache->stats().cached_blocks == 38);
    const auto second = rig.run({other});  // needs 38 blocks: reclaims the cached ones, oldest first
    CHECK(generated(*second[0]) == generated(*expected[0]));
    CHECK(second[0]->cached_prompt_tokens == 0);
    CHECK(rig.cache->stats().evicted_blocks > 0);
    CHECK(rig.pool->used_blocks() == 0);
    CHECK(rig.pool->check().is_ok());
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("a tier below the pool: cached blocks written down before they are reclaimed are read back, ids unchanged") {
    const auto golden_prompt = test::golden()["cases"][6]["prompt_token_ids"].get<std::vector<int32_t>>();  // 604
    std::vector<int32_t> other(golden_prompt.rbegin(), golden_prompt.rend());  // no block in common
    cached_rig plain(48, false);
    const auto expected = plain.run({golden_prompt});
    cached_rig rig(48, true);  // one 604-token request at a time: the next one reclaims the cached blocks
    const uint64_t block_bytes = rig.pool->layout().block_bytes();
    gpu::tier_spec spec;
    spec.bytes = gpu::tier_io_align + 48 * (gpu::tier_io_align + (block_bytes + 4095) / 4096 * 4096);
    gpu::tier_options options;
    options.queue_depth = 64;  // every cached block queued at once (the default depth would drop some)
    auto tier = gpu::kv_tier::open(spec, "stories15M f32", block_bytes, options, nullptr);
    REQUIRE(tier.is_ok());
    rig.source.tier = tier.value().get();
    rig.run({golden_prompt});
    const gpu::demotion_pass pass = gpu::demote_oldest_spare(*rig.cache, *rig.pool, *tier.value(), 64);
    CHECK(pass.demoted == rig.cache->stats().cached_blocks);
    CHECK(pass.demoted >= 37);
    tier.value()->drain();
    rig.run({other});  // reclaims the cached blocks of the first prompt, oldest first: its first block is gone
    CHECK(rig.cache->stats().evicted_blocks >= 29);
    const auto first_keys = gpu::chain_keys(gpu::scoped_root(rig.source.root, ""), golden_prompt, 1);
    CHECK(rig.cache->match(gpu::scoped_root(rig.source.root, ""), first_keys, golden_prompt) == 0);
    const auto again = rig.run({golden_prompt});
    CHECK(again[0]->cached_prompt_tokens == 37 * 16);  // from the tier, where the pool lost them
    CHECK(generated(*again[0]) == generated(*expected[0]));
    CHECK(tier.value()->stats().read_blocks >= 30);
    CHECK(tier.value()->stats().corrupt_blocks == 0);
    CHECK(rig.pool->used_blocks() == 0);
    CHECK(rig.pool->check().is_ok());
  }

  TEST_CASE("a tier read pays when it costs less than computing the block's tokens") {
    gpu::tier_stats s;
    const uint64_t block = 2 << 20;  // 2 MiB: an 8B model's f16 block
    CHECK(gpu::tier_read_pays(s, block, 10e9, 1000));       // 0.2 ms against 16 ms
    CHECK_FALSE(gpu::tier_read_pays(s, block, 100e6, 10000));  // 21 ms against 1.6 ms
    s.read_blocks = 8;
    s.read_bytes = 8 * block;
    s.read_seconds = 8 * 0.05;  // measured: 50 ms a block
    CHECK_FALSE(gpu::tier_read_pays(s, block, 10e9, 1000));  // the measured rate wins over the assumed one
  }

  TEST_CASE("prefix cache namespaces: a request reads only the blocks of its own namespace") {
    const auto prompt = test::golden()["cases"][6]["prompt_token_ids"].get<std::vector<int32_t>>();  // 604 tokens
    cached_rig rig(128, true);
    auto scoped = [&](const std::string& scope) {
      auto s = std::make_shared<gpu::sequence>();
      s->id = ++rig.next_id;
      s->tokens = prompt;
      s->n_prompt = int(prompt.size());
      s->max_new_tokens = 4;
      s->ignore_eos = true;
      s->cache_scope = scope;
      rig.steps.add(s);
      const gpu::kv_pools view{{rig.pool.get()}, 0};
      while (!rig.steps.idle()) REQUIRE(rig.steps.step(view, nullptr).is_ok());
      (void)rig.steps.take_finished();
      return s->cached_prompt_tokens;
    };
    CHECK(scoped("tenant a") == 0);
    CHECK(scoped("tenant b") == 0);   // the same prompt, another namespace: nothing to read
    CHECK(scoped("tenant a") == 37 * 16);
    CHECK(scoped("") == 0);           // the shared namespace is one more
    CHECK(rig.pool->check().is_ok());
  }
}
