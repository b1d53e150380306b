// The engine's batching and distribution rules: chunked prefill, continuous batching of several
// sequences and K pools all give the ids of one sequence alone in one pool (real model and a synthetic
// GQA model), dropping one pool's partial changes the output (the partials are really used), and
// generation stops where it should.
#include <array>
#include <cmath>
#include <cstring>

#include "gpu/batcher.hpp"
#include "gpu/generate.hpp"
#include "gpu/pool_router.hpp"
#include "tests/gpu/support.hpp"

using namespace illm;

namespace {

/// Drops the partials of one pool: as if its holder had answered "no keys".
class dropping_router final : public gpu::attention_router {
 public:
  dropping_router(gpu::attention_router& inner, uint32_t dropped, int n_heads, int& dropped_jobs)
      : inner_(inner), dropped_(dropped), n_heads_(n_heads), dropped_jobs_(dropped_jobs) {}
  gpu::status begin(int lane, std::span<const gpu::remote_attention_job> jobs) override {
    jobs_[size_t(lane)].assign(jobs.begin(), jobs.end());
    return inner_.begin(lane, jobs);
  }
  gpu::status finish(int lane) override {
    ILLM_RETURN_IF_ERROR(inner_.finish(lane));
    for (const auto& job : jobs_[size_t(lane)])
      if (job.holder == dropped_) {
        ++dropped_jobs_;
        std::fill(job.e, job.e + size_t(job.n_q) * n_heads_, 0.0f);
      }
    return gpu::status::ok();
  }
  void cancel() override { inner_.cancel(); }

 private:
  gpu::attention_router& inner_;
  uint32_t dropped_;
  int n_heads_;
  int& dropped_jobs_;
  std::array<std::vector<gpu::remote_attention_job>, gpu::attention_router::lanes> jobs_;
};

/// Rounds of remote jobs begun, per lane.
using lane_rounds = std::array<int, gpu::attention_router::lanes>;

/// Counts the rounds begun per lane, and passes them on.
class lane_counting_router final : public gpu::attention_router {
 public:
  lane_counting_router(gpu::attention_router& inner, lane_rounds& rounds) : inner_(inner), rounds_(rounds) {}
  gpu::status begin(int lane, std::span<const gpu::remote_attention_job> jobs) override {
    if (!jobs.empty()) ++rounds_[size_t(lane)];
    return inner_.begin(lane, jobs);
  }
  gpu::status finish(int lane) override { return inner_.finish(lane); }
  void cancel() override { inner_.cancel(); }

 private:
  gpu::attention_router& inner_;
  lane_rounds& rounds_;
};

/// The largest difference between two runs' logits, step by step.
float largest_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float worst = a.size() == b.size() ? 0.0f : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    for (size_t j = 0; j < std::min(a[i].size(), b[i].size()); ++j) worst = std::max(worst, std::abs(a[i][j] - b[i][j]));
  return worst;
}

std::vector<int32_t> license_prompt() {
  return test::golden()["cases"].back()["prompt_token_ids"].get<std::vector<int32_t>>();
}

std::shared_ptr<const gpu::model_weights> synthetic_gqa() {
  static auto w = std::make_shared<const gpu::model_weights>(
      gpu::synthetic_weights(gpu::preset_config("tiny-gqa").value(), 5).value());
  return w;
}

/// Stands for a holder that fails once: armed, the remote attention of one sequence at `dead` fails.
class dying_holder_router final : public gpu::attention_router {
 public:
  dying_holder_router(gpu::attention_router& inner, uint64_t victim, uint32_t dead)
      : inner_(inner), victim_(victim), dead_(dead) {}
  gpu::status begin(int lane, std::span<const gpu::remote_attention_job> jobs) override {
    for (const auto& job : jobs)
      if (armed && job.seq_id == victim_ && job.holder == dead_) {
        armed = false;
        failed_.push_back({victim_, dead_});
        return {gpu::status_code::io_error, "instance 2 holding blocks of request 2 failed"};
      }
    return inner_.begin(lane, jobs);
  }
  gpu::status finish(int lane) override { return inner_.finish(lane); }
  std::vector<gpu::failed_attention> take_failed() override { return std::exchange(failed_, {}); }
  bool armed = false;

 private:
  gpu::attention_router& inner_;
  uint64_t victim_;
  uint32_t dead_;
  std::vector<gpu::failed_attention> failed_;
};

/// A block source over one pool that has no block for one sequence (its blocks are being found elsewhere).
class refusing_source final : public gpu::block_source {
 public:
  refusing_source(gpu::kv_pool& pool, uint64_t refused) : pool_(pool), refused_(refused) {}
  gpu::result<gpu::block_ref> allocate(const gpu::sequence& seq, uint32_t) override {
    if (seq.id == refused_) return gpu::status{gpu::status_code::out_of_blocks, "none for this sequence"};
    auto block = pool_.allocate({seq.id, 0});
    if (!block.is_ok()) return block.error();
    return gpu::block_ref{0, block.value()};
  }
  gpu::status release(const gpu::block_ref& ref) override { return pool_.release(ref.block); }

 private:
  gpu::kv_pool& pool_;
  uint64_t refused_;
};

/// A sequence of `tokens` prompt tokens (all id 3) that generates 4.
std::shared_ptr<gpu::sequence> prompt_of(uint64_t id, int tokens) {
  auto s = std::make_shared<gpu::sequence>();
  s->id = id;
  s->tokens.assign(size_t(tokens), 3);
  s->n_prompt = tokens;
  s->max_new_tokens = 4;
  return s;
}

/// Runs steps of a batcher with `options` over a prompt of 10 tokens and one of 200 (added in that order, 4 tokens
/// each to generate), checking the tokens of each step's entries.
void check_step_sizes(const gpu::batcher_options& options, const std::vector<std::vector<int>>& steps) {
  auto pool = gpu::kv_pool::create(test::cpu_device(), {1, 1, 4, gpu::dtype::f32}, 32).value();
  refusing_source source(pool, 0);
  gpu::batcher runner(source, options);
  runner.add(prompt_of(1, 10));
  runner.add(prompt_of(2, 200));
  for (const std::vector<int>& expected : steps) {
    gpu::step_plan plan;
    REQUIRE(runner.plan(plan).is_ok());
    std::vector<int> got;
    for (const auto& e : plan.entries) got.push_back(e.n_tokens);
    CHECK(got == expected);
    plan.sampled.assign(plan.params.size(), 7);
    runner.complete(plan);
  }
}

/// Notes, as each round of remote jobs goes out, how far the blocks a foreign chunk fills lag behind the layer
/// attended (in two lanes, the chunk's blocks are marked once its last part, in the second lane, is stored),
/// and passes the jobs on.
class written_checking_router final : public gpu::attention_router {
 public:
  written_checking_router(gpu::attention_router& inner, const gpu::kv_pool& pool, std::vector<uint32_t> blocks)
      : inner_(inner), pool_(pool), blocks_(std::move(blocks)) {}
  gpu::status begin(int lane, std::span<const gpu::remote_attention_job> jobs) override {
    for (const auto& job : jobs) {
      for (uint32_t b : blocks_)
        worst_lag[size_t(lane)] = std::max(worst_lag[size_t(lane)], int(job.layer + 1) - int(pool_.layers_written(b)));
      foreign_jobs += job.foreign_request != 0;
    }
    return inner_.begin(lane, jobs);
  }
  gpu::status finish(int lane) override { return inner_.finish(lane); }
  std::array<int, gpu::attention_router::lanes> worst_lag{-1000, -1000};  // per lane, at worst
  int foreign_jobs = 0;

 private:
  gpu::attention_router& inner_;
  const gpu::kv_pool& pool_;
  std::vector<uint32_t> blocks_;
};

/// Blocks of one pool, for the sequences of its instance.
class one_pool_source final : public gpu::block_source {
 public:
  one_pool_source(gpu::kv_pool& pool, uint32_t id) : pool_(pool), id_(id) {}
  gpu::result<gpu::block_ref> allocate(const gpu::sequence& seq, uint32_t) override {
    auto block = pool_.allocate({seq.id, id_});
    if (!block.is_ok()) return block.error();
    return gpu::block_ref{id_, block.value()};
  }
  gpu::status release(const gpu::block_ref& ref) override {
    return ref.pool == id_ ? pool_.release(ref.block) : gpu::status::ok();
  }

 private:
  gpu::kv_pool& pool_;
  uint32_t id_;
};

/// The real model on the cpu backend, its engine stepping `max_tokens` tokens of `max_seqs` sequences, over
/// one pool of `blocks` blocks.
struct one_pool_rig {
  one_pool_rig(int max_tokens, int max_seqs, uint32_t blocks)
      : eng(gpu::engine::create(test::real_model().weights, test::cpu_device(), {max_tokens, max_seqs}).value()),
        pool(gpu::kv_pool::create(test::cpu_device(), eng->pool_layout(), blocks).value()),
        view{{&pool}, 0},
        source({&pool}, 1) {}
  one_pool_rig(const one_pool_rig&) = delete;
  one_pool_rig& operator=(const one_pool_rig&) = delete;

  std::unique_ptr<gpu::engine> eng;
  gpu::kv_pool pool;
  gpu::kv_pools view;
  gpu::spread_block_source source;
};

/// The real model on the cpu backend, its engine stepping 64 tokens of 4 sequences, over three pools of 64 blocks
/// that a sequence's blocks are spread over (pool 0 local).
struct three_pool_rig {
  three_pool_rig()
      : eng(gpu::engine::create(test::real_model().weights, test::cpu_device(), {64, 4}).value()),
        pools(make_pools(*eng)),
        view{{&pools[0], &pools[1], &pools[2]}, 0},
        source(view.by_id, 3) {}
  three_pool_rig(const three_pool_rig&) = delete;
  three_pool_rig& operator=(const three_pool_rig&) = delete;

  /// The remote attention shape of the real model.
  gpu::attention_shape shape() const {
    return test::real_model().weights->config().attention();
  }

  std::unique_ptr<gpu::engine> eng;
  std::vector<gpu::kv_pool> pools;
  gpu::kv_pools view;
  gpu::spread_block_source source;

 private:
  static std::vector<gpu::kv_pool> make_pools(gpu::engine& e) {
    std::vector<gpu::kv_pool> out;
    for (int p = 0; p < 3; ++p) out.push_back(gpu::kv_pool::create(test::cpu_device(), e.pool_layout(), 64).value());
    return out;
  }
};

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("chunks of a prompt computed in other pools, while its sequence waits, give the ids of one pool") {
    const auto& model = test::real_model();
    const auto& c = model.weights->config();
    gpu::backend& device = test::cpu_device();
    // 128-token steps; from 64 tokens with remote blocks a step runs as two lanes.
    auto eng = gpu::engine::create(model.weights, device, {128, 4, gpu::dtype::f32, 64}).value();
    std::vector<gpu::kv_pool> pools;
    for (int p = 0; p < 3; ++p) pools.push_back(gpu::kv_pool::create(device, eng->pool_layout(), 64).value());
    const std::vector<gpu::kv_pool*> by_id{&pools[0], &pools[1], &pools[2]};
    const gpu::kv_pools all{by_id, 0};
    gpu::pool_router router(device, all, c.attention());
    one_pool_source source(pools[0], 0);
    gpu::batcher owner(*eng, source, {128, 4});
    auto seq = std::make_shared<gpu::sequence>();
    seq->id = 5;
    seq->tokens = test::golden()["cases"][6]["prompt_token_ids"].get<std::vector<int32_t>>();  // 604 tokens
    seq->n_prompt = int(seq->tokens.size());
    seq->max_new_tokens = 12;
    seq->ignore_eos = true;
    owner.add(seq);
    REQUIRE(owner.step({by_id, 0}, &router).is_ok());  // [0, 128) here
    REQUIRE(seq->n_cached == 128);
    // [128, 256) in pool 1, then [256, 384) in pool 2 (which attends pool 1's chunk), the owner's sequence held.
    seq->held = true;
    for (uint32_t holder : {1u, 2u}) {
      auto reserved = pools[holder].allocate_many({seq->id, 0}, 8).value();
      for (uint32_t b : reserved) CHECK(pools[holder].layers_written(b) == 0);
      for (uint32_t b : reserved) seq->table.push_back({holder, b});
      one_pool_source unused(pools[holder], holder);
      gpu::batcher remote(*eng, unused, {128, 4});
      auto chunk = std::make_shared<gpu::sequence>();
      chunk->id = 900 + holder;
      chunk->foreign_request = seq->id;
      chunk->foreign_owner = 0;
      const int end = 128 * int(holder + 1);
      chunk->tokens.assign(seq->tokens.begin(), seq->tokens.begin() + end);
      chunk->n_prompt = end;
      chunk->n_cached = end - 128;
      chunk->table = seq->table;
      remote.add(chunk);
      REQUIRE(owner.step({by_id, 0}, &router).is_ok());  // the held sequence sits out
      CHECK(owner.last_step_tokens() == 0);
      written_checking_router checking(router, pools[holder], reserved);
      const gpu::status ran = remote.step({by_id, holder}, &checking);
      REQUIRE_MESSAGE(ran.is_ok(), ran.message());
      CHECK(checking.foreign_jobs > 0);
      CHECK(checking.worst_lag[0] == 1);  // the first lane's queries leave before the rest of the chunk is stored
      CHECK(checking.worst_lag[1] == 0);
      const auto done = remote.take_finished();
      REQUIRE(done.size() == 1);
      CHECK(done[0]->finish == gpu::finish_reason::length);
      CHECK(done[0]->table.empty());  // handed back, not released
      for (uint32_t b : reserved) CHECK(pools[holder].layers_written(b) == uint32_t(c.n_layers));
      CHECK(pools[holder].used_blocks() == 8);
    }
    seq->n_cached = 384;
    seq->held = false;
    while (!owner.idle()) REQUIRE(owner.step({by_id, 0}, &router).is_ok());
    const std::vector<int32_t> prompt(seq->tokens.begin(), seq->tokens.begin() + seq->n_prompt);
    const std::vector<int32_t> got(seq->tokens.begin() + seq->n_prompt, seq->tokens.end());
    CHECK(got == test::run_greedy(model.weights, prompt, 12, {}).ids);
    CHECK(pools[0].used_blocks() == 0);
  }

  TEST_CASE("a sequence waiting for blocks leaves its tokens of the step to the others") {
    auto pool = gpu::kv_pool::create(test::cpu_device(), {1, 1, 4, gpu::dtype::f32}, 16).value();
    refusing_source source(pool, 1);
    gpu::batcher_options options{64, 4, [](const gpu::sequence&, uint32_t) { return gpu::shortage_action::wait; }};
    gpu::batcher runner(source, options);
    runner.add(prompt_of(1, 100));  // at the head, it would take the whole budget of 64 tokens
    runner.add(prompt_of(2, 40));
    gpu::step_plan plan;
    REQUIRE(runner.plan(plan).is_ok());
    REQUIRE(plan.entries.size() == 1);
    CHECK(plan.entries[0].seq_id == 2);
    CHECK(plan.entries[0].n_tokens == 40);
    CHECK(pool.used_blocks() == 3);
  }

  TEST_CASE("a step with decode tokens prefills only up to the mixed-step budget; one without takes the whole") {
    gpu::batcher_options options{64, 4};
    options.mixed_step_tokens = 24;
    check_step_sizes(options, {{10, 54},    // nothing decodes yet: the whole budget of 64
                               {1, 23},     // sequence 1 decodes: 24 tokens in all
                               {1, 23}});
  }

  TEST_CASE("a step with decode tokens prefills only every few steps when asked; one without always does") {
    gpu::batcher_options options{64, 4};
    options.prefill_every_steps = 3;
    check_step_sizes(options, {{10, 54},  // nothing decodes yet: the whole budget
                               {1},       // sequence 1 decodes: two steps without prefill,
                               {1},
                               {1, 63},   // then the third takes a chunk again
                               {64}});    // sequence 1 ended (4 tokens): nothing decodes, the whole budget
  }

  TEST_CASE("dropping one pool's partial changes the output") {
    const auto& model = test::real_model();
    const auto prompt = license_prompt();
    test::greedy_options options;
    options.pools = 3;
    const auto intact = test::run_greedy(model.weights, prompt, 16, options);
    int dropped_jobs = 0;
    options.decorate = [&](gpu::attention_router& inner) {
      return std::make_unique<dropping_router>(inner, 1, model.weights->config().n_heads, dropped_jobs);
    };
    const auto damaged = test::run_greedy(model.weights, prompt, 16, options);
    CHECK(dropped_jobs > 0);
    CHECK(damaged.ids != intact.ids);
  }

  TEST_CASE("chunked prefill gives the ids of a single prefill") {
    const auto& model = test::real_model();
    const auto prompt = license_prompt();
    const auto whole = test::run_greedy(model.weights, prompt, 12, {});
    for (int chunk : {1, 7, 16, 100}) {
      test::greedy_options options;
      options.chunk = chunk;
      CHECK_MESSAGE(test::run_greedy(model.weights, prompt, 12, options).ids == whole.ids, "chunk ", chunk);
    }
  }

  TEST_CASE("engines on one device share one placement of the weights and give the ids of an engine of their own") {
    const auto& model = test::real_model();
    const auto prompt = license_prompt();
    gpu::device_weights_cache cache;
    {
      auto first = cache.on(model.weights, "cpu");
      auto second = cache.on(model.weights, "cpu");
      REQUIRE(first.is_ok());
      REQUIRE(second.is_ok());
      CHECK(first.value() == second.value());
      CHECK(cache.placements() == 1);
      // The host weights keep the packed projections' parts side by side: the cpu reads them in place.
      CHECK(first.value()->placed_bytes() == 0);
      test::greedy_options shared;
      shared.placed = first.value();
      shared.chunk = 16;
      const auto own = test::run_greedy(model.weights, prompt, 8, {});
      CHECK(test::run_greedy(model.weights, prompt, 8, shared).ids == own.ids);
      CHECK(test::run_greedy(model.weights, prompt, 8, shared).ids == own.ids);
      // Other weights are another placement.
      const auto halves = std::make_shared<const gpu::model_weights>(
          gpu::convert_weights(*model.weights, gpu::dtype::f16).value());
      auto placed_halves = cache.on(halves, "cpu");
      REQUIRE(placed_halves.is_ok());
      CHECK(placed_halves.value() != first.value());
      CHECK(cache.placements() == 2);
    }
    // Once no engine holds a placement, the next one places again.
    REQUIRE(cache.on(model.weights, "cpu").is_ok());
    CHECK(cache.placements() == 3);
    CHECK_FALSE(cache.on(model.weights, "tpu").is_ok());
  }

  TEST_CASE("a synthetic GQA model gives the same ids over several pools and chunks") {
    const std::vector<int32_t> prompt = {1, 17, 300, 42, 999, 5, 77, 123, 456, 789, 11, 12, 13, 14, 15, 16, 17, 18,
                                         19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35};
    const auto one = test::run_greedy(synthetic_gqa(), prompt, 40, {});
    for (int pools : {2, 5}) {
      test::greedy_options options;
      options.pools = pools;
      options.chunk = 9;
      CHECK(test::run_greedy(synthetic_gqa(), prompt, 40, options).ids == one.ids);
    }
  }

  TEST_CASE("two lanes give the ids and logits of one, for a sequence split between them") {
    const auto& model = test::real_model();
    const auto prompt = license_prompt();
    test::greedy_options options;
    options.pools = 3;
    options.chunk = 64;
    options.keep_logits = true;
    options.overlap_min_tokens = 0;
    const auto one = test::run_greedy(model.weights, prompt, 8, options);
    lane_rounds rounds{};
    options.overlap_min_tokens = 2;
    options.decorate = [&](gpu::attention_router& inner) { return std::make_unique<lane_counting_router>(inner, rounds); };
    const auto two = test::run_greedy(model.weights, prompt, 8, options);
    CHECK(rounds[0] > 0);
    CHECK(rounds[1] > 0);  // the chunks did run as two lanes
    CHECK(two.ids == one.ids);
    CHECK(largest_difference(two.logits, one.logits) < 1e-4f);
  }

  TEST_CASE("a batch split between two lanes gives each sequence the logits of one lane") {
    const auto& model = test::real_model();
    gpu::backend& device = test::cpu_device();
    const gpu::model_config& c = model.weights->config();
    const auto& cases = test::golden()["cases"];
    std::vector<gpu::kv_pool> pools;
    gpu::kv_pools view;
    for (int p = 0; p < 3; ++p) pools.push_back(gpu::kv_pool::create(device, {c.n_layers, c.n_kv_heads, c.head_dim(), gpu::dtype::f32}, 32).value());
    for (auto& p : pools) view.by_id.push_back(&p);
    gpu::spread_block_source source(view.by_id, 3);
    // Six prompts of 5, 8, 4, 7, 5 and 9 tokens: the middle row (19) falls inside the fourth.
    std::vector<gpu::sequence> seqs(6);
    std::vector<gpu::batch_entry> batch;
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].id = i + 1;
      seqs[i].tokens = cases[i]["prompt_token_ids"].get<std::vector<int32_t>>();
      while (seqs[i].table.size() < gpu::blocks_for_tokens(int64_t(seqs[i].tokens.size())))
        seqs[i].table.push_back(source.allocate(seqs[i], uint32_t(seqs[i].table.size())).value());
      batch.push_back({seqs[i].id, seqs[i].tokens.data(), int(seqs[i].tokens.size()), 0, &seqs[i].table, true});
    }
    gpu::pool_router inner(device, view, c.attention());
    std::vector<std::vector<float>> logits[2];
    lane_rounds rounds[2] = {};
    for (int overlap : {1, 0}) {  // two lanes first: the pools hold no KV of an earlier run
      gpu::engine_options options{64, 8};
      options.overlap_min_tokens = overlap ? 2 : 0;
      auto eng = gpu::engine::create(model.weights, device, options).value();
      lane_counting_router router(inner, rounds[overlap]);
      REQUIRE(eng->step(batch, view, &router).is_ok());
      CHECK(eng->last_stats().partials.size() == batch.size());
      CHECK(eng->last_stats().sampled == int(batch.size()));
      for (int i = 0; i < int(batch.size()); ++i) {
        logits[overlap].emplace_back(size_t(c.vocab_size));
        REQUIRE(eng->copy_logits(i, logits[overlap].back().data()).is_ok());
      }
    }
    CHECK(rounds[0][1] == 0);
    CHECK(rounds[1][1] > 0);
    CHECK(largest_difference(logits[1], logits[0]) < 1e-4f);
    for (auto& seq : seqs)
      for (const auto& ref : seq.table) REQUIRE(pools[ref.pool].release(ref.block).is_ok());
  }

  TEST_CASE("continuous batching gives each sequence its ids alone, its prefill spread over decode steps or not") {
    for (const auto [mixed_step_tokens, prefill_every_steps] : {std::pair{0, 1}, std::pair{12, 1}, std::pair{0, 3}}) {
      CAPTURE(mixed_step_tokens);
      CAPTURE(prefill_every_steps);
      one_pool_rig rig(64, 8, 256);
      auto& [eng, pool, view, source] = rig;
      gpu::batcher_options options{64, 8};
      options.mixed_step_tokens = mixed_step_tokens;
      options.prefill_every_steps = prefill_every_steps;
      gpu::batcher runner(*eng, source, options);
      std::vector<std::shared_ptr<gpu::sequence>> seqs;
      const auto& cases = test::golden()["cases"];
      for (size_t i = 0; i < cases.size(); ++i) {
        auto s = std::make_shared<gpu::sequence>();
        s->id = i + 1;
        s->tokens = cases[i]["prompt_token_ids"].get<std::vector<int32_t>>();
        s->n_prompt = int(s->tokens.size());
        s->max_new_tokens = 20;
        s->ignore_eos = true;
        seqs.push_back(s);
      }
      // Sequences arrive while others run: two at first, one more every other step.
      size_t added = 0;
      for (int step = 0; !runner.idle() || added < seqs.size(); ++step) {
        while (added < seqs.size() && added < 2 + size_t(step / 2)) runner.add(seqs[added++]);
        REQUIRE(runner.step(view, nullptr).is_ok());
      }
      CHECK(runner.take_finished().size() == seqs.size());
      for (size_t i = 0; i < seqs.size(); ++i) {
        const auto prompt = std::vector<int32_t>(seqs[i]->tokens.begin(), seqs[i]->tokens.begin() + seqs[i]->n_prompt);
        const auto expected = test::run_greedy(test::real_model().weights, prompt, 20, {}).ids;
        const std::vector<int32_t> got(seqs[i]->tokens.begin() + seqs[i]->n_prompt, seqs[i]->tokens.end());
        CHECK_MESSAGE(got == expected, "sequence ", i);
        CHECK(seqs[i]->finish == gpu::finish_reason::length);
      }
      CHECK(pool.used_blocks() == 0);
      CHECK(pool.check().is_ok());
    }
  }

  TEST_CASE("a sequence whose holder fails starts over from its tokens; the others run the step again") {
    const auto& model = test::real_model();
    three_pool_rig rig;
    auto& [eng, pools, view, source] = rig;
    gpu::pool_router inner(test::cpu_device(), view, rig.shape());
    dying_holder_router router(inner, 2, 2);
    gpu::batcher runner(*eng, source, {64, 4});
    std::vector<std::shared_ptr<gpu::sequence>> seqs;
    for (size_t c : {0, 6, 2}) {  // request 2 (the 604-token prompt) has blocks in every pool
      auto s = std::make_shared<gpu::sequence>();
      s->id = seqs.size() + 1;
      s->tokens = test::golden()["cases"][c]["prompt_token_ids"].get<std::vector<int32_t>>();
      s->n_prompt = int(s->tokens.size());
      s->max_new_tokens = 12;
      s->ignore_eos = true;
      runner.add(s);
      seqs.push_back(s);
    }
    int failed_steps = 0;
    for (bool fired = false; !runner.idle();) {
      if (!fired && seqs[1]->n_generated() >= 5) router.armed = fired = true;  // once request 2 has 5 tokens
      gpu::step_plan plan;
      REQUIRE(runner.plan(plan).is_ok());
      const gpu::status s = gpu::batcher::execute(*eng, plan, view, &router);
      if (s.is_ok()) {
        runner.complete(plan);
        continue;
      }
      ++failed_steps;
      runner.discard(plan);
      const std::vector<gpu::failed_attention> failed = router.take_failed();
      REQUIRE(failed == std::vector<gpu::failed_attention>{{2, 2}});
      auto again = runner.take_back(2);
      REQUIRE(again);
      CHECK(again->table.empty());
      CHECK(again->n_generated() == 5);
      runner.add(again);
    }
    CHECK(failed_steps == 1);
    CHECK(seqs[1]->preemptions == 1);
    for (size_t i : {size_t(0), size_t(1), size_t(2)}) {
      const auto& s = seqs[i];
      const std::vector<int32_t> prompt(s->tokens.begin(), s->tokens.begin() + s->n_prompt);
      const std::vector<int32_t> got(s->tokens.begin() + s->n_prompt, s->tokens.end());
      CHECK_MESSAGE(got == test::run_greedy(model.weights, prompt, 12, {}).ids, "sequence ", i + 1);
      CHECK(s->finish == gpu::finish_reason::length);
    }
    for (auto& p : pools) {
      CHECK(p.used_blocks() == 0);
      CHECK(p.check().is_ok());
    }
    CHECK_FALSE(runner.take_back(2));  // it ended
  }

  TEST_CASE("a sequence that lost some blocks computes only their positions again, and its ids are those of one pool") {
    const auto& model = test::real_model();
    three_pool_rig rig;
    auto& [eng, pools, view, source] = rig;
    gpu::pool_router router(test::cpu_device(), view, rig.shape());
    gpu::batcher runner(*eng, source, {64, 4});
    auto s = std::make_shared<gpu::sequence>();
    s->id = 2;
    s->tokens = license_prompt();  // 604 tokens
    s->n_prompt = int(s->tokens.size());
    s->max_new_tokens = 12;
    s->ignore_eos = true;
    runner.add(s);
    while (s->n_generated() < 5) REQUIRE(runner.step(view, &router).is_ok());
    // Pool 2's blocks are lost; a block allocated again holds garbage (NaN) until it is computed.
    std::vector<uint32_t> lost;
    uint32_t lost_full = 0;
    for (uint32_t i = 0; i < s->table.size(); ++i) {
      if (s->table[i].pool != 2) continue;
      REQUIRE(pools[2].release(s->table[i].block).is_ok());
      lost.push_back(i);
      lost_full += i < s->full_blocks();
    }
    for (auto& p : pools)
      for (uint32_t b = 0; b < p.total_blocks(); ++b)
        if (!p.is_used(b)) std::memset(p.block_data(b), 0xff, p.layout().block_bytes());
    REQUIRE(lost_full >= 8);
    REQUIRE(lost.front() > 0);
    const int had = s->kv_positions();
    const int again = s->forget_lost_blocks(lost);
    CHECK(again == int(lost_full * gpu::kv_block_tokens) + had % int(gpu::kv_block_tokens));
    CHECK(s->n_cached == int(lost.front() * gpu::kv_block_tokens));
    CHECK_FALSE(s->kept_ahead.empty());
    CHECK(s->blocks_held() == s->table.size() - lost.size());
    // Until its next token, the steps compute the lost positions and the pending token, nothing else; the batcher
    // counts the lost ones as computed again.
    int computed = 0, recomputed = 0;
    for (const int generated = s->n_generated(); s->n_generated() == generated;) {
      gpu::step_plan plan;
      REQUIRE(runner.plan(plan).is_ok());
      for (const auto& e : plan.entries) computed += e.seq_id == s->id ? e.n_tokens : 0;
      REQUIRE(gpu::batcher::execute(*eng, plan, view, &router).is_ok());
      runner.complete(plan);
      recomputed += runner.last_step_recomputed();
    }
    CHECK(computed == again + 1);
    CHECK(recomputed == again);
    CHECK(s->recomputed == again);
    CHECK(s->kept_ahead.empty());
    CHECK(s->blocks_held() == s->table.size());
    while (!runner.idle()) REQUIRE(runner.step(view, &router).is_ok());
    const std::vector<int32_t> prompt(s->tokens.begin(), s->tokens.begin() + s->n_prompt);
    const std::vector<int32_t> got(s->tokens.begin() + s->n_prompt, s->tokens.end());
    CHECK(got == test::run_greedy(model.weights, prompt, 12, {}).ids);
    for (auto& p : pools) {
      CHECK(p.used_blocks() == 0);
      CHECK(p.check().is_ok());
    }
  }

  TEST_CASE("a full pool preempts the newest sequence and recomputes it") {
    one_pool_rig rig(64, 4, 6);  // 96 tokens for three sequences
    auto& [eng, pool, view, source] = rig;
    gpu::batcher runner(*eng, source, {64, 4});
    std::vector<std::shared_ptr<gpu::sequence>> seqs;
    for (int i = 0; i < 3; ++i) {
      auto s = std::make_shared<gpu::sequence>();
      s->id = uint64_t(i + 1);
      s->tokens = test::golden()["cases"][size_t(i)]["prompt_token_ids"].get<std::vector<int32_t>>();
      s->n_prompt = int(s->tokens.size());
      s->max_new_tokens = 36;
      s->ignore_eos = true;
      runner.add(s);
      seqs.push_back(s);
    }
    while (!runner.idle()) REQUIRE(runner.step(view, nullptr).is_ok());
    int preempted = 0;
    for (const auto& s : seqs) {
      preempted += s->preemptions;
      const std::vector<int32_t> prompt(s->tokens.begin(), s->tokens.begin() + s->n_prompt);
      const std::vector<int32_t> got(s->tokens.begin() + s->n_prompt, s->tokens.end());
      CHECK(got == test::run_greedy(test::real_model().weights, prompt, 36, {}).ids);
    }
    CHECK(preempted > 0);
    CHECK(pool.used_blocks() == 0);
  }

  TEST_CASE("a sequence larger than the pool ends with an error and no hang") {
    one_pool_rig rig(64, 1, 2);
    auto& [eng, pool, view, source] = rig;
    gpu::batcher runner(*eng, source, {64, 1});
    auto s = std::make_shared<gpu::sequence>();
    s->tokens = license_prompt();
    s->n_prompt = int(s->tokens.size());
    s->max_new_tokens = 4;
    runner.add(s);
    for (int i = 0; i < 100 && !runner.idle(); ++i) REQUIRE(runner.step(view, nullptr).is_ok());
    CHECK(runner.idle());
    CHECK(s->finish == gpu::finish_reason::error);
    CHECK(pool.used_blocks() == 0);
  }

  TEST_CASE("generation stops at BOS or EOS unless told to ignore them") {
    const auto& model = test::real_model();
    gpu::generate_options options;
    options.prompt_ids = model.vocab->encode("Once upon a time", true);
    options.max_tokens = 400;
    auto stopped = gpu::generate(model, test::cpu_device(), options);
    REQUIRE(stopped.is_ok());
    CHECK(stopped->finish == gpu::finish_reason::stop);
    CHECK(stopped->token_ids.size() < 400);
    options.ignore_eos = true;
    options.max_tokens = int(stopped->token_ids.size()) + 5;
    auto ignored = gpu::generate(model, test::cpu_device(), options);
    REQUIRE(ignored.is_ok());
    CHECK(ignored->finish == gpu::finish_reason::length);
    CHECK(ignored->token_ids.size() == stopped->token_ids.size() + 5);
    CHECK(std::equal(stopped->token_ids.begin(), stopped->token_ids.end(), ignored->token_ids.begin()));
  }
}
