#include "gpu/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if ILLM_HAVE_BLAS
#include <cblas.h>
#endif

#include "gpu/cpu/tiled_gemm.hpp"
#include "gpu/cpu/typed_gemm.hpp"
#include "gpu/half.hpp"
#include "gpu/host_memory.hpp"
#include "gpu/quant/blocks.hpp"
#include "gpu/quant/tiles.hpp"
#include "gpu/sampler.hpp"
#include "gpu/text.hpp"

namespace illm::gpu::cpu {

namespace {

/// Below this many floats of work an op runs on the calling thread: waking the pool costs more.
constexpr int64_t parallel_threshold = 1 << 14;

/// Runs rows(i0, i1) over [0, n): on the calling thread when the op's `floats` of work are few, else split
/// over the pool.
template <typename Rows>
void over_rows(thread_pool& pool, int64_t n, int64_t floats, Rows&& rows) {
  if (floats < parallel_threshold)
    rows(0, n);
  else
    pool.parallel_for(n, rows);
}

/// Weight rows [0, n) of a 16-bit type in panels of `panel` rows, split over the pool's threads: each panel widened
/// to fp32 (rows k floats apart) in the thread's own buffer, then fn(first row, rows, the widened panel).
template <typename Fn>
void for_each_widened_panel(thread_pool& pool, int panel, int k, int n, const uint8_t* w, dtype type,
                            size_t w_row_bytes, Fn&& fn) {
  pool.parallel_for((n + panel - 1) / panel, [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> rows;
    rows.resize(size_t(panel) * size_t(k));
    for (int64_t p = p0; p < p1; ++p) {
      const int j0 = int(p * panel), count = std::min(panel, n - j0);
      for (int r = 0; r < count; ++r) widen(type, w + size_t(j0 + r) * w_row_bytes, k, rows.data() + size_t(r) * k);
      fn(j0, count, rows.data());
    }
  });
}

}  // namespace

cpu_backend::cpu_backend(int n_threads, cpu_mode mode)
    : mode_(mode), pool_(std::max(1, n_threads)), scratch_(size_t(std::max(1, n_threads))) {
#if ILLM_HAVE_BLAS
  // The pool splits every product itself; OpenBLAS runs single-threaded inside each slice.
  openblas_set_num_threads(1);
#endif
}

std::string cpu_backend::description() const {
  return text::format("{} ({} thread{})", name(), threads(), threads() == 1 ? "" : "s");
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
  if (w_type != dtype::f32) {
    gemm_typed(x, ldx, m, k, static_cast<const uint8_t*>(w_raw), w_type, row_bytes(w_type, ldw), n, y, ldy, accumulate);
    return status::ok();
  }
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
  } else if (m <= skinny_rows_max) {
    gemm_rows_skinny(x, ldx, m, k, w, ldw, n, y, ldy, accumulate);
#if ILLM_HAVE_BLAS
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
#else
  } else {
    // No BLAS in this build (the GPU-only build): the skinny kernel, 64 rows at a time.
    for (int i0 = 0; i0 < m; i0 += skinny_rows_max)
      gemm_rows_skinny(x + size_t(i0) * ldx, ldx, std::min(skinny_rows_max, m - i0), k, w, ldw, n,
                       y + size_t(i0) * ldy, ldy, accumulate);
#endif
  }
  return status::ok();
}

void cpu_backend::quantize_activations(const float* x, size_t ldx, int m, int k, dtype type) {
  quantized_.resize(m, k, int(block_elements(type)));
  over_rows(pool_, m, int64_t(m) * k, [&](int64_t i0, int64_t i1) { quantized_.quantize(x, ldx, int(i0), int(i1)); });
}

status cpu_backend::gemm_tiles(const float* x, size_t ldx, int m, int k, const void* w_raw, dtype w_type, int n,
                               float* y, size_t ldy, bool accumulate) {
  if (!has_tile_layout(w_type) || n % rows_per_tile != 0 || k % int(block_elements(w_type)) != 0)
    return {status_code::invalid_argument, text::format("no {} tiles of {} rows of {}", to_string(w_type), n, k)};
  const auto* w = static_cast<const uint8_t*>(w_raw);
  const size_t bytes = row_bytes(w_type, size_t(k));
  if (mode_ == cpu_mode::reference) {
    // Each row put back in the file's layout, then read as gemm_typed_reference reads it.
    const std::vector<float> xs = activations_as_read(x, ldx, m, k, w_type);
    reference_rows(xs, m, k, n, y, ldy, accumulate, [&](int64_t j, std::vector<float>& row) {
      thread_local std::vector<uint8_t> file_row;
      file_row.resize(bytes);
      untile_row(w_type, w, size_t(k), size_t(j), file_row.data());
      dequantize(w_type, file_row.data(), size_t(k), row.data());
    });
    return status::ok();
  }
  quantize_activations(x, ldx, m, k, w_type);
  pool_.parallel_for(n / rows_per_tile, [&](int64_t t0, int64_t t1) {
    gemm_stored_tiles(quantized_, m, w_type, w, bytes, int(t0), int(t1), y, ldy, accumulate);
  });
  return status::ok();
}

void cpu_backend::gemm_typed(const float* x, size_t ldx, int m, int k, const uint8_t* w, dtype type, size_t w_row_bytes,
                             int n, float* y, size_t ldy, bool accumulate) {
  if (mode_ == cpu_mode::reference) {
    gemm_typed_reference(x, ldx, m, k, w, type, w_row_bytes, n, y, ldy, accumulate);
  } else if (is_block_type(type)) {
    quantize_activations(x, ldx, m, k, type);
    pool_.parallel_for(n, [&](int64_t j0, int64_t j1) {
      gemm_blocks(quantized_, m, type, w, w_row_bytes, int(j0), int(j1), y, ldy, accumulate);
    });
  } else if (m <= 4 || (halves_in_registers && m <= skinny_rows_max)) {
    pool_.parallel_for(n, [&](int64_t j0, int64_t j1) {
      gemm_halves(x, ldx, m, k, type, w, w_row_bytes, int(j0), int(j1), y, ldy, accumulate);
    });
  } else if (blas_halves(x, ldx, m, k, w, type, w_row_bytes, n, y, ldy, accumulate)) {
    return;
  } else {
    // Batches: the rows of x transposed once per skinny_rows_max of them, each panel of weight rows widened to
    // fp32 once per pass, then the skinny product.
    constexpr int panel = 16;
    for (int i0 = 0; i0 < m; i0 += skinny_rows_max) {
      const int mi = std::min(skinny_rows_max, m - i0), mp = (mi + 15) / 16 * 16;
      transposed_.resize(size_t(k) * mp);
      transpose_rows(x + size_t(i0) * ldx, ldx, mi, k, transposed_.data(), mp);
      for_each_widened_panel(pool_, panel, k, n, w, type, w_row_bytes, [&](int j0, int count, const float* rows) {
        gemm_skinny(transposed_.data(), mp, mi, k, rows, size_t(k), 0, count, y + size_t(i0) * ldy + j0, ldy,
                    accumulate);
      });
    }
  }
}

bool cpu_backend::blas_halves(const float* x, size_t ldx, int m, int k, const uint8_t* w, dtype type,
                              size_t w_row_bytes, int n, float* y, size_t ldy, bool accumulate) {
#if ILLM_HAVE_BLAS
  // More rows than the skinny product takes (a prefill): each panel of weight rows widened to fp32 once, then one
  // sgemm of every row of x against it (the skinny product would widen the weights again per 128 rows).
  if (m <= skinny_rows_max) return false;
  constexpr int panel = 64;
  for_each_widened_panel(pool_, panel, k, n, w, type, w_row_bytes, [&](int j0, int count, const float* rows) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, count, k, 1.0f, x, int(ldx), rows, k,
                accumulate ? 1.0f : 0.0f, y + j0, int(ldy));
  });
  return true;
#else
  return false;
#endif
}

std::vector<float> cpu_backend::activations_as_read(const float* x, size_t ldx, int m, int k, dtype type) {
  // For a block type: quantized to 8 bits in the weights' blocks, as the integer products see them.
  std::vector<float> xs(size_t(m) * size_t(k));
  if (is_block_type(type)) {
    quantized_.resize(m, k, int(block_elements(type)));
    quantized_.quantize(x, ldx, 0, m);
    for (int i = 0; i < m; ++i) quantized_.dequantize(i, xs.data() + size_t(i) * k);
  } else {
    for (int i = 0; i < m; ++i) std::memcpy(xs.data() + size_t(i) * k, x + size_t(i) * ldx, sizeof(float) * size_t(k));
  }
  return xs;
}

void cpu_backend::gemm_typed_reference(const float* x, size_t ldx, int m, int k, const uint8_t* w, dtype type,
                                       size_t w_row_bytes, int n, float* y, size_t ldy, bool accumulate) {
  const std::vector<float> xs = activations_as_read(x, ldx, m, k, type);
  reference_rows(xs, m, k, n, y, ldy, accumulate, [&](int64_t j, std::vector<float>& row) {
    dequantize(type, w + size_t(j) * w_row_bytes, size_t(k), row.data());
  });
}

void cpu_backend::gemm_rows_skinny(const float* x, size_t ldx, int m, int k, const float* w, size_t ldw, int n,
                                   float* y, size_t ldy, bool accumulate) {
  const int mp = (m + 15) / 16 * 16;
  transposed_.resize(size_t(k) * mp);
  transpose_rows(x, ldx, m, k, transposed_.data(), mp);
  pool_.parallel_for(n, [&](int64_t j0, int64_t j1) {
    gemm_skinny(transposed_.data(), mp, m, k, w, ldw, int(j0), int(j1), y, ldy, accumulate);
  });
}

status cpu_backend::rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y,
                            size_t ldy) {
  over_rows(pool_, m, int64_t(m) * n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) rmsnorm_row(x + size_t(i) * ldx, weight, n, eps, y + size_t(i) * ldy);
  });
  return status::ok();
}

status cpu_backend::head_rmsnorm(float* x, size_t ld, int m, int n_heads, int head_dim, const float* weight,
                                 float eps) {
  over_rows(pool_, m, int64_t(m) * n_heads * head_dim, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int h = 0; h < n_heads; ++h) {
        float* head = x + size_t(i) * ld + size_t(h) * head_dim;
        rmsnorm_row(head, weight, head_dim, eps, head);
      }
  });
  return status::ok();
}

status cpu_backend::add_bias(float* x, size_t ld, int m, int n, const float* bias) {
  over_rows(pool_, m, int64_t(m) * n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int j = 0; j < n; ++j) x[size_t(i) * ld + size_t(j)] += bias[j];
  });
  return status::ok();
}

status cpu_backend::rope_table(const int32_t* pos, int m, int head_dim, const rope_frequencies& freq, float* table) {
  for (int i = 0; i < m; ++i) rope_table_row(pos[i], head_dim, freq, table + size_t(i) * head_dim);
  return status::ok();
}

status cpu_backend::rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table) {
  over_rows(pool_, m, int64_t(m) * n_heads * head_dim, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) rope_row(x + size_t(i) * ld, n_heads, head_dim, table + size_t(i) * head_dim);
  });
  return status::ok();
}

status cpu_backend::silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out,
                             size_t ld_out, const gated_activation& act) {
  over_rows(pool_, m, int64_t(m) * n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float *g = gate + size_t(i) * ld_in, *u = up + size_t(i) * ld_in;
      float* o = out + size_t(i) * ld_out;
      if (act.plain()) silu_mul_row(g, u, n, o);
      else
        for (int j = 0; j < n; ++j) o[j] = act(g[j], u[j]);
    }
  });
  return status::ok();
}

status cpu_backend::embed(const int32_t* tokens, int m, const void* table, dtype type, int dim, float* out,
                          size_t ld_out) {
  const size_t bytes = row_bytes(type, size_t(dim));
  for (int i = 0; i < m; ++i)
    dequantize(type, static_cast<const uint8_t*>(table) + size_t(tokens[i]) * bytes, size_t(dim), out + size_t(i) * ld_out);
  return status::ok();
}

status cpu_backend::gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                                size_t ld_dst) {
  for (int i = 0; i < n; ++i)
    std::memcpy(dst + size_t(i) * ld_dst, src + size_t(rows[i]) * ld_src, sizeof(float) * size_t(width));
  return status::ok();
}

status cpu_backend::add_weighted_rows(const float* src, size_t ld_src, const int32_t* slots, const float* weights, int m,
                                 int k, int width, float* dst, size_t ld_dst) {
  for (int i = 0; i < m; ++i) {
    float* out = dst + size_t(i) * ld_dst;
    for (int j = 0; j < k; ++j) {
      const float w = weights[size_t(i) * size_t(k) + size_t(j)];
      const float* in = src + size_t(slots[size_t(i) * size_t(k) + size_t(j)]) * ld_src;
      for (int c = 0; c < width; ++c) out[c] += w * in[c];
    }
  }
  return status::ok();
}

status cpu_backend::store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                             const kv_layer_view& dst, const uint32_t* slots) {
  if (is_block_type(dst.type))
    return {status_code::unsupported, text::format("cpu KV pools hold f32, f16 or bf16, not {}", to_string(dst.type))};
  auto* base = static_cast<uint8_t*>(dst.base);
  const size_t element = dtype_bytes(dst.type);
  for (int i = 0; i < m; ++i) {
    const size_t block = slots[i] / kv_block_tokens, offset = slots[i] % kv_block_tokens;
    for (int h = 0; h < n_kv_heads; ++h) {
      const size_t run = block * dst.block_stride + size_t(h) * dst.head_stride + offset * head_dim;
      convert_floats(k + size_t(i) * ld + size_t(h) * head_dim, size_t(head_dim), dst.type,
                     base + (run + dst.k_offset) * element);
      convert_floats(v + size_t(i) * ld + size_t(h) * head_dim, size_t(head_dim), dst.type,
                     base + (run + dst.v_offset) * element);
    }
  }
  return status::ok();
}

std::vector<cpu_backend::attention_item> cpu_backend::plan_attention(const attention_shape& shape,
                                                                     std::span<const attention_job> jobs) {
  const int group = shape.n_heads / shape.n_kv_heads;
  const int tile = std::max(1, tile_rows / group);
  auto base_items = [&](const attention_job& j) -> int64_t {
    return j.n_q <= decode_tokens_max ? 1 : int64_t(shape.n_kv_heads) * ((j.n_q + tile - 1) / tile);
  };
  int64_t total = 0;
  for (const attention_job& j : jobs) total += base_items(j);
  // Too few items to keep every thread busy: split long jobs by blocks, at least 8 blocks per split.
  const int64_t want = 4 * int64_t(pool_.size());
  std::vector<attention_item> items;
  for (int ji = 0; ji < int(jobs.size()); ++ji) {
    const attention_job& j = jobs[size_t(ji)];
    const int64_t base = base_items(j);
    int splits = 1;
    if (total < want) splits = int(std::clamp<int64_t>((want + total - 1) / total, 1, std::max(1, j.n_blocks / 8)));
    for (int64_t i = 0; i < base; ++i)
      for (int s = 0; s < splits; ++s) {
        if (j.n_q <= decode_tokens_max) {
          items.push_back({ji, -1, 0, j.n_q, s, splits});
        } else {
          const int t0 = int(i / shape.n_kv_heads) * tile;
          items.push_back({ji, int(i % shape.n_kv_heads), t0, std::min(j.n_q, t0 + tile), s, splits});
        }
      }
  }
  return items;
}

status cpu_backend::micro_attention_batch(const attention_shape& shape, const kv_layer_view& kv,
                                          std::span<const attention_job> jobs) {
  if (is_block_type(kv.type))
    return {status_code::unsupported, text::format("cpu attention reads f32, f16 or bf16 KV, not {}", to_string(kv.type))};
  if (shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0)
    return {status_code::invalid_argument, "n_heads must be a multiple of n_kv_heads"};
  auto args = [&](const attention_job& j) {
    return attention_args{shape, j.q, j.q_ld, j.q_pos, j.n_q, kv, j.blocks, j.block_pos, j.n_blocks};
  };
  if (mode_ == cpu_mode::reference) {
    pool_.parallel_for_dynamic(int64_t(jobs.size()) * shape.n_kv_heads, [&](int64_t item, int) {
      const attention_job& j = jobs[size_t(item / shape.n_kv_heads)];
      attend_reference(args(j), int(item % shape.n_kv_heads), 0, j.n_q, {j.m, j.e, j.ma});
    });
    return status::ok();
  }
  const std::vector<attention_item> items = plan_attention(shape, jobs);
  // Split jobs write one partial per split into scratch, combined afterwards; the others write directly.
  const int hd = shape.head_dim;
  split_offsets_.assign(jobs.size(), 0);
  size_t scratch_floats = 0;
  for (const attention_item& it : items)
    if (it.splits > 1 && split_offsets_[size_t(it.job)] == 0) {
      split_offsets_[size_t(it.job)] = scratch_floats + 1;  // +1: 0 means "not split"
      scratch_floats += size_t(it.splits) * size_t(jobs[size_t(it.job)].n_q) * shape.n_heads * (2 + hd);
    }
  split_partials_.resize(scratch_floats);
  auto split_parts = [&](int job, int splits) -> partial_out {
    const size_t rows = size_t(jobs[size_t(job)].n_q) * shape.n_heads;
    float* base = split_partials_.data() + split_offsets_[size_t(job)] - 1;
    return {base, base + splits * rows, base + 2 * splits * rows};
  };
  auto item_out = [&](const attention_item& it) -> partial_out {
    const attention_job& j = jobs[size_t(it.job)];
    if (it.splits == 1) return {j.m, j.e, j.ma};
    const size_t rows = size_t(j.n_q) * shape.n_heads;
    const partial_out parts = split_parts(it.job, it.splits);
    return {parts.m + it.split * rows, parts.e + it.split * rows, parts.ma + it.split * rows * hd};
  };
  pool_.parallel_for_dynamic(int64_t(items.size()), [&](int64_t i, int thread) {
    const attention_item& it = items[size_t(i)];
    const attention_job& j = jobs[size_t(it.job)];
    const int b0 = int(int64_t(j.n_blocks) * it.split / it.splits);
    const int b1 = int(int64_t(j.n_blocks) * (it.split + 1) / it.splits);
    if (it.kv_head < 0)
      attend_blocks(args(j), it.t0, it.t1, b0, b1, item_out(it), scratch_[size_t(thread)]);
    else
      attend_tile(args(j), it.kv_head, it.t0, it.t1, b0, b1, item_out(it), scratch_[size_t(thread)]);
  });
  for (size_t ji = 0; ji < jobs.size(); ++ji) {
    if (split_offsets_[ji] == 0) continue;
    const attention_job& j = jobs[ji];
    const int splits = std::find_if(items.begin(), items.end(), [&](const attention_item& it) {
                         return it.job == int(ji);
                       })->splits;
    const int rows = j.n_q * shape.n_heads;
    const partial_out parts = split_parts(int(ji), splits);
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      combine_rows(parts.m, parts.e, parts.ma, splits, rows, hd, int(r0), int(r1), {j.m, j.e, j.ma});
    });
  }
  return status::ok();
}

status cpu_backend::merge(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads,
                          int head_dim, float* out, size_t out_ld, const float* sinks) {
  const int rows = n_q * n_heads;
  over_rows(pool_, rows, int64_t(rows) * n_parts * head_dim, [&](int64_t r0, int64_t r1) {
    merge_rows(m, e, ma, n_parts, rows, n_heads, head_dim, int(r0), int(r1), out, out_ld, sinks);
  });
  return status::ok();
}

status cpu_backend::sample(const float* logits, size_t ld, int n, int vocab, const sampling_params* params,
                           uint64_t* rng, int32_t* out) {
  for (int i = 0; i < n; ++i) out[i] = sample_token(logits + size_t(i) * ld, vocab, params[i], rng[i]);
  return status::ok();
}

}  // namespace illm::gpu::cpu
