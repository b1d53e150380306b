// `illm bench engine`: runs gpu::run_bench_engine once and prints its figures side by side, as a
// table or as one JSON object. It measures; it asserts nothing about speed.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cli/bench_migration.hpp"
#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "actors/frontend/trace_replay.hpp"
#include "gpu/bench/bench_engine.hpp"
#ifdef ILLM_HAVE_CUDA
#include "gpu/bench/gpu_bench.hpp"
#endif

namespace illm::cli {

namespace {

/// What `illm bench engine` measures on.
struct bench_flags {
  std::string backend = "cpu";       ///< cpu, or cuda (the figures of illm-gpu-bench)
  std::string model = "stories15M";  ///< of the decode and prefill figures
  std::string weight_type;           ///< --weight-type (empty: as stored)
  bool model_only = false;           ///< --model-only: the model's figures and the memory bandwidth
  int threads = 2;                   ///< CPU threads (the memory bandwidth sum uses as many)
  bool json = false;
};

/// Bytes in binary units, e.g. "96.8 KiB", "1.50 GiB".
std::string human_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (uint64_t(1) << 20)) return fmt::format("{:.1f} KiB", double(bytes) / 1024);
  if (bytes < (uint64_t(1) << 30)) return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
  return fmt::format("{:.2f} GiB", double(bytes) / (1 << 30));
}

double gb_per_second(double bytes_per_second) {
  return bytes_per_second / 1e9;
}

double memory_ratio(const gpu::bench_engine_result& r, const gpu::attention_bandwidth_figure& f) {
  const double memory = r.memory.bytes_per_second();
  return memory > 0 ? f.bytes_per_second() / memory : 0.0;
}

nlohmann::json method_json(const gpu::attention_method_figure& f) {
  return {{"steps", f.steps},
          {"seconds", f.seconds},
          {"seconds_per_step", f.seconds_per_step()},
          {"bytes_moved", f.bytes_moved},
          {"bytes_per_step", f.bytes_per_step()}};
}

nlohmann::json result_json(const gpu::bench_engine_result& r) {
  nlohmann::json j;
  j["backend"] = r.backend;
  j["threads"] = r.threads;
  j["seconds"] = r.seconds;
  j["model"] = r.model;
  j["weights"] = r.weights;
  j["weight_bytes"] = r.weight_bytes;
  j["decode_prompt_tokens"] = r.decode_prompt_tokens;
  for (const auto& d : r.decode)
    j["decode"].push_back({{"batch", d.batch},
                           {"steps", d.steps},
                           {"tokens", d.tokens},
                           {"seconds", d.seconds},
                           {"tokens_per_second", d.tokens_per_second()}});
  j["prefill"] = {{"tokens", r.prefill.tokens},
                  {"runs", r.prefill.runs},
                  {"best_seconds", r.prefill.best_seconds},
                  {"tokens_per_second", r.prefill.tokens_per_second()}};
  j["attention_layer"] = {{"preset", r.attention_model}, {"n_heads", r.n_heads}, {"n_kv_heads", r.n_kv_heads},
                          {"head_dim", r.head_dim},      {"kv_dtype", "f32"},    {"n_layers", 1}};
  j["memory"] = {{"buffer_bytes", r.memory.buffer_bytes},
                 {"threads", r.memory.threads},
                 {"passes", r.memory.passes},
                 {"best_seconds", r.memory.best_seconds},
                 {"bytes_per_second", r.memory.bytes_per_second()}};
  for (const auto& a : r.attention)
    j["micro_attention"].push_back({{"context_tokens", a.context_tokens},
                                    {"calls", a.calls},
                                    {"bytes_per_call", a.bytes_per_call},
                                    {"seconds", a.seconds},
                                    {"seconds_per_call", a.seconds_per_call()},
                                    {"best_seconds", a.best_seconds},
                                    {"bytes_per_second", a.bytes_per_second()},
                                    {"ratio_to_memory_bandwidth", memory_ratio(r, a)}});
  j["dist_attention"]["pools"] = r.pools;
  j["dist_attention"]["note"] = "per layer and decode step; the pools run one after another in one process";
  for (const auto& d : r.dist)
    j["dist_attention"]["contexts"].push_back({{"context_tokens", d.context_tokens},
                                               {"dist_attention", method_json(d.dist_attention)},
                                               {"head_split", method_json(d.head_split)},
                                               {"move_kv", method_json(d.move_kv)},
                                               {"move_kv_over_dist_bytes", d.move_kv_over_dist_bytes()},
                                               {"max_abs_difference", d.max_abs_difference}});
  return j;
}

void print_decode(const gpu::bench_engine_result& r) {
  fmt::print("a. Decode with continuous batching ({}: {}, {} of weights; {}-token prompts, greedy, EOS ignored)\n",
             r.model, r.weights, human_bytes(r.weight_bytes), r.decode_prompt_tokens);
  fmt::print("   {:>6} {:>6} {:>7} {:>9} {:>10}\n", "batch", "steps", "tokens", "seconds", "tok/s");
  for (const auto& d : r.decode)
    fmt::print("   {:>6} {:>6} {:>7} {:>9.3f} {:>10.1f}\n", d.batch, d.steps, d.tokens, d.seconds,
               d.tokens_per_second());
  fmt::print("   prefill: one {}-token prompt in one step, best of {} fresh runs: {:.3f} s, {:.1f} tok/s\n\n",
             r.prefill.tokens, r.prefill.runs, r.prefill.best_seconds, r.prefill.tokens_per_second());
}

void print_bandwidth(const gpu::bench_engine_result& r) {
  fmt::print("b. MicroAttention effective bandwidth, one decode query per call (K and V bytes of the seen tokens)\n");
  fmt::print("   {} layer: {} heads, {} kv heads, head_dim {}, f32 KV\n", r.attention_model, r.n_heads, r.n_kv_heads,
             r.head_dim);
  fmt::print("   memory read bandwidth: vectorised sum over {} on {} thread{}, best of {} passes: {:.2f} GB/s\n",
             human_bytes(r.memory.buffer_bytes), r.memory.threads, r.memory.threads == 1 ? "" : "s", r.memory.passes,
             gb_per_second(r.memory.bytes_per_second()));
  fmt::print("   {:>8} {:>6} {:>12} {:>10} {:>15} {:>10}\n", "context", "calls", "KV read/call", "ms/call",
             "GB/s best call", "of memory");
  for (const auto& a : r.attention)
    fmt::print("   {:>8} {:>6} {:>12} {:>10.3f} {:>15.2f} {:>9.1f}%\n", a.context_tokens, a.calls,
               human_bytes(a.bytes_per_call), a.seconds_per_call() * 1e3, gb_per_second(a.bytes_per_second()),
               memory_ratio(r, a) * 100);
  fmt::print("\n");
}

void print_dist(const gpu::bench_engine_result& r) {
  fmt::print("c. DistAttention vs the alternatives of Fig. 11 ({} pools, {} layer, one decode query)\n", r.pools,
             r.attention_model);
  fmt::print("   times are per layer and decode step; the {} pools run one after another in this process\n", r.pools);
  fmt::print("   (no network); bytes moved are counted per message between pools\n");
  fmt::print("   {:>8} | {:>21} | {:>21} | {:>21} | {:>14} {:>9}\n", "", "DistAttention", "split by heads",
             "move KV to owner", "bytes moved", "max");
  fmt::print("   {:>8} | {:>8} {:>12} | {:>8} {:>12} | {:>8} {:>12} | {:>14} {:>9}\n", "context", "ms/step",
             "moved/step", "ms/step", "moved/step", "ms/step", "moved/step", "move KV/Dist", "|diff|");
  for (const auto& d : r.dist)
    fmt::print("   {:>8} | {:>8.3f} {:>12} | {:>8.3f} {:>12} | {:>8.3f} {:>12} | {:>13.0f}x {:>9.1e}\n",
               d.context_tokens, d.dist_attention.seconds_per_step() * 1e3,
               human_bytes(d.dist_attention.bytes_per_step()), d.head_split.seconds_per_step() * 1e3,
               human_bytes(d.head_split.bytes_per_step()), d.move_kv.seconds_per_step() * 1e3,
               human_bytes(d.move_kv.bytes_per_step()), d.move_kv_over_dist_bytes(), d.max_abs_difference);
}

/// The cuda backend's figures (gpu/bench/gpu_bench.hpp: bandwidth against the HBM's, DistAttention and
/// its alternatives, decode throughput by batch); exits 77 without a CUDA device.
void run_cuda_bench(const bench_flags& f) {
#ifdef ILLM_HAVE_CUDA
  const gpu::cuda::device_probe probe = gpu::cuda::probe_devices();
  if (probe.count == 0) {
    fmt::print(stderr, "illm bench engine: no CUDA device ({}); nothing measured\n", probe.reason);
    std::exit(77);
  }
  gpu::cuda::gpu_bench_options options;
  if (!f.json) options.progress = [](std::string_view what) { fmt::print(stderr, "bench: {}\n", what); };
  auto out = gpu::cuda::run_gpu_bench(options);
  if (!out.is_ok()) fail(out.error().message());
  std::cout << (f.json ? gpu::cuda::to_json(out.value()) + "\n" : gpu::cuda::to_text(out.value()));
#else
  (void)f;
  fail("this build has no cuda backend (configure with nvcc on the PATH, or -DILLM_ENABLE_CUDA=ON)", 2);
#endif
}

void run_bench_engine(const bench_flags& f) {
  if (f.backend == "cuda") return run_cuda_bench(f);
  if (f.backend != "cpu") fail("unknown --backend '" + f.backend + "' (cpu or cuda)", 2);
  gpu::bench_engine_options options;
  options.model = f.model;
  options.weight_type = weight_type_of(f.weight_type, "bench engine");
  options.model_only = f.model_only;
  options.threads = f.threads;
  const auto start = std::chrono::steady_clock::now();
  if (!f.json)
    options.progress = [start](std::string_view what) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print(stderr, "bench: {:5.1f} s: {}\n", seconds, what);
    };
  auto out = gpu::run_bench_engine(options);
  if (!out.is_ok()) fail(out.error().message());
  const gpu::bench_engine_result& r = out.value();
  if (f.json) {
    std::cout << result_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  fmt::print("illm bench engine: {} backend, threads {}, {:.1f} s in all\n\n", r.backend, r.threads, r.seconds);
  print_decode(r);
  if (f.model_only) {
    const double batch1 = r.decode.empty() ? 0.0 : r.decode.front().tokens_per_second();
    fmt::print("   weights read at batch {}: {:.2f} GB/s of the memory's {:.2f} GB/s ({:.0f}%; read bandwidth of a vectorised "
               "sum on {} threads)\n",
               r.decode.empty() ? 0 : r.decode.front().batch, gb_per_second(batch1 * double(r.weight_bytes)),
               gb_per_second(r.memory.bytes_per_second()),
               100 * batch1 * double(r.weight_bytes) / std::max(1.0, r.memory.bytes_per_second()), r.memory.threads);
    return;
  }
  print_bandwidth(r);
  print_dist(r);
}

}  // namespace

namespace {

/// Flags of `illm bench --url`: a trace replayed against a server.
struct replay_flags {
  actors::frontend::replay_options options;
  std::string trace;
  std::string csv = "illm-bench.csv";
  bool json = false;
  int prompt_tokens = 0;  ///< closed loop without a trace: every prompt's length
};

/// What to send: the trace's rows, or for a closed loop without one, --limit requests of --prompt-tokens and
/// --max-output-tokens (defaults 64, 32 and 128).
std::vector<actors::frontend::trace_row> requests_of(replay_flags& f) {
  if (f.options.url.empty()) fail("give --url (or a subcommand: engine)", 2);
  if (!f.trace.empty()) {
    if (f.prompt_tokens) fail("--prompt-tokens is for a closed loop without --trace (clamp a trace with --max-input-tokens)", 2);
    auto trace = actors::frontend::read_trace(f.trace);
    if (!trace.is_ok()) fail(trace.error().message());
    return trace.value();
  }
  if (f.options.concurrency <= 0) fail("give --trace (open loop) or --concurrency C (closed loop)", 2);
  if (!f.options.limit) f.options.limit = 64;
  if (!f.options.max_output_tokens) f.options.max_output_tokens = 128;
  if (!f.prompt_tokens) f.prompt_tokens = 32;
  return actors::frontend::uniform_trace(f.options.limit, f.prompt_tokens, f.options.max_output_tokens);
}

/// What was sent, for the report's first line.
std::string load_of(const replay_flags& f) {
  if (f.options.turns > 0)
    return fmt::format("closed loop at concurrency {} of sessions of {} turns, each {} new prompt tokens and {} output "
                       "tokens",
                       f.options.concurrency, f.options.turns, f.prompt_tokens, f.options.max_output_tokens);
  if (f.options.concurrency > 0 && f.trace.empty())
    return fmt::format("closed loop at concurrency {}, {} prompt tokens, {} output tokens", f.options.concurrency,
                       f.prompt_tokens, f.options.max_output_tokens);
  if (f.options.concurrency > 0) return fmt::format("{}, closed loop at concurrency {}", f.trace, f.options.concurrency);
  return fmt::format("{} (arrivals x{})", f.trace, f.options.rate_scale);
}

void write_csv(const std::string& path, const actors::frontend::replay_result& r) {
  std::ofstream out(path);
  if (!out) fail(fmt::format("cannot write {}", path));
  out << "index,scheduled_s,sent_s,prompt_tokens,max_tokens,output_tokens,ttft_s,mean_itl_s,e2e_s,status,error,"
         "cached_tokens\n";
  for (const auto& q : r.requests) {
    double itl = 0;
    for (double x : q.itl_s) itl += x;
    std::string error = q.error;
    std::replace(error.begin(), error.end(), ',', ';');
    std::replace(error.begin(), error.end(), '\n', ' ');
    out << fmt::format("{},{:.6f},{:.6f},{},{},{},{:.6f},{:.6f},{:.6f},{},{},{}\n", q.index, q.scheduled_s, q.sent_s,
                       q.prompt_tokens, q.max_tokens, q.output_tokens, q.ttft_s,
                       q.itl_s.empty() ? 0.0 : itl / double(q.itl_s.size()), q.e2e_s, q.status, error, q.cached_tokens);
  }
}

void run_replay(replay_flags& f) {
  const std::vector<actors::frontend::trace_row> trace = requests_of(f);
  const bool tty = isatty(STDERR_FILENO) && !f.json;
  std::mutex print;
  auto progress = [&](size_t done, size_t failed, size_t total) {
    if (!tty) return;
    std::lock_guard lock(print);
    const int width = 40, filled = int(width * done / std::max<size_t>(1, total));
    fmt::print(stderr, "\r[{}{}] {}/{} done, {} failed", std::string(size_t(filled), '#'),
               std::string(size_t(width - filled), '.'), done, total, failed);
    std::fflush(stderr);
  };
  auto result = actors::frontend::replay(trace, f.options, progress);
  if (tty) fmt::print(stderr, "\n");
  if (!result.is_ok()) fail(result.error().message());
  const auto& r = result.value();
  write_csv(f.csv, r);

  std::vector<double> ttft, itl, e2e;
  size_t completed = 0, output_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  for (const auto& q : r.requests) {
    if (!q.ok()) continue;
    ++completed;
    output_tokens += size_t(q.output_tokens);
    prompt_tokens += size_t(q.prompt_tokens);
    cached_tokens += size_t(q.cached_tokens);
    if (q.ttft_s >= 0) ttft.push_back(q.ttft_s);
    itl.insert(itl.end(), q.itl_s.begin(), q.itl_s.end());
    e2e.push_back(q.e2e_s);
  }
  const double duration = std::max(r.duration_s, 1e-9);
  using actors::frontend::percentile;
  auto triple = [](const std::vector<double>& v) {
    return nlohmann::json{{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}};
  };
  if (f.json) {
    nlohmann::json j = {{"url", f.options.url},
                        {"trace", f.trace},
                        {"rate_scale", f.options.rate_scale},
                        {"concurrency", f.options.concurrency},
                        {"requests", r.requests.size()},
                        {"completed", completed},
                        {"failed", r.requests.size() - completed},
                        {"duration_s", r.duration_s},
                        {"requests_per_s", double(completed) / duration},
                        {"output_tokens", output_tokens},
                        {"output_tokens_per_second", double(output_tokens) / duration},
                        {"turns", f.options.turns},
                        {"prompt_tokens", prompt_tokens},
                        {"cached_tokens", cached_tokens},
                        {"prefill_tokens", prompt_tokens - cached_tokens},
                        {"ttft_s", triple(ttft)},
                        {"itl_s", triple(itl)},
                        {"e2e_s", triple(e2e)},
                        {"csv", f.csv}};
    std::cout << j.dump() << "\n";
    return;
  }
  fmt::print("illm bench: {} requests, {}: {} completed, {} failed, {:.1f} s\n", r.requests.size(), load_of(f),
             completed, r.requests.size() - completed, r.duration_s);
  fmt::print("throughput: {:.2f} req/s, {:.1f} output tok/s\n", double(completed) / duration,
             double(output_tokens) / duration);
  fmt::print("prompts: {} tokens, {} found in the server's prefix cache, {} computed\n", prompt_tokens, cached_tokens,
             prompt_tokens - cached_tokens);
  fmt::print("{:>10} {:>10} {:>10} {:>10}\n", "seconds", "p50", "p90", "p99");
  for (const auto& [name, v] : {std::pair{"TTFT", &ttft}, std::pair{"ITL", &itl}, std::pair{"E2E", &e2e}})
    fmt::print("{:>10} {:>10.4f} {:>10.4f} {:>10.4f}\n", name, percentile(*v, 50), percentile(*v, 90),
               percentile(*v, 99));
  fmt::print("per-request results: {}\n", f.csv);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (measure only; they assert nothing about speed)");
  bench->require_subcommand(0, 1);
  auto replay = std::make_shared<replay_flags>();
  bench->add_option("--url", replay->options.url, "Send requests to this server (http://host:port)");
  bench->add_option("--trace", replay->trace, "Trace CSV: arrival_s,input_tokens,output_tokens");
  bench->add_option("--rate-scale", replay->options.rate_scale, "Arrivals come this many times faster")
      ->check(above_zero())
      ->capture_default_str();
  bench->add_option("--concurrency", replay->options.concurrency,
                    "Closed loop: this many clients, each sending its next request when its last one ends (with "
                    "--trace: the trace's requests, arrival times ignored)")
      ->check(CLI::Range(1, 100000));
  bench->add_option("--prompt-tokens", replay->prompt_tokens,
                    "Closed loop without --trace: prompt length of every request (default 32; with --turns, the new "
                    "tokens of every turn)")
      ->check(CLI::Range(1, 1 << 24));
  bench->add_option("--turns", replay->options.turns,
                    "Closed loop of conversations: each client runs sessions of this many turns, a turn's prompt the "
                    "last turn's prompt, its answer and --prompt-tokens new ones (--limit: turns in all)")
      ->check(CLI::Range(1, 1 << 16));
  bench->add_option("--limit", replay->options.limit,
                    "Send only the first N requests (closed loop without --trace: N requests, default 64)");
  bench->add_option("--max-input-tokens", replay->options.max_input_tokens, "Clamp prompts to this many tokens")
      ->check(CLI::Range(0, 1 << 24));
  bench->add_option("--max-output-tokens", replay->options.max_output_tokens, "Clamp outputs to this many tokens (closed loop without --trace: every request's max_tokens, default 128)")
      ->check(CLI::Range(0, 1 << 24));
  bench->add_option("--seed", replay->options.seed, "Seed of the random prompts (another seed: other prompts)")
      ->capture_default_str();
  bench->add_option("--model", replay->options.model, "Model id to ask for (default: the server's, from GET /v1/models)");
  bench->add_option("--api-key", replay->options.api_key, "Bearer key");
  bench->add_option("--csv", replay->csv, "Per-request results")->capture_default_str();
  bench->add_flag("--json", replay->json, "Print one JSON object");
  bench->callback([bench, replay] {
    if (bench->get_subcommands().empty()) run_replay(*replay);
  });

  auto flags = std::make_shared<bench_flags>();
  CLI::App* engine = bench->add_subcommand(
      "engine", "Decode/prefill throughput, MicroAttention bandwidth, DistAttention vs its alternatives");
  engine->add_option("--backend", flags->backend, "cpu, or cuda (the figures of illm-gpu-bench)")->capture_default_str();
  engine->add_option("--model", flags->model, "Model of the decode and prefill figures (cpu)")->capture_default_str();
  add_weight_type_flag(*engine, flags->weight_type);
  engine->add_flag("--model-only", flags->model_only,
                   "Only the model's decode and prefill figures and the memory bandwidth (no attention figures)");
  engine->add_option("--threads", flags->threads, "CPU threads (the memory bandwidth sum uses as many)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  engine->add_flag("--json", flags->json, "Print one JSON object");
  engine->callback([flags] { run_bench_engine(*flags); });
  add_bench_migration_command(*bench);
}

}  // namespace illm::cli
