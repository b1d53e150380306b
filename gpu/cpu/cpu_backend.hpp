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

  ILLM_BACKEND_MEMORY_OPERATIONS;
  status synchronize() override { return status::ok(); }

  bool computes_with(dtype) const override { return true; }
  ILLM_BACKEND_KERNELS;
  status gemm_tiles(const float* x, size_t ldx, int m, int k, const void* w, dtype w_type, int n, float* y,
                    size_t ldy, bool accumulate) override;

 private:
  /// One unit of attention work: a job's decode rows or one prefill tile, over a range of its blocks.
  struct attention_item {
    int job, kv_head, t0, t1, split, splits;
  };
  /// Cuts the jobs into items: decode jobs by block ranges, prefill jobs by (kv head, token tile),
  /// and long jobs further by block ranges (FlashDecoding) when there are too few items for the pool.
  /// y = x * w^T for more than skinny_rows_max rows of x and 16-bit weights through OpenBLAS, each panel of weight
  /// rows widened once; false (nothing done) in a build without BLAS or for fewer rows.
  bool blas_halves(const float* x, size_t ldx, int m, int k, const uint8_t* w, dtype type, size_t w_row_bytes, int n,
                   float* y, size_t ldy, bool accumulate);
  /// y = x * w^T for m <= skinny_rows_max rows through transpose_rows and gemm_skinny.
  void gemm_rows_skinny(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int n, float* y,
                        size_t ldy, bool accumulate);
  /// y = x * w^T with weights of a type other than f32 (w's rows w_row_bytes apart).
  void gemm_typed(const float* x, size_t ldx, int m, int k, const uint8_t* w, dtype type, size_t w_row_bytes, int n,
                  float* y, size_t ldy, bool accumulate);
  /// x [m][k] (rows ldx apart) quantized into quantized_ in the blocks of block type `type`, split over the pool.
  void quantize_activations(const float* x, size_t ldx, int m, int k, dtype type);
  /// x [m][k] (rows ldx apart) as a product with weights of `type` reads it: for a block type, quantized to 8 bits.
  std::vector<float> activations_as_read(const float* x, size_t ldx, int m, int k, dtype type);
  /// y (+)= xs * w^T by plain loops over weight rows [0, n), each read back to fp32 by row_of(j, k floats).
  template <typename RowOf>
  void reference_rows(const std::vector<float>& xs, int m, int k, int n, float* y, size_t ldy, bool accumulate,
                      RowOf&& row_of) {
    pool_.parallel_for(n, [&](int64_t j0, int64_t j1) {
      std::vector<float> row(static_cast<size_t>(k));
      for (int64_t j = j0; j < j1; ++j) {
        row_of(j, row);
        gemm_reference(xs.data(), size_t(k), m, k, row.data(), size_t(k), 0, 1, y + j, ldy, accumulate);
      }
    });
  }
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
