#pragma once
// The engine: one forward step of continuous batching over a mixed batch (prefill chunks and decode
// tokens of many sequences). Each layer's attention is MicroAttention over the sequence's blocks in
// the local pool, plus partials of blocks held elsewhere through an attention_router, merged.

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gpu/attention_router.hpp"
#include "gpu/backend.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/expert_routing.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/sampler.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {

/// One sequence's share of a step: n_tokens tokens at positions pos0, pos0 + 1, ...
struct batch_entry {
  uint64_t seq_id = 0;
  const int32_t* tokens = nullptr;  ///< host memory
  int n_tokens = 0;
  int32_t pos0 = 0;
  const block_table* table = nullptr;  ///< covers positions [0, pos0 + n_tokens)
  bool sample = false;                 ///< produce logits for the last token
  /// Nonzero for a chunk of another instance's request computed here into blocks reserved for it: remote
  /// attention names that request and its owner and lists the blocks it reads (they may still be written
  /// elsewhere), and the local blocks this entry fills are marked written layer by layer
  /// (kv_pool::mark_written), for the chunks after it on other instances.
  uint64_t foreign_request = 0;
  uint32_t foreign_owner = 0;  ///< with foreign_request: the instance that owns it
  /// Produce logits for every token (a perplexity's scoring, a prompt's log probabilities; up to
  /// engine_options::max_scored_tokens in a step).
  bool every_token = false;
};

/// The pools a step may touch, by pool id: the local one is attended here; others are attended
/// through the router. KV of new tokens is written to whichever pool their block is in, which must
/// be present (in a cluster only local blocks are ever written).
struct kv_pools {
  std::vector<kv_pool*> by_id;
  uint32_t local = 0;
};

/// Limits and types fixed when the engine is created (its buffers are sized by them).
struct engine_options {
  int max_batch_tokens = 512;      ///< tokens per step (prefill chunk + decode tokens)
  int max_batch_seqs = 256;        ///< sequences per step
  dtype kv_type = dtype::f32;  ///< element type of the KV pools the engine reads and writes
  /// A step of at least this many tokens whose queries attend blocks held elsewhere runs as two
  /// micro-batches (lanes): the holders attend one lane's queries while the engine runs the other's dense
  /// layers, so a long prefill's dense and remote attention overlap (0: never). Below a few hundred
  /// tokens the dense layers read their weights twice for little overlap.
  int overlap_min_tokens = 512;
  /// Rows of logits the every_token entries of one step may have in all (batch_entry::every_token), beyond one per
  /// sampling sequence (0: none).
  int max_scored_tokens = 0;
};

/// What the last step did, for reports and tests.
struct step_stats {
  int tokens = 0;
  int sampled = 0;  ///< rows of logits (copy_logits reads them)
  std::vector<int> logit_row;  ///< per batch entry: its first row of logits (-1: none)
  std::vector<int> partials;  ///< per batch entry: partials merged per layer (pools holding its blocks)
  uint64_t remote_jobs = 0;   ///< remote MicroAttention jobs, all layers
};

/// Runs a model on a backend. On a backend whose memory is not host memory the engine uploads each
/// step's small index arrays (tokens, positions, slots, block lists) in one copy, keeps the attention
/// partials on the device, and stages the queries and partials of remote attention through host
/// buffers, since an attention_router's jobs hold host pointers.
class engine {
 public:
  /// Places the weights on `device` for this engine alone (packed projections); `device` must outlive the engine.
  static result<std::unique_ptr<engine>> create(std::shared_ptr<const model_weights> weights, backend& device,
                                                const engine_options& options);
  /// Runs on weights already placed on `device`'s GPU (shared with other engines there).
  static result<std::unique_ptr<engine>> create(std::shared_ptr<const device_weights> weights, backend& device,
                                                const engine_options& options);

  /// Whether a step of `tokens` tokens is long enough for two lanes under `overlap_min_tokens`: it runs as
  /// two when some of its queries also attend blocks another pool holds.
  static bool long_enough_for_lanes(int overlap_min_tokens, int64_t tokens);
  /// Whether some query of `batch` attends a block that another pool than `local` holds.
  static bool attends_elsewhere(std::span<const batch_entry> batch, uint32_t local);

  /// One forward pass over `batch`; the entries with sample set get logits, in batch order. The KV it wrote is in
  /// the pools once it returns, or, when entries sample, once sample() returns.
  status step(std::span<const batch_entry> batch, const kv_pools& pools, attention_router* router);

  /// Picks a token for each sampled entry of the last step (and waits for the step's work): rows whose params are
  /// plain() on the device, the others on the host from a copy of their logits with their history (penalties,
  /// bars) and their log probabilities where asked (gpu/sampler.hpp). `history` and `logprobs` may be empty when
  /// every row is plain.
  status sample(std::span<const sampling_params> params, std::span<const sampling_history> history,
                std::span<uint64_t> rng, std::span<int32_t> out, std::span<token_logprobs> logprobs);
  /// Copies the logits [vocab] of the i-th sampled entry of the last step to host memory.
  status copy_logits(int i, float* host) const;
  const step_stats& last_stats() const { return stats_; }

  const model_config& config() const { return weights_->config(); }
  const engine_options& options() const { return options_; }
  backend& device() { return *device_; }
  /// The block layout of pools this engine reads and writes.
  kv_layout pool_layout() const;

 private:
  /// A sequence's blocks in one pool, for one step.
  struct block_group {
    uint32_t pool;
    std::vector<uint32_t> blocks;
    std::vector<int32_t> block_pos;
  };
  /// A micro-batch: entries [e0, e1) of entries_, rows [r0, r1) of the activations.
  struct lane_span {
    size_t e0 = 0, e1 = 0;
    int r0 = 0, r1 = 0;
  };
  /// Per entry: its rows in the step and its blocks grouped by pool.
  struct entry_plan {
    int row0 = 0;
    std::vector<block_group> groups;  // local group first when present
    size_t partial_offset = 0;        // floats into the partials buffer
    // The local group's block lists as the device reads them (the host vectors on host-memory backends).
    const uint32_t* local_blocks = nullptr;
    const int32_t* local_block_pos = nullptr;
  };

  engine() = default;
  /// The activation buffers, sized by the options.
  status allocate_buffers();
  /// A device buffer of `floats` floats the engine owns (null when there is not enough memory, or for 0 floats).
  float* owned_floats(size_t floats);
  /// Points the step's index arrays at device memory: one upload, or the host vectors themselves.
  status stage_indices();
  /// Remote attention on a device backend: the queries of a lane's entries with remote blocks, downloaded.
  status stage_remote_queries(int lane);
  /// Remote attention on a device backend: the partials the router wrote on the host for a lane, uploaded.
  status upload_remote_partials(int lane);
  /// Whether `batch` runs as two lanes: enough tokens, and blocks that another pool attends.
  bool overlaps(std::span<const batch_entry> batch, const kv_pools& pools) const;
  /// entries_ and lanes_: the batch as one lane, or as two split at its middle row (an entry across it
  /// becomes two: the first part samples nothing).
  void split_into_lanes(std::span<const batch_entry> batch, bool overlap);
  status plan(const kv_pools& pools);
  /// A lane's layer up to its attention: norm, QKV, RoPE, new KV stored, remote jobs sent, local attention.
  /// y (+)= x w^T over the packed matrix's parts, each into its own columns of y. x [m][k]; y [m][rows of w].
  status project(const float* x, size_t ldx, int m, int k, const packed_matrix& w, float* y, size_t ldy,
                 bool accumulate);
  status layer_front(int layer, int lane, const kv_pools& pools, attention_router* router);
  /// The rest of a lane's layer: the partials merged, output projection and feed-forward.
  status layer_back(int layer, int lane, attention_router* router);
  status begin_attention(int layer, int lane, const kv_pools& pools, attention_router* router);
  /// The lane's partials merged into its attention output, each head's sink logit (where the model has them)
  /// in its softmax's denominator.
  status end_attention(int lane, const float* sinks, attention_router* router);
  /// The m, e and ma partials of entry i, group g, in `base` (the device buffer or its host copy).
  std::array<float*, 3> partials_of(float* base, size_t i, size_t g) const;
  status store_new_kv(int layer, const lane_span& lane, const kv_pools& pools);
  /// After a lane's KV of `layer` is stored: marks the local blocks of the foreign chunks that end in this lane
  /// written up to that layer.
  status mark_foreign_written(int layer, int lane, const kv_pools& pools);
  status classify();
  /// The feed-forward of rows [r0, r0 + m): xb (normed) in, its output added into x.
  status feed_forward(const device_weights::layer& w, size_t r0, int m);
  // The mixture of experts (engine_experts.cpp).
  /// The experts' buffers, [max_batch_tokens * n_experts_used] rows each, and the routing's staging.
  status allocate_expert_buffers();
  /// Each row's experts by the router; each expert's rows as one product; their outputs weighed into x; then the
  /// shared expert, gated.
  status experts_forward(const device_weights::layer& w, const float* xb, float* x, int m);
  status shared_expert_forward(const device_weights::layer& w, const float* xb, float* x, int m);
  /// Runs `project_rows(e, first, n)` for each expert e that the routing gave rows (its slots [first, first + n)).
  status for_each_chosen_expert(const std::function<status(int expert, size_t first, int n)>& project_rows);
  /// `floats` floats at `device_src` as the host reads them: the memory itself on a host-memory backend, else a copy
  /// in `host`.
  result<const float*> read_on_host(const float* device_src, size_t floats, std::vector<float>& host);
  /// `bytes` of host memory where the backend reads them: the memory itself on a host-memory backend, else a copy at
  /// byte `offset` of the experts' staging buffer.
  result<const void*> stage_for_device(const void* host, size_t bytes, size_t offset);

  std::shared_ptr<const device_weights> weights_;
  backend* device_ = nullptr;
  engine_options options_;
  std::vector<device_ptr> owned_;  // the activation buffers

  // Activations, [max_batch_tokens][width] each.
  float *x_ = nullptr, *xb_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *h13_ = nullptr, *hb_ = nullptr;
  float* rope_ = nullptr;
  float* logits_ = nullptr;
  device_ptr partials_;
  size_t partials_floats_ = 0;

  std::vector<int32_t> tokens_, pos_, sample_rows_;
  std::vector<int32_t> sampling_rows_;  // per entry that samples, in order: its row of logits
  std::vector<int> logit_row_;          // per batch entry: its first row of logits (-1: none)
  std::vector<float> host_row_;  // a row of logits copied for the host sampler
  std::vector<uint32_t> slots_, slot_pools_;
  // The same as the device reads them (device copies, or the host vectors on host-memory backends).
  const int32_t *tokens_dev_ = nullptr, *pos_dev_ = nullptr, *sample_rows_dev_ = nullptr;
  const uint32_t* slots_dev_ = nullptr;
  std::vector<int32_t> step_words_;  // staging of the index upload
  device_ptr step_words_dev_;
  size_t step_words_capacity_ = 0;
  // Remote attention staging on device backends: queries per entry, partials as laid out on the device.
  std::array<std::vector<float>, attention_router::lanes> remote_q_;
  std::vector<float> remote_partials_;
  std::vector<size_t> remote_q_offset_;  // per entry: floats into its lane's remote_q_ (its rows, ld apart)
  std::array<std::vector<size_t>, attention_router::lanes> job_entries_;  // per remote job: its entry
  std::vector<batch_entry> entries_;  // the step's batch, an entry split where the lanes meet
  std::vector<size_t> origin_;        // per entry: its index in the batch
  std::vector<lane_span> lanes_;
  std::vector<entry_plan> plans_;
  std::array<std::vector<remote_attention_job>, attention_router::lanes> jobs_;
  std::vector<attention_job> local_jobs_;
  step_stats stats_;
  // The mixture of experts: per slot (a token's expert) its input, gate and up, SwiGLU and output; router logits.
  float *expert_x_ = nullptr, *expert_h13_ = nullptr, *expert_h_ = nullptr, *expert_y_ = nullptr;
  float *router_logits_ = nullptr, *shared_h13_ = nullptr, *shared_h_ = nullptr;
  device_ptr expert_staging_;  // the routing's index arrays and weights, on a device backend
  std::vector<float> router_host_;
  expert_routing routing_;
  std::vector<int32_t> shared_rows_;   // 0, 1, ...: each row its own shared expert's slot
  std::vector<float> shared_weight_;   // per row: the sigmoid of its shared expert gate
};

}  // namespace illm::gpu
