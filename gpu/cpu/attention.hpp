#pragma once
// MicroAttention and merge on the CPU, single-threaded over a tile; cpu_backend splits a call into
// tiles (kv head x query tokens x block range) over its threads. Layouts are those of gpu/backend.hpp.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu::cpu {

/// Per-thread working memory of attention tiles.
struct attention_scratch {
  std::vector<float> floats;
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

/// Query rows (tokens x heads of one kv head) that a prefill tile holds in the lanes of a vector.
inline constexpr int tile_rows = 16;

/// Query tokens up to which a call takes the decode path (attend_blocks).
inline constexpr int decode_tokens_max = 3;

/// Prefill path: the partial attention of the query heads of `kv_head` for tokens [t0, t1) over blocks
/// [b0, b1), sixteen query rows per vector, so that each key loaded serves all of them. Blocks are
/// accumulated in chunks folded into the running total, so rounding grows with the depth of the
/// chunking, not the context length.
void attend_tile(const attention_args& a, int kv_head, int t0, int t1, int b0, int b1, const partial_out& out,
                 attention_scratch& scratch);

/// Decode path: the partial attention of every head of tokens [t0, t1) over blocks [b0, b1), each block
/// read whole, in storage order (memory bandwidth decides decode at long context).
void attend_blocks(const attention_args& a, int t0, int t1, int b0, int b1, const partial_out& out,
                   attention_scratch& scratch);

/// The same partial by the textbook two-pass softmax, one row at a time (reference mode).
void attend_reference(const attention_args& a, int kv_head, int t0, int t1, const partial_out& out);

/// Rows [r0, r1) (row = token * n_heads + head) of merging n_parts partials, layout as backend::merge:
/// the normalised attention output, token rows out_ld apart; sinks [n_heads] or null (backend::merge).
void merge_rows(const float* m, const float* e, const float* ma, int n_parts, int n_rows, int n_heads, int head_dim,
                int r0, int r1, float* out, size_t out_ld, const float* sinks);

/// Rows [r0, r1) of merging n_parts partials into one partial (m, e, ma), not normalised.
void combine_rows(const float* m, const float* e, const float* ma, int n_parts, int n_rows, int head_dim, int r0,
                  int r1, const partial_out& merged);

}  // namespace illm::gpu::cpu
