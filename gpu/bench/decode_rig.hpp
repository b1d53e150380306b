#pragma once
// A batch of sequences decoding continuously on a synthetic model on the cpu backend, for benchmarks
// that measure what other work costs a running decode (`illm bench migration`: moving KV blocks to a
// peer). The sequences are prefilled with seeded context, then every step decodes one token of each
// with the real batcher and engine; their full blocks, which nothing writes again, are listed so that
// others can read them where they are in the pool.

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/kv_pool.hpp"
#include "gpu/model_config.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

struct sequence;

/// The model shape of `illm bench migration`: LLaMA-like (head_dim 128, SwiGLU of 2.75 x dim, vocab
/// 32000, shared classifier), 16 layers of width 1024, 238M parameters. One fp32 KV block (16 tokens
/// x 16 layers x K and V x 1024) is 2 MiB, and a batch of 8 decodes at about a hundred tokens per
/// second on two cores.
model_config migration_bench_config();

/// A prompt of `n` tokens: BOS, then ids in [3, vocab) drawn from `rng` (advanced).
std::vector<int32_t> seeded_prompt(int n, int vocab, uint64_t& rng);

/// A greedy sequence that ignores EOS and stops after `max_new_tokens`, for benchmarks.
std::shared_ptr<sequence> bench_sequence(uint64_t id, std::vector<int32_t> prompt, int max_new_tokens);

/// What a decode_rig runs.
struct decode_rig_options {
  model_config config = migration_bench_config();
  uint64_t seed = 1;        ///< weights and prompts
  int threads = 2;          ///< cpu backend threads
  int batch = 8;            ///< sequences decoding together
  int context_tokens = 32;  ///< prompt of each sequence (BOS, then seeded ids), prefilled before decoding
  int decode_steps = 0;     ///< decode steps the pool must hold room for after the prefill
};

/// A batch decoding continuously: prefill() once, then step() as often as decode_steps allows.
class decode_rig {
 public:
  /// Generates the weights, creates the engine and a pool sized for the whole run, queues the batch.
  static result<std::unique_ptr<decode_rig>> create(const decode_rig_options& options);
  ~decode_rig();

  /// Steps until every sequence has its context cached and the next step decodes one token of each.
  status prefill();
  /// One step of the whole batch; returns the tokens it decoded (the batch, once prefilled).
  result<int> step();

  /// Physical blocks (in pool()) of every sequence's full blocks, sequence by sequence, oldest first.
  std::vector<uint32_t> full_blocks() const;
  const kv_pool& pool() const;
  /// Bytes of one KV block in the pool's dtype.
  uint64_t block_bytes() const { return pool().layout().block_bytes(); }
  const decode_rig_options& options() const { return options_; }
  /// Parameters of the model (its classifier shared with the embedding).
  uint64_t parameters() const { return options_.config.parameter_count(true); }
  int threads() const;

  /// Checks that no sequence stopped or was preempted and that the pool's accounting holds.
  status check() const;

 private:
  struct state;
  explicit decode_rig(std::unique_ptr<state> s, const decode_rig_options& options);
  std::unique_ptr<state> state_;
  decode_rig_options options_;
};

}  // namespace illm::gpu
