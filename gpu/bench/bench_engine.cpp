// `illm bench engine` measured: each part sets up its own memory, fills it with seeded values, warms
// up, then times a fixed amount of work and counts the tokens and bytes it handled.
#include "gpu/bench/bench_engine.hpp"
#include "gpu/bench/decode_rig.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>

#include "gpu/batcher.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/cpu/simd.hpp"
#include "gpu/generate.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/model_config.hpp"
#include "gpu/model_files.hpp"
#include "gpu/sampler.hpp"
#include "gpu/text.hpp"
#include "gpu/bench/bench_support.hpp"

namespace illm::gpu {

namespace {

using namespace bench_detail;


constexpr int decode_batches[] = {1, 8, 16, 32, 64, 128};
/// The batches of a model-only run (the sizes people run, compared with llama.cpp's batched bench).
constexpr int model_only_batches[] = {1, 16, 64};
constexpr int decode_prompt_tokens = 8;
constexpr int decode_warmup_steps = 4;
constexpr int prefill_tokens = 512;
constexpr int prefill_runs = 3;
constexpr int bandwidth_contexts[] = {1024, 4096, 16384, 65536};
constexpr const char* attention_preset = "llama2-7b";
constexpr uint64_t memory_buffer_bytes = uint64_t(1) << 30;
constexpr int memory_passes = 5;
/// KV bytes the timed MicroAttention calls of one context read in all (sets the call count).
constexpr uint64_t bandwidth_bytes_per_context = uint64_t(4) << 30;

// ---- a. Decode and prefill -------------------------------------------------------------------------


int timed_decode_steps(int batch) {
  return batch <= 8 ? 64 : batch <= 32 ? 48 : 32;
}

/// True when every sequence has its whole prompt cached and one token pending: the next step decodes.
bool all_decoding(const std::vector<std::shared_ptr<sequence>>& seqs) {
  return std::all_of(seqs.begin(), seqs.end(), [](const auto& s) {
    return s->n_cached >= s->n_prompt && int(s->tokens.size()) - s->n_cached == 1;
  });
}

result<decode_figure> measure_decode(engine& eng, backend& device, int batch, uint64_t seed) {
  const int steps = timed_decode_steps(batch);
  const int tokens_per_seq = decode_prompt_tokens + 64 + decode_warmup_steps + steps;
  auto pool = kv_pool::create(device, eng.pool_layout(), uint32_t(batch) * blocks_for_tokens(tokens_per_seq));
  if (!pool.is_ok()) return pool.error();
  kv_pools view{{&pool.value()}, 0};
  spread_block_source source(view.by_id, seed);
  batcher runner(eng, source, {eng.options().max_batch_tokens, batch});
  uint64_t rng = seed;
  std::vector<std::shared_ptr<sequence>> seqs;
  for (int i = 0; i < batch; ++i) {
    seqs.push_back(
        bench_sequence(uint64_t(i) + 1, seeded_prompt(decode_prompt_tokens, eng.config().vocab_size, rng), 1 << 30));
    runner.add(seqs.back());
  }
  for (int i = 0; !all_decoding(seqs); ++i) {
    if (i > 64) return status{status_code::internal, text::format("batch {} never reached pure decode", batch)};
    ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
  }
  for (int i = 0; i < decode_warmup_steps; ++i) ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
  decode_figure out{batch, steps, 0, 0};
  const auto t0 = bench_clock::now();
  for (int i = 0; i < steps; ++i) {
    ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
    out.tokens += uint64_t(runner.last_step_decodes());
  }
  out.seconds = seconds_since(t0);
  for (const auto& s : seqs)
    if (s->finished() || s->preemptions > 0)
      return status{status_code::internal, text::format("batch {}: sequence {} stopped or was preempted", batch, s->id)};
  return out;
}

result<prefill_figure> measure_prefill(engine& eng, backend& device, uint64_t seed) {
  auto pool = kv_pool::create(device, eng.pool_layout(), blocks_for_tokens(prefill_tokens + 1));
  if (!pool.is_ok()) return pool.error();
  kv_pools view{{&pool.value()}, 0};
  spread_block_source source(view.by_id, seed);
  prefill_figure out{prefill_tokens, prefill_runs, 0};
  uint64_t rng = seed;
  for (int run = 0; run < prefill_runs; ++run) {
    // A fresh sequence on a fresh batcher: its KV starts empty; one new token retires it.
    batcher runner(eng, source, {prefill_tokens, 1});
    auto seq = bench_sequence(uint64_t(run) + 1, seeded_prompt(prefill_tokens, eng.config().vocab_size, rng), 1);
    runner.add(seq);
    const auto t0 = bench_clock::now();
    ILLM_RETURN_IF_ERROR(runner.step(view, nullptr));
    const double seconds = seconds_since(t0);
    if (runner.last_step_tokens() != prefill_tokens || !runner.idle())
      return status{status_code::internal, text::format("the prefill step processed {} of {} tokens",
                                                       runner.last_step_tokens(), prefill_tokens)};
    out.best_seconds = run == 0 ? seconds : std::min(out.best_seconds, seconds);
  }
  ILLM_RETURN_IF_ERROR(pool->check());
  return out;
}

// ---- b. MicroAttention bandwidth ---------------------------------------------------------------------

/// Sum of p[0, n), n a multiple of 64, through 4 independent 16-lane accumulators (bound by memory,
/// not by add latency).
float streaming_sum(const float* p, size_t n) {
  cpu::f32x16 a0{}, a1{}, a2{}, a3{};
  for (size_t i = 0; i < n; i += 4 * cpu::lanes) {
    a0 += cpu::load16(p + i);
    a1 += cpu::load16(p + i + cpu::lanes);
    a2 += cpu::load16(p + i + 2 * cpu::lanes);
    a3 += cpu::load16(p + i + 3 * cpu::lanes);
  }
  return cpu::reduce_add((a0 + a1) + (a2 + a3));
}

result<memory_figure> measure_memory(cpu::cpu_backend& device, uint64_t seed) {
  device_ptr buffer = make_device_buffer(device, memory_buffer_bytes);
  if (!buffer) return status{status_code::out_of_memory, "cannot allocate the memory bandwidth buffer"};
  auto* data = static_cast<float*>(buffer.get());
  // Chunks of 4 MiB: filled, then summed by whichever thread is free, into one padded sum per thread.
  const size_t n = memory_buffer_bytes / sizeof(float), chunk = size_t(1) << 20, stride = 16;
  device.pool().parallel_for(int64_t(n / chunk), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fill_seeded(mix64(seed + uint64_t(c)), data + size_t(c) * chunk, chunk);
  });
  memory_figure out{memory_buffer_bytes, device.threads(), memory_passes, 0};
  std::vector<float> sums(size_t(device.threads()) * stride);
  volatile float sink = 0;
  for (int pass = 0; pass < memory_passes; ++pass) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    const auto t0 = bench_clock::now();
    device.pool().parallel_for_dynamic(int64_t(n / chunk), [&](int64_t c, int thread) {
      sums[size_t(thread) * stride] += streaming_sum(data + size_t(c) * chunk, chunk);
    });
    const double seconds = seconds_since(t0);
    out.best_seconds = pass == 0 ? seconds : std::min(out.best_seconds, seconds);
    for (float s : sums) sink = sink + s;  // the sums are used: the reads cannot be skipped
  }
  return out;
}

/// Takes every block of `pool` as one request's, in order, and fills them; returns their ids.
result<std::vector<uint32_t>> fill_whole_pool(cpu::cpu_backend& device, kv_pool& pool, uint64_t seed) {
  std::vector<uint32_t> ids;
  std::vector<block_fill> fills;
  for (uint32_t i = 0; i < pool.total_blocks(); ++i) {
    auto block = pool.allocate({1, 0});
    if (!block.is_ok()) return block.error();
    ids.push_back(block.value());
    fills.push_back({static_cast<float*>(pool.block_data(block.value())), int64_t(i) * kv_block_tokens});
  }
  fill_blocks(device.pool(), pool.layout(), fills, 0, seed);
  return ids;
}

/// MicroAttention over contiguous windows of one large pool: consecutive calls read different blocks,
/// so short contexts do not hit the caches.
result<std::vector<attention_bandwidth_figure>> measure_attention_bandwidth(cpu::cpu_backend& device,
                                                                            const attention_shape& shape,
                                                                            uint64_t seed) {
  const kv_layout layout{1, shape.n_kv_heads, shape.head_dim, dtype::f32};
  const uint32_t total =
      blocks_for_tokens(*std::max_element(std::begin(bandwidth_contexts), std::end(bandwidth_contexts)));
  auto pool = kv_pool::create(device, layout, total);
  if (!pool.is_ok()) return pool.error();
  auto filled = fill_whole_pool(device, pool.value(), seed);
  if (!filled.is_ok()) return filled.error();
  const std::vector<uint32_t>& ids = filled.value();
  const size_t rows = size_t(shape.n_heads);
  std::vector<float> q(rows * shape.head_dim), m(rows), e(rows), ma(rows * shape.head_dim);
  fill_seeded(mix64(seed ^ 0x51), q.data(), q.size());
  std::vector<attention_bandwidth_figure> out;
  uint64_t window = 0;  // runs on across contexts
  for (int context : bandwidth_contexts) {
    const uint32_t n = blocks_for_tokens(context), windows = std::max(1u, total / n);
    const int32_t q_pos = context - 1;
    std::vector<int32_t> block_pos(n);
    for (uint32_t i = 0; i < n; ++i) block_pos[i] = int32_t(i) * kv_block_tokens;
    std::vector<uint32_t> blocks(size_t(windows) * n);
    for (uint32_t w = 0; w < windows; ++w)
      for (uint32_t i = 0; i < n; ++i) blocks[size_t(w) * n + i] = ids[(size_t(w) * n + i) % total];
    attention_bandwidth_figure f{context, 0, visible_kv_bytes(layout, block_pos, q_pos), 0};
    f.calls = int(std::clamp<uint64_t>(bandwidth_bytes_per_context / f.bytes_per_call, 3, 128));
    auto call = [&] {
      const uint32_t* window_blocks = blocks.data() + size_t(window++ % windows) * n;
      return device.micro_attention(shape, q.data(), q.size(), &q_pos, 1, pool->layer_view(0), window_blocks,
                                    block_pos.data(), int(n), m.data(), e.data(), ma.data());
    };
    ILLM_RETURN_IF_ERROR(call());  // warm-up
    for (int i = 0; i < f.calls; ++i) {
      const auto t0 = bench_clock::now();
      ILLM_RETURN_IF_ERROR(call());
      const double seconds = seconds_since(t0);
      f.seconds += seconds;
      f.best_seconds = i == 0 ? seconds : std::min(f.best_seconds, seconds);
    }
    ILLM_RETURN_IF_ERROR(check_finite(ma, "MicroAttention"));
    out.push_back(f);
  }
  return out;
}

status measure_model(const bench_engine_options& options, cpu::cpu_backend& device, bench_engine_result& out) {
  report(options, text::format("loading {}", options.model));
  auto model = load_model(options.model, {.weight_type = options.weight_type});
  if (!model.is_ok()) return model.error();
  out.model = model->name;
  out.weights = model->weights->describe_types();
  out.weight_bytes = model->weights->bytes();
  out.decode_prompt_tokens = decode_prompt_tokens;
  auto made = engine::create(model->weights, device, {prefill_tokens, 128});
  if (!made.is_ok()) return made.error();
  const std::span<const int> batches = options.model_only ? std::span<const int>(model_only_batches)
                                                          : std::span<const int>(decode_batches);
  for (int batch : batches) {
    report(options, text::format("decode at batch {}", batch));
    auto figure = measure_decode(*made.value(), device, batch, options.seed);
    if (!figure.is_ok()) return figure.error();
    out.decode.push_back(figure.value());
  }
  report(options, text::format("prefill of {} tokens", prefill_tokens));
  auto prefill = measure_prefill(*made.value(), device, options.seed);
  if (!prefill.is_ok()) return prefill.error();
  out.prefill = prefill.value();
  return status::ok();
}

status measure_attention(const bench_engine_options& options, cpu::cpu_backend& device, bench_engine_result& out) {
  auto config = preset_config(attention_preset);
  if (!config.is_ok()) return config.error();
  const attention_shape shape = config->attention();
  out.attention_model = attention_preset;
  out.n_heads = shape.n_heads;
  out.n_kv_heads = shape.n_kv_heads;
  out.head_dim = shape.head_dim;
  report(options, "memory read bandwidth");
  auto memory = measure_memory(device, options.seed);
  if (!memory.is_ok()) return memory.error();
  out.memory = memory.value();
  if (options.model_only) return status::ok();
  report(options, "MicroAttention bandwidth");
  auto attention = measure_attention_bandwidth(device, shape, options.seed);
  if (!attention.is_ok()) return attention.error();
  out.attention = std::move(attention).value();
  out.pools = dist_pool_count;
  auto dist = measure_dist_attention(device, shape, options.seed, options);
  if (!dist.is_ok()) return dist.error();
  out.dist = std::move(dist).value();
  return status::ok();
}

}  // namespace

result<decode_figure> measure_decode_throughput(engine& eng, backend& device, int batch, uint64_t seed) {
  return measure_decode(eng, device, batch, seed);
}

result<bench_engine_result> run_bench_engine(const bench_engine_options& options) {
  if (options.threads < 1 || options.threads > 1024)
    return status{status_code::invalid_argument, text::format("--threads {} is outside 1..1024", options.threads)};
  const auto t0 = bench_clock::now();
  cpu::cpu_backend device(options.threads);
  bench_engine_result out;
  out.backend = device.name();
  out.threads = device.threads();
  ILLM_RETURN_IF_ERROR(measure_model(options, device, out));
  ILLM_RETURN_IF_ERROR(measure_attention(options, device, out));
  out.seconds = seconds_since(t0);
  return out;
}

}  // namespace illm::gpu
