#include "gpu/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <cblas.h>
#include <fmt/format.h>

#include "gpu/host_memory.hpp"
#include "gpu/sampler.hpp"

namespace illm::gpu::cpu {

namespace {

/// Below this many floats of work an op runs on the calling thread: waking the pool costs more.
constexpr int64_t parallel_threshold = 1 << 14;

}  // namespace

cpu_backend::cpu_backend(int n_threads, cpu_mode mode)
    : mode_(mode), pool_(std::max(1, n_threads)), scratch_(size_t(std::max(1, n_threads))) {
  // The pool splits every product itself; OpenBLAS runs single-threaded inside each slice.
  openblas_set_num_threads(1);
}

void* cpu_backend::allocate(size_t bytes) { return host_alloc(bytes); }

void cpu_backend::deallocate(void* p) { host_free(p); }

status cpu_backend::upload(void* dst, const void* host_src, size_t bytes) {
  std::memcpy(dst, host_src, bytes);
  return status::ok();
}

status cpu_backend::download(void* host_dst, const void* src, size_t bytes) {
  std::memcpy(host_dst, src, bytes);
  return status::ok();
}

status cpu_backend::copy(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return status::ok();
}

status cpu_backend::gemm(const float* x, size_t ldx, int m, int k, const void* w_raw, dtype w_type, size_t ldw,
                         int n, float* y, size_t ldy, bool accumulate) {
  if (w_type != dtype::f32)
    return {status_code::unsupported, fmt::format("cpu gemm takes f32 weights, not {}", to_string(w_type))};
  const auto* w = static_cast<const float*>(w_raw);
  if (mode_ == cpu_mode::reference) {
    pool_.parallel_for(n, [&](int64_t j0, int64_t j1) {
      gemm_reference(x, ldx, m, k, w, ldw, int(j0), int(j1), y, ldy, accumulate);
    });
  } else if (m <= 4) {
    // Decode: each thread streams its own slice of weight rows once.
    pool_.parallel_for(n, [&](int64_t j0, int64_t j1) {
      gemv(x, ldx, m, k, w, ldw, int(j0), int(j1), y, ldy, accumulate);
    });
  } else if (n / pool_.size() >= 64) {
    pool_.parallel_for((n + 15) / 16, [&](int64_t g0, int64_t g1) {
      const int j0 = int(g0 * 16), j1 = int(std::min<int64_t>(g1 * 16, n));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, j1 - j0, k, 1.0f, x, int(ldx), w + size_t(j0) * ldw,
                  int(ldw), accumulate ? 1.0f : 0.0f, y + j0, int(ldy));
    });
  } else {
    pool_.parallel_for(m, [&](int64_t i0, int64_t i1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(i1 - i0), n, k, 1.0f, x + size_t(i0) * ldx, int(ldx),
                  w, int(ldw), accumulate ? 1.0f : 0.0f, y + size_t(i0) * ldy, int(ldy));
    });
  }
  return status::ok();
}

status cpu_backend::rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y,
                            size_t ldy) {
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) rmsnorm_row(x + size_t(i) * ldx, weight, n, eps, y + size_t(i) * ldy);
  };
  if (int64_t(m) * n < parallel_threshold)
    rows(0, m);
  else
    pool_.parallel_for(m, rows);
  return status::ok();
}

status cpu_backend::rope_table(const int32_t* pos, int m, int head_dim, float theta, float* table) {
  for (int i = 0; i < m; ++i) rope_table_row(pos[i], head_dim, theta, table + size_t(i) * head_dim);
  return status::ok();
}

status cpu_backend::rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table) {
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) rope_row(x + size_t(i) * ld, n_heads, head_dim, table + size_t(i) * head_dim);
  };
  if (int64_t(m) * n_heads * head_dim < parallel_threshold)
    rows(0, m);
  else
    pool_.parallel_for(m, rows);
  return status::ok();
}

status cpu_backend::silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out,
                             size_t ld_out) {
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      silu_mul_row(gate + size_t(i) * ld_in, up + size_t(i) * ld_in, n, out + size_t(i) * ld_out);
  };
  if (int64_t(m) * n < parallel_threshold)
    rows(0, m);
  else
    pool_.parallel_for(m, rows);
  return status::ok();
}

status cpu_backend::embed(const int32_t* tokens, int m, const float* table, int dim, float* out, size_t ld_out) {
  for (int i = 0; i < m; ++i)
    std::memcpy(out + size_t(i) * ld_out, table + size_t(tokens[i]) * dim, sizeof(float) * size_t(dim));
  return status::ok();
}

status cpu_backend::gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                                size_t ld_dst) {
  for (int i = 0; i < n; ++i)
    std::memcpy(dst + size_t(i) * ld_dst, src + size_t(rows[i]) * ld_src, sizeof(float) * size_t(width));
  return status::ok();
}

status cpu_backend::store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                             const kv_layer_view& dst, const uint32_t* slots) {
  if (dst.type != dtype::f32)
    return {status_code::unsupported, fmt::format("cpu KV pools hold f32, not {}", to_string(dst.type))};
  auto* base = static_cast<float*>(dst.base);
  const size_t bytes = sizeof(float) * size_t(head_dim);
  for (int i = 0; i < m; ++i) {
    const size_t block = slots[i] / kv_block_tokens, offset = slots[i] % kv_block_tokens;
    for (int h = 0; h < n_kv_heads; ++h) {
      const size_t run = block * dst.block_stride + size_t(h) * dst.head_stride + offset * head_dim;
      std::memcpy(base + run + dst.k_offset, k + size_t(i) * ld + size_t(h) * head_dim, bytes);
      std::memcpy(base + run + dst.v_offset, v + size_t(i) * ld + size_t(h) * head_dim, bytes);
    }
  }
  return status::ok();
}

status cpu_backend::micro_attention(const attention_shape& shape, const float* q, size_t q_ld, const int32_t* q_pos,
                                    int n_q, const kv_layer_view& kv, const uint32_t* blocks,
                                    const int32_t* block_pos, int n_blocks, float* m, float* e, float* ma) {
  if (kv.type != dtype::f32)
    return {status_code::unsupported, fmt::format("cpu attention reads f32 KV, not {}", to_string(kv.type))};
  if (shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0)
    return {status_code::invalid_argument, "n_heads must be a multiple of n_kv_heads"};
  const attention_args a{shape, q, q_ld, q_pos, n_q, kv, blocks, block_pos, n_blocks};
  if (mode_ == cpu_mode::reference) {
    pool_.parallel_for_dynamic(shape.n_kv_heads, [&](int64_t h, int) {
      attend_reference(a, int(h), 0, n_q, {m, e, ma});
    });
  } else {
    attend_split(a, m, e, ma);
  }
  return status::ok();
}

void cpu_backend::attend_split(const attention_args& a, float* m, float* e, float* ma) {
  const int group = a.shape.n_heads / a.shape.n_kv_heads, hd = a.shape.head_dim;
  const int tile = std::max(1, tile_rows / group);
  const int n_tiles = (a.n_q + tile - 1) / tile;
  const int64_t base_items = int64_t(a.shape.n_kv_heads) * n_tiles;
  // Few heads and tokens but a long context (decode): split the blocks too (FlashDecoding), and
  // combine the splits' partials afterwards.
  const int want = 4 * pool_.size();
  int splits = 1;
  if (base_items < want && a.n_blocks >= 64)
    splits = int(std::min<int64_t>((want + base_items - 1) / base_items, a.n_blocks / 32));
  auto run_item = [&](int64_t item, int thread, int split, const partial_out& out) {
    const int kv_head = int(item % a.shape.n_kv_heads), t0 = int(item / a.shape.n_kv_heads) * tile;
    const int b0 = int(int64_t(a.n_blocks) * split / splits), b1 = int(int64_t(a.n_blocks) * (split + 1) / splits);
    attend_tile(a, kv_head, t0, std::min(a.n_q, t0 + tile), b0, b1, out, scratch_[size_t(thread)]);
  };
  if (splits == 1) {
    pool_.parallel_for_dynamic(base_items, [&](int64_t item, int thread) { run_item(item, thread, 0, {m, e, ma}); });
    return;
  }
  const size_t rows = size_t(a.n_q) * a.shape.n_heads;
  split_partials_.resize(size_t(splits) * rows * (2 + hd));
  float* part_m = split_partials_.data();
  float* part_e = part_m + size_t(splits) * rows;
  float* part_ma = part_e + size_t(splits) * rows;
  pool_.parallel_for_dynamic(base_items * splits, [&](int64_t item, int thread) {
    const int split = int(item % splits);
    run_item(item / splits, thread, split,
             {part_m + split * rows, part_e + split * rows, part_ma + split * rows * hd});
  });
  pool_.parallel_for(int64_t(rows), [&](int64_t r0, int64_t r1) {
    combine_rows(part_m, part_e, part_ma, splits, int(rows), hd, int(r0), int(r1), {m, e, ma});
  });
}

status cpu_backend::merge(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads,
                          int head_dim, float* out, size_t out_ld) {
  const int rows = n_q * n_heads;
  auto slice = [&](int64_t r0, int64_t r1) {
    merge_rows(m, e, ma, n_parts, rows, n_heads, head_dim, int(r0), int(r1), out, out_ld);
  };
  if (int64_t(rows) * n_parts * head_dim < parallel_threshold)
    slice(0, rows);
  else
    pool_.parallel_for(rows, slice);
  return status::ok();
}

status cpu_backend::sample(const float* logits, size_t ld, int n, int vocab, const sampling_params* params,
                           uint64_t* rng, int32_t* out) {
  for (int i = 0; i < n; ++i) out[i] = sample_token(logits + size_t(i) * ld, vocab, params[i], rng[i]);
  return status::ok();
}

}  // namespace illm::gpu::cpu
