// The decode rig: seeded synthetic weights, one cpu backend, one pool sized for the whole run, and a
// batcher whose sequences never stop (greedy, EOS ignored, no length limit within the run).
#include "gpu/bench/decode_rig.hpp"

#include <algorithm>

#include "gpu/batcher.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/generate.hpp"
#include "gpu/sampler.hpp"
#include "gpu/text.hpp"
#include "gpu/tokenizer.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// A prompt of `n` tokens: BOS, then seeded ids in [3, vocab).
std::vector<int32_t> seeded_prompt(int n, int vocab, uint64_t& rng) {
  std::vector<int32_t> ids{token_bos};
  while (int(ids.size()) < n) ids.push_back(std::min(vocab - 1, 3 + int32_t(next_uniform(rng) * float(vocab - 3))));
  return ids;
}

std::shared_ptr<sequence> bench_sequence(uint64_t id, std::vector<int32_t> prompt, int max_new_tokens) {
  auto seq = std::make_shared<sequence>();
  seq->id = id;
  seq->n_prompt = int(prompt.size());
  seq->tokens = std::move(prompt);
  seq->sampling = {0.0f, 1.0f};
  seq->rng = id;
  seq->max_new_tokens = max_new_tokens;
  seq->ignore_eos = true;
  return seq;
}

namespace {

/// Most steps the prefill may take before the rig gives up (it needs a few).
constexpr int max_prefill_steps = 256;


status check_options(const decode_rig_options& o) {
  ILLM_RETURN_IF_ERROR(o.config.validate());
  if (o.threads < 1 || o.batch < 1 || o.context_tokens < 1 || o.decode_steps < 0)
    return {status_code::invalid_argument,
            text::format("decode rig: threads {}, batch {}, context {}, steps {} (each must be positive)", o.threads,
                         o.batch, o.context_tokens, o.decode_steps)};
  return status::ok();
}

}  // namespace

model_config migration_bench_config() {
  return {1024, 2816, 16, 8, 8, 32000, 4096, 10000.0f, 1e-5f};
}

/// Everything the rig owns, in the order it is built (and destroyed in reverse).
struct decode_rig::state {
  explicit state(int threads) : device(threads) {}
  cpu::cpu_backend device;
  std::shared_ptr<const model_weights> weights;
  std::unique_ptr<engine> eng;
  std::unique_ptr<kv_pool> pool;
  kv_pools view;
  std::unique_ptr<spread_block_source> source;
  std::unique_ptr<batcher> runner;
  std::vector<std::shared_ptr<sequence>> seqs;
};

decode_rig::decode_rig(std::unique_ptr<state> s, const decode_rig_options& options)
    : state_(std::move(s)), options_(options) {}

decode_rig::~decode_rig() = default;

result<std::unique_ptr<decode_rig>> decode_rig::create(const decode_rig_options& options) {
  ILLM_RETURN_IF_ERROR(check_options(options));
  auto s = std::make_unique<state>(options.threads);
  auto weights = synthetic_weights(options.config, options.seed);
  if (!weights.is_ok()) return weights.error();
  s->weights = std::make_shared<const model_weights>(std::move(weights).value());
  // One step holds the whole prefill when it fits; a decode step is the batch.
  const int step_tokens = std::clamp(options.batch * options.context_tokens, options.batch, 2048);
  auto made = engine::create(s->weights, s->device, {step_tokens, options.batch});
  if (!made.is_ok()) return made.error();
  s->eng = std::move(made).value();
  const uint32_t per_seq = blocks_for_tokens(int64_t(options.context_tokens) + options.decode_steps + 1);
  auto pool = kv_pool::create(s->device, s->eng->pool_layout(), uint32_t(options.batch) * per_seq);
  if (!pool.is_ok()) return pool.error();
  s->pool = std::make_unique<kv_pool>(std::move(pool).value());
  s->view = {{s->pool.get()}, 0};
  s->source = std::make_unique<spread_block_source>(s->view.by_id, options.seed);
  s->runner = std::make_unique<batcher>(*s->eng, *s->source, batcher_options{step_tokens, options.batch});
  uint64_t rng = options.seed;
  for (int i = 0; i < options.batch; ++i) {
    s->seqs.push_back(
        bench_sequence(uint64_t(i) + 1, seeded_prompt(options.context_tokens, options.config.vocab_size, rng), 1 << 30));
    s->runner->add(s->seqs.back());
  }
  return std::unique_ptr<decode_rig>(new decode_rig(std::move(s), options));
}

status decode_rig::prefill() {
  auto decoding = [this] {
    return std::all_of(state_->seqs.begin(), state_->seqs.end(), [](const auto& q) {
      return q->n_cached >= q->n_prompt && int(q->tokens.size()) - q->n_cached == 1;
    });
  };
  for (int i = 0; !decoding(); ++i) {
    if (i == max_prefill_steps)
      return {status_code::internal, text::format("the batch did not reach pure decode in {} steps", i)};
    ILLM_RETURN_IF_ERROR(state_->runner->step(state_->view, nullptr));
  }
  return check();
}

result<int> decode_rig::step() {
  ILLM_RETURN_IF_ERROR(state_->runner->step(state_->view, nullptr));
  return state_->runner->last_step_decodes();
}

std::vector<uint32_t> decode_rig::full_blocks() const {
  std::vector<uint32_t> out;
  for (const auto& q : state_->seqs)
    for (uint32_t i = 0; i < q->full_blocks() && i < q->table.size(); ++i) out.push_back(q->table[i].block);
  return out;
}

const kv_pool& decode_rig::pool() const {
  return *state_->pool;
}

int decode_rig::threads() const {
  return state_->device.threads();
}

status decode_rig::check() const {
  for (const auto& q : state_->seqs)
    if (q->finished() || q->preemptions > 0)
      return {status_code::internal,
              text::format("sequence {} stopped or was preempted (the pool is sized for the run)", q->id)};
  return state_->pool->check();
}

}  // namespace illm::gpu
