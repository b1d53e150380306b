#pragma once
// The backend interface (ggml style): device memory and the kernels the engine is made of. Every
// pointer argument is device memory of this backend (host memory for cpu); sizes and strides are
// explicit, in elements; each tensor's layout is written beside it. `cpu` is the reference that
// every other backend is compared with.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gpu/attention_shape.hpp"
#include "gpu/dtype.hpp"
#include "gpu/gated_activation.hpp"
#include "gpu/host_memory.hpp"
#include "gpu/rope_frequencies.hpp"
#include "gpu/status.hpp"

namespace illm::gpu {

/// Tokens per KV block: the unit of allocation, placement and migration.
inline constexpr int kv_block_tokens = 16;


/// One layer of a KV pool as attention reads or writes it. Block b's K run for kv head h (16 tokens x
/// head_dim, contiguous) starts at base + b * block_stride + k_offset + h * head_stride; V likewise.
struct kv_layer_view {
  void* base = nullptr;
  dtype type = dtype::f32;
  size_t block_stride = 0;  ///< elements between consecutive blocks
  size_t k_offset = 0;      ///< elements from a block's start to this layer's K of head 0
  size_t v_offset = 0;      ///< elements from a block's start to this layer's V of head 0
  size_t head_stride = 0;   ///< elements between two heads' runs
};


/// One MicroAttention: the partial attention of n_q query tokens over some blocks of a pool.
/// q [n_q][n_heads][head_dim] rows q_ld apart; q_pos [n_q]: a query sees keys at positions <= its own (and, with
/// a window, > its own - window).
/// blocks [n_blocks]: physical ids in the pool; block_pos [n_blocks]: position of each block's first token.
/// Out: m, e [n_q][n_heads] (max score, exp-sum; -inf and 0 when no key is seen);
/// ma [n_q][n_heads][head_dim] (exp-weighted sum of V, not normalised).
struct attention_job {
  const float* q = nullptr;
  size_t q_ld = 0;
  const int32_t* q_pos = nullptr;
  int n_q = 0;
  const uint32_t* blocks = nullptr;
  const int32_t* block_pos = nullptr;
  int n_blocks = 0;
  float* m = nullptr;
  float* e = nullptr;
  float* ma = nullptr;
};

namespace grammar {
class constraint;
}

/// How to pick a token from logits. A device samples rows that only temperature and top_p shape (plain()); the
/// host's sampler (gpu/sampler.hpp) applies the rest to a copy of the row's logits.
struct sampling_params {
  float temperature = 0.0f;  ///< 0: greedy (argmax)
  float top_p = 1.0f;        ///< nucleus mass kept when sampling
  int top_k = 0;             ///< only the k most likely tokens may be sampled (0: any)
  float min_p = 0.0f;        ///< tokens less likely than min_p times the most likely one are dropped
  float presence_penalty = 0.0f;   ///< subtracted from the logit of every token the output has (OpenAI's)
  float frequency_penalty = 0.0f;  ///< subtracted once per time the output has the token (OpenAI's)
  /// Logits of tokens the prompt or the output has are divided by it when positive, multiplied when negative
  /// (as Hugging Face's repetition_penalty; 1: off).
  float repetition_penalty = 1.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< added to those tokens' logits
  int min_tokens = 0;  ///< the stop ids cannot be sampled before the output has this many tokens
  int logprobs = -1;   ///< the chosen token's log probability and this many alternatives' are reported (-1: none)
  /// Only tokens that keep the output in this grammar's language may be sampled (structured outputs; none: any).
  std::shared_ptr<const grammar::constraint> constraint;

  /// True when only temperature, top_p, top_k and min_p shape the choice and nothing is reported.
  bool plain() const {
    return presence_penalty == 0.0f && frequency_penalty == 0.0f && repetition_penalty == 1.0f && logit_bias.empty() &&
           min_tokens == 0 && logprobs < 0 && !constraint;
  }
};

/// Sampling defaults a model ships (generation_config.json), for requests that give none.
struct generation_defaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;

  /// `base` with each default the model gives in place of base's.
  sampling_params over(sampling_params base) const {
    base.temperature = temperature.value_or(base.temperature);
    base.top_p = top_p.value_or(base.top_p);
    base.top_k = top_k.value_or(base.top_k);
    base.min_p = min_p.value_or(base.min_p);
    base.repetition_penalty = repetition_penalty.value_or(base.repetition_penalty);
    return base;
  }
};

/// Device memory and kernels. Calls may be asynchronous on a device; synchronize() waits.
class backend {
 public:
  virtual ~backend() = default;

  /// "cpu", "cuda", ...
  virtual std::string name() const = 0;
  /// The name with what sets its speed apart (a cpu backend's threads), for profiles and reports.
  virtual std::string description() const { return name(); }
  /// True when device pointers are host pointers (no copies needed to read them).
  virtual bool host_memory() const = 0;

  /// Device memory, aligned for any kernel; nullptr when there is not enough.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  virtual status upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual status download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual status copy(void* dst, const void* src, size_t bytes) = 0;
  virtual status synchronize() = 0;

  /// Host memory that copies to and from this device run from at full speed (pinned on a GPU), aligned for
  /// any copy; nullptr when there is not enough. Free with deallocate_host.
  virtual void* allocate_host(size_t bytes) { return host_alloc(bytes); }
  virtual void deallocate_host(void* p) { host_free(p); }

  /// Block `id` of an arena at `base` whose blocks are `block_bytes` apart.
  static char* block_at(const void* base, uint32_t id, size_t block_bytes) {
    return static_cast<char*>(const_cast<void*>(base)) + size_t(id) * block_bytes;
  }

  /// Copies n whole blocks between two arenas of this backend: block dst_ids[i] of dst_base (blocks
  /// block_bytes apart) gets block src_ids[i] of src_base. The ids are host memory. (KV migration.)
  virtual status copy_blocks(void* dst_base, const uint32_t* dst_ids, const void* src_base, const uint32_t* src_ids,
                             int n, size_t block_bytes) {
    for (int i = 0; i < n; ++i)
      ILLM_RETURN_IF_ERROR(
          copy(block_at(dst_base, dst_ids[i], block_bytes), block_at(src_base, src_ids[i], block_bytes), block_bytes));
    return status::ok();
  }

  /// Copies n whole blocks into an arena of GPU `dst_gpu` of this process: block dst_ids[i] of dst_base gets
  /// block src_ids[i] of src_base (this backend's device); direct where the GPUs reach each other (peer access),
  /// else staged through the host by the driver. Unsupported off the cuda backend. The ids are host memory.
  virtual status copy_blocks_to_gpu(int dst_gpu, void* dst_base, const uint32_t* dst_ids, const void* src_base,
                                    const uint32_t* src_ids, int n, size_t block_bytes) {
    return {status_code::unsupported, name() + " has no other GPU to copy to"};
  }

  /// Downloads n whole blocks into host memory one after another: host_dst + i * block_bytes gets block
  /// src_ids[i] of src_base. The ids are host memory.
  virtual status download_blocks(void* host_dst, const void* src_base, const uint32_t* src_ids, int n,
                                 size_t block_bytes) {
    for (int i = 0; i < n; ++i)
      ILLM_RETURN_IF_ERROR(download(block_at(host_dst, uint32_t(i), block_bytes),
                                    block_at(src_base, src_ids[i], block_bytes), block_bytes));
    return status::ok();
  }

  /// Uploads n whole blocks from host memory: block dst_ids[i] of dst_base gets block src_ids[i] of the host
  /// arena host_base (blocks block_bytes apart). The ids are host memory.
  virtual status upload_blocks(void* dst_base, const uint32_t* dst_ids, const void* host_base, const uint32_t* src_ids,
                               int n, size_t block_bytes) {
    for (int i = 0; i < n; ++i)
      ILLM_RETURN_IF_ERROR(upload(block_at(dst_base, dst_ids[i], block_bytes),
                                  block_at(host_base, src_ids[i], block_bytes), block_bytes));
    return status::ok();
  }

  /// Whether gemm and embed read weights of this type (every backend reads f32).
  virtual bool computes_with(dtype weight_type) const { return weight_type == dtype::f32; }

  /// y = x * w^T (+ y when accumulate).
  /// x [m][k] rows ldx apart; w [n][k] rows ldw elements apart (a whole number of blocks for a block type), of type
  /// w_type; y [m][n] rows ldy apart.
  virtual status gemm(const float* x, size_t ldx, int m, int k, const void* w, dtype w_type, size_t ldw, int n,
                      float* y, size_t ldy, bool accumulate) = 0;

  /// The same with w stored in tiles of 8 rows (gpu/quant/tiles.hpp; n a multiple of 8, rows k long): for the
  /// backends that read their weights in host memory; the others refuse.
  virtual status gemm_tiles(const float* x, size_t ldx, int m, int k, const void* w, dtype w_type, int n, float* y,
                            size_t ldy, bool accumulate) {
    (void)x, (void)ldx, (void)m, (void)k, (void)w, (void)n, (void)y, (void)ldy, (void)accumulate;
    return {status_code::unsupported, "the " + name() + " backend reads no " + to_string(w_type) + " tiles"};
  }

  /// y = x / rms(x) * weight per row. x [m][n] rows ldx apart; weight [n]; y [m][n] rows ldy apart.
  virtual status rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y,
                         size_t ldy) = 0;

  /// y = x / rms(x) * weight for every head of every row, in place (a head's RMSNorm before RoPE).
  /// x [m][n_heads][head_dim] rows ld apart; weight [head_dim].
  virtual status head_rmsnorm(float* x, size_t ld, int m, int n_heads, int head_dim, const float* weight,
                              float eps) = 0;

  /// x[i][j] += bias[j]. x [m][n] rows ld apart; bias [n].
  virtual status add_bias(float* x, size_t ld, int m, int n, const float* bias) = 0;

  /// cos and sin of pos * freq.inverse(i, head_dim) per token and pair i, times freq.magnitude(), computed in fp64
  /// so that every position, far beyond the training context, is exact. pos [m]; table [m][head_dim / 2][2: cos, sin].
  virtual status rope_table(const int32_t* pos, int m, int head_dim, const rope_frequencies& freq,
                            float* table) = 0;

  /// Rotates the adjacent pairs (2i, 2i+1) of every head in place by the table's angles.
  /// x [m][n_heads][head_dim] rows ld apart; table [m][head_dim / 2][2] from rope_table.
  virtual status rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table) = 0;

  /// out = act(gate, up) elementwise (plain: silu(gate) * up). gate, up [m][n] rows ld_in apart; out [m][n] rows
  /// ld_out apart.
  virtual status silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out, size_t ld_out,
                          const gated_activation& act) = 0;

  /// out[i] = table[tokens[i]] in fp32. tokens [m]; table [vocab][dim] of type `type`; out [m][dim] rows ld_out apart.
  virtual status embed(const int32_t* tokens, int m, const void* table, dtype type, int dim, float* out,
                       size_t ld_out) = 0;

  /// dst[i] = src[rows[i]]. src rows ld_src apart; rows [n]; dst [n][width] rows ld_dst apart.
  virtual status gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                             size_t ld_dst) = 0;

  /// dst[i] += sum over j < k of weights[i * k + j] * src[slots[i * k + j]]: each row's k experts' outputs, weighed,
  /// added into it. src rows ld_src apart; slots, weights [m][k]; dst [m][width] rows ld_dst apart.
  virtual status add_weighted_rows(const float* src, size_t ld_src, const int32_t* slots, const float* weights, int m, int k,
                              int width, float* dst, size_t ld_dst) = 0;

  /// Writes K and V of m tokens into their slots. k, v [m][n_kv_heads][head_dim] rows ld apart;
  /// slots [m]: block * 16 + offset within the block.
  virtual status store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                          const kv_layer_view& dst, const uint32_t* slots) = 0;

  /// MicroAttention of a batch of jobs over one pool layer (each job: one sequence's queries against
  /// its blocks in this pool), run together so that the device is busy even when every job is small.
  virtual status micro_attention_batch(const attention_shape& shape, const kv_layer_view& kv,
                                       std::span<const attention_job> jobs) = 0;

  /// MicroAttention of one job (see attention_job for the layouts).
  status micro_attention(const attention_shape& shape, const float* q, size_t q_ld, const int32_t* q_pos, int n_q,
                         const kv_layer_view& kv, const uint32_t* blocks, const int32_t* block_pos, int n_blocks,
                         float* m, float* e, float* ma) {
    const attention_job job{q, q_ld, q_pos, n_q, blocks, block_pos, n_blocks, m, e, ma};
    return micro_attention_batch(shape, kv, {&job, 1});
  }

  /// Merges n_parts partials into the attention output.
  /// m, e [n_parts][n_rows]; ma [n_parts][n_rows][head_dim] with n_rows = n_q * n_heads;
  /// out [n_q][n_heads][head_dim] rows out_ld apart; sinks [n_heads] or null: head h's learned logit, which joins
  /// the softmax's denominator (exp(sink - max) added to the exp-sum) and adds no value.
  virtual status merge(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads,
                       int head_dim, float* out, size_t out_ld, const float* sinks) = 0;

  /// Picks one token per row. logits [n][vocab] rows ld apart; params [n]; rng [n] (host memory,
  /// advanced in place); out [n] (host memory).
  virtual status sample(const float* logits, size_t ld, int n, int vocab, const sampling_params* params,
                        uint64_t* rng, int32_t* out) = 0;
};

/// Frees device memory with the backend that allocated it.
struct device_deleter {
  backend* device = nullptr;
  void operator()(void* p) const {
    if (p) device->deallocate(p);
  }
};

/// Owned device memory.
using device_ptr = std::unique_ptr<void, device_deleter>;

/// Allocates `bytes` on `device`, or returns an empty pointer.
inline device_ptr make_device_buffer(backend& device, size_t bytes) {
  return device_ptr(device.allocate(bytes), device_deleter{&device});
}

}  // namespace illm::gpu

/// Declares, inside a backend's class, the memory operations a device backend defines in its source file: allocate,
/// deallocate, upload, download and copy (their briefs are backend's).
#define ILLM_BACKEND_MEMORY_OPERATIONS                                     \
  void* allocate(size_t bytes) override;                                   \
  void deallocate(void* p) override;                                       \
  status upload(void* dst, const void* host_src, size_t bytes) override;   \
  status download(void* host_dst, const void* src, size_t bytes) override; \
  status copy(void* dst, const void* src, size_t bytes) override

/// Declares, inside a backend's class, the kernels a computing backend defines in its source file, from gemm to
/// sample (their briefs are backend's). One list, so that a change of a kernel's signature is made once.
#define ILLM_BACKEND_KERNELS                                                                                       \
  status gemm(const float* x, size_t ldx, int m, int k, const void* w, dtype w_type, size_t ldw, int n, float* y,  \
              size_t ldy, bool accumulate) override;                                                               \
  status rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y, size_t ldy)   \
      override;                                                                                                    \
  status head_rmsnorm(float* x, size_t ld, int m, int n_heads, int head_dim, const float* weight, float eps)       \
      override;                                                                                                    \
  status add_bias(float* x, size_t ld, int m, int n, const float* bias) override;                                  \
  status rope_table(const int32_t* pos, int m, int head_dim, const rope_frequencies& freq, float* table) override; \
  status rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table) override;                 \
  status silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out, size_t ld_out,      \
                  const gated_activation& act) override;                                                           \
  status embed(const int32_t* tokens, int m, const void* table, dtype type, int dim, float* out, size_t ld_out)    \
      override;                                                                                                    \
  status gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,           \
                     size_t ld_dst) override;                                                                      \
  status add_weighted_rows(const float* src, size_t ld_src, const int32_t* slots, const float* weights, int m, int k,   \
                      int width, float* dst, size_t ld_dst) override;                                              \
  status store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,                  \
                  const kv_layer_view& dst, const uint32_t* slots) override;                                       \
  status micro_attention_batch(const attention_shape& shape, const kv_layer_view& kv,                              \
                               std::span<const attention_job> jobs) override;                                      \
  status merge(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads, int head_dim,   \
               float* out, size_t out_ld, const float* sinks) override;                                            \
  status sample(const float* logits, size_t ld, int n, int vocab, const sampling_params* params, uint64_t* rng,    \
                int32_t* out) override
