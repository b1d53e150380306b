#pragma once
// Single-threaded CPU kernels; cpu_backend splits the work over its threads and calls these on slices.
// Layouts are those of gpu/backend.hpp.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu::cpu {

/// y[i][j] (+)= dot(x[i], w[j]) for rows i < m and columns j in [j0, j1); fastest for m <= 4
/// (the decode path: each weight row is read once for all rows of x).
void gemv(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y, size_t ldy,
          bool accumulate);

/// The same product through plain loops, for reference mode.
void gemm_reference(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int j0, int j1, float* y,
                    size_t ldy, bool accumulate);

void rmsnorm_row(const float* x, const float* weight, int n, float eps, float* y);
void rope_table_row(int32_t pos, int head_dim, float theta, float* table);
void rope_row(float* x, int n_heads, int head_dim, const float* table);
void silu_mul_row(const float* gate, const float* up, int n, float* out);

/// Per-thread working memory of attention tiles.
struct attention_scratch {
  std::vector<float> state;  // running and chunk (m, e, acc) of every row of a tile
  std::vector<float> k_transposed;
};

/// Arguments of one micro_attention call (see backend::micro_attention).
struct attention_args {
  attention_shape shape;
  const float* q = nullptr;
  size_t q_ld = 0;
  const int32_t* q_pos = nullptr;
  int n_q = 0;
  kv_layer_view kv;
  const uint32_t* blocks = nullptr;
  const int32_t* block_pos = nullptr;
  int n_blocks = 0;
};

/// Where a tile writes its partial: m, e [n_q][n_heads], ma [n_q][n_heads][head_dim].
struct partial_out {
  float* m = nullptr;
  float* e = nullptr;
  float* ma = nullptr;
};

/// Partial attention of the query heads of `kv_head` for tokens [t0, t1) over blocks [b0, b1),
/// vectorised, with blocks accumulated in chunks so rounding grows with log-like depth, not length.
void attend_tile(const attention_args& a, int kv_head, int t0, int t1, int b0, int b1, const partial_out& out,
                 attention_scratch& scratch);

/// The same partial by the textbook two-pass softmax, one row at a time.
void attend_reference(const attention_args& a, int kv_head, int t0, int t1, const partial_out& out);

/// Rows [r0, r1) (row = token * n_heads + head) of merging n_parts partials, layout as backend::merge:
/// the normalised attention output, token rows out_ld apart.
void merge_rows(const float* m, const float* e, const float* ma, int n_parts, int n_rows, int n_heads, int head_dim,
                int r0, int r1, float* out, size_t out_ld);
/// Rows [r0, r1) of merging n_parts partials into one partial (m, e, ma), not normalised.
void combine_rows(const float* m, const float* e, const float* ma, int n_parts, int n_rows, int head_dim, int r0,
                  int r1, const partial_out& merged);

}  // namespace illm::gpu::cpu
