#pragma once
// The cpu backend: OpenBLAS for large products (the skinny kernel in builds without BLAS), vectorised kernels for the decode path, attention and
// merge, all split over a fork-join pool of the engine's share of cores. Reference mode runs plain
// loops instead, for checking the fast kernels.

#include <memory>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/cpu/attention.hpp"
#include "gpu/cpu/kernels.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/cpu/typed_gemm.hpp"

namespace illm::gpu::cpu {

/// Which kernels the cpu backend runs.
enum class cpu_mode { fast, reference };

/// The cpu backend; device memory is host memory.
class cpu_backend final : public backend {
 public:
  explicit cpu_backend(int n_threads, cpu_mode mode = cpu_mode::fast);

  std::string name() const override { return mode_ == cpu_mode::fast ? "cpu" : "cpu-reference"; }
  std::string description() const override;
  bool host_memory() const override { return true; }
  int threads() const { return pool_.size(); }
  thread_pool& pool() { return pool_; }

  void* allocate(size_t bytes) override;
  void deallocate(void* p) override;
  status upload(void* dst, const void* host_src, size_t bytes) override;
  status download(void* host_dst, const void* src, size_t bytes) override;
  status copy(void* dst, const void* src, size_t bytes) override;
  status synchronize() override { return status::ok(); }

  status gemm(const float* x, size_t ldx, int m, int k, const void* w, dtype w_type, size_t ldw, int n, float* y,
              size_t ldy, bool accumulate) override;
  status rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y,
                 size_t ldy) override;
  status head_rmsnorm(float* x, size_t ld, int m, int n_heads, int head_dim, const float* weight,
                      float eps) override;
  status add_bias(float* x, size_t ld, int m, int n, const float* bias) override;
  status rope_table(const int32_t* pos, int m, int head_dim, const rope_frequencies& freq, float* table) override;
  status rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table) override;
  status silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out, size_t ld_out) override;
  bool computes_with(dtype) const override { return true; }
  status embed(const int32_t* tokens, int m, const void* table, dtype type, int dim, float* out,
               size_t ld_out) override;
  status gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                     size_t ld_dst) override;
  status store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                  const kv_layer_view& dst, const uint32_t* slots) override;
  status micro_attention_batch(const attention_shape& shape, const kv_layer_view& kv,
                               std::span<const attention_job> jobs) override;
  status merge(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads, int head_dim,
               float* out, size_t out_ld) override;
  status sample(const float* logits, size_t ld, int n, int vocab, const sampling_params* params, uint64_t* rng,
                int32_t* out) override;

 private:
  /// One unit of attention work: a job's decode rows or one prefill tile, over a range of its blocks.
  struct attention_item {
    int job, kv_head, t0, t1, split, splits;
  };
  /// Cuts the jobs into items: decode jobs by block ranges, prefill jobs by (kv head, token tile),
  /// and long jobs further by block ranges (FlashDecoding) when there are too few items for the pool.
  /// y = x * w^T for m <= skinny_rows_max rows through transpose_rows and gemm_skinny.
  void gemm_rows_skinny(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int n, float* y,
                        size_t ldy, bool accumulate);
  /// y = x * w^T with weights of a type other than f32 (w's rows w_row_bytes apart).
  void gemm_typed(const float* x, size_t ldx, int m, int k, const uint8_t* w, dtype type, size_t w_row_bytes, int n,
                  float* y, size_t ldy, bool accumulate);
  /// The same through plain loops (reference mode).
  void gemm_typed_reference(const float* x, size_t ldx, int m, int k, const uint8_t* w, dtype type,
                            size_t w_row_bytes, int n, float* y, size_t ldy, bool accumulate);
  std::vector<attention_item> plan_attention(const attention_shape& shape, std::span<const attention_job> jobs);

  cpu_mode mode_;
  thread_pool pool_;
  std::vector<attention_scratch> scratch_;  // one per thread
  std::vector<float> transposed_;           // the rows of a skinny product, transposed
  quantized_rows quantized_;                // the activations of a product with block-type weights
  std::vector<float> split_partials_;       // partials of split-KV items before they are combined
  std::vector<size_t> split_offsets_;       // per job: where its split partials start
};

}  // namespace illm::gpu::cpu
