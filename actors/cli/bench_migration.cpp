// `illm bench migration`: the paper's Fig. 12. A batch decodes continuously on a synthetic model while
// 0, 16 or 32 tokens' worth of KV blocks per step move from its pool to a peer process over the UCX
// plane (put + flush, issued before a step and confirmed right after it, so the copy overlaps the
// step's compute). The three phases run in rounds, in a rotated order, the same number of steps each,
// and each phase's throughput is its median over the rounds. After every phase the peer checksums
// the part of its arena that phase wrote (and clears it) and the parent compares that with the
// checksum of the blocks it sent.
//
// The peer process and the socket to it: bench_migration_peer.hpp.

#include "actors/cli/bench_migration.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cli/bench_migration_peer.hpp"
#include "actors/cli/commands.hpp"
#include "actors/logic/status_bridge.hpp"
#include "gpu/checksum.hpp"
#include "gpu/bench/decode_rig.hpp"
#include "gpu/host_memory.hpp"
#include "transport/registry.hpp"

namespace illm::cli {

namespace {

using namespace migration;
// The bench speaks the engine's status; the plane's and the peer's failures are turned into it.
using gpu::result;
using gpu::status;
using gpu::status_code;

/// KV tokens moved per decode step in each phase; a block is 16 tokens.
constexpr int phase_tokens[] = {0, 16, 32};
constexpr int phase_count = 3;
constexpr int max_blocks_per_step = 2;
/// Warm-up steps before the timed rounds: plain decode, then moving 1 and 2 blocks (connects UCX).
constexpr int warmup_plain_steps = 4;
constexpr int warmup_moving_steps = 2;
/// The link alone (no step running): this many transfers of up to this many blocks, the fastest kept.
constexpr int idle_link_runs = 3;
constexpr uint64_t idle_link_max_blocks = 8;
constexpr std::chrono::seconds transfer_bound{60};
/// Most KV pool memory a run may ask for (the pool holds every token of the run).
constexpr uint64_t max_pool_bytes = uint64_t(8) << 30;

double seconds_between(bench_clock::time_point a, bench_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

using gpu::checksum_seed;
using gpu::checksum_words;

// ---- One step's migration --------------------------------------------------------------------------

/// The puts of one step and the flush after them: done when all their completions have run.
class transfer : public std::enable_shared_from_this<transfer> {
 public:
  explicit transfer(int operations) : remaining_(operations), start_(bench_clock::now()) {}

  /// A completion for one of the operations (it keeps the transfer alive until it runs).
  transport::completion on_done() {
    return [self = shared_from_this()](transport::status s) { self->complete(actors::engine_status(s)); };
  }

  /// Waits until every operation completed (ok) or one failed (its status), at most `bound`.
  status wait(std::chrono::seconds bound) {
    std::unique_lock lock(mutex_);
    if (!done_.wait_for(lock, bound, [&] { return remaining_ == 0 || !error_.is_ok(); }))
      return {status_code::io_error, fmt::format("a transfer to the peer did not complete in {} s", bound.count())};
    return error_;
  }

  /// From the first put issued to the last completion.
  double seconds() const {
    std::lock_guard lock(mutex_);
    return seconds_between(start_, end_);
  }

 private:
  void complete(status s) {
    std::lock_guard lock(mutex_);
    if (!s.is_ok() && error_.is_ok()) error_ = std::move(s);
    if (--remaining_ == 0) end_ = bench_clock::now();
    done_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable done_;
  int remaining_;
  status error_;
  bench_clock::time_point start_, end_;
};

// ---- The measurement -------------------------------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// One phase: decode while moving `blocks_per_step` blocks per step, over every round.
struct phase_figure {
  int tokens_per_step = 0;  ///< of KV moved with each decode step
  int blocks_per_step = 0;
  int steps = 0;        ///< decode steps timed, over all rounds
  uint64_t tokens = 0;  ///< decoded in them
  double seconds = 0;
  std::vector<double> round_tokens_per_second;  ///< one per round
  uint64_t bytes_moved = 0;
  double transfer_seconds = 0;  ///< sum over steps of put issued .. flush confirmed
  double stall_seconds = 0;     ///< waiting for the confirmation after the step had finished

  /// Median over the rounds of tokens per second.
  double tokens_per_second() const { return median(round_tokens_per_second); }
  uint64_t bytes_per_step() const { return steps > 0 ? bytes_moved / uint64_t(steps) : 0; }
};

/// Checksums compared after each phase that moved blocks.
struct verification {
  int checks = 0;
  int mismatches = 0;
  uint64_t bytes = 0;  ///< arena bytes compared
  uint64_t sent = checksum_seed, received = checksum_seed;
  bool match() const { return checks > 0 && mismatches == 0 && sent == received; }
};

/// Blocks moved in one transfer while nothing else runs: what the link itself achieves here.
struct idle_link_figure {
  int runs = 0;
  uint64_t bytes = 0;  ///< per transfer
  double best_seconds = 0;
  double bytes_per_second() const { return best_seconds > 0 ? double(bytes) / best_seconds : 0.0; }
};

/// Everything one run measured.
struct migration_result {
  gpu::model_config config;
  uint64_t parameters = 0;
  uint64_t block_bytes = 0;
  int batch = 0, context = 0, threads = 0, steps = 0, rounds = 0;
  std::string tls, net_devices;
  std::vector<phase_figure> phases;
  idle_link_figure idle_link;
  uint64_t bytes_moved = 0;      ///< every put, warm-up included
  uint64_t plane_put_bytes = 0;  ///< what the plane counted as put
  verification verified;
  int peer_pid = 0, peer_exit = -1;
  double seconds = 0;
};

/// The decoding batch, the plane and the peer's region: runs phases and verifies what they moved.
class migration_bench {
 public:
  migration_bench(gpu::decode_rig& rig, transport::data_plane& plane, peer_process& peer,
                  transport::remote_region region)
      : rig_(rig), plane_(plane), peer_(peer), region_(std::move(region)) {}

  /// Runs `steps` steps moving `blocks` blocks per step, adds them to `figure` (when given), then
  /// checks the peer's arena against the blocks sent.
  status run(int blocks, int steps, phase_figure* figure) {
    std::vector<uint32_t> sent;  // pool blocks, in arena slot order
    uint64_t tokens = 0;
    double transfer_s = 0, stall_s = 0;
    const auto t0 = bench_clock::now();
    for (int i = 0; i < steps; ++i) {
      std::shared_ptr<transfer> t;
      if (blocks > 0) {
        auto issued = issue(blocks, sent);
        if (!issued.is_ok()) return issued.error();
        t = std::move(issued).value();
      }
      auto decoded = rig_.step();
      if (!decoded.is_ok()) return decoded.error();
      tokens += uint64_t(decoded.value());
      if (t) {
        const auto w0 = bench_clock::now();
        ILLM_RETURN_IF_ERROR(t->wait(transfer_bound));
        stall_s += seconds_between(w0, bench_clock::now());
        transfer_s += t->seconds();
      }
    }
    const double seconds = seconds_between(t0, bench_clock::now());
    const uint64_t moved = uint64_t(sent.size()) * rig_.block_bytes();
    bytes_moved_ += moved;
    if (figure) {
      figure->steps += steps;
      figure->tokens += tokens;
      figure->seconds += seconds;
      figure->round_tokens_per_second.push_back(seconds > 0 ? double(tokens) / seconds : 0.0);
      figure->bytes_moved += moved;
      figure->transfer_seconds += transfer_s;
      figure->stall_seconds += stall_s;
    }
    return sent.empty() ? status::ok() : verify(sent);
  }

  /// Moves `blocks` blocks at once with no step running (the link's own rate, for comparison) and
  /// verifies them; returns the seconds from the first put to the confirmed flush.
  result<double> run_idle(int blocks) {
    std::vector<uint32_t> sent;
    auto issued = issue(blocks, sent);
    if (!issued.is_ok()) return issued.error();
    ILLM_RETURN_IF_ERROR(issued.value()->wait(transfer_bound));
    bytes_moved_ += uint64_t(sent.size()) * rig_.block_bytes();
    ILLM_RETURN_IF_ERROR(verify(sent));
    return issued.value()->seconds();
  }

  uint64_t bytes_moved() const { return bytes_moved_; }
  const verification& verified() const { return verified_; }

 private:
  /// Puts `blocks` full blocks of the running batch into the next arena slots, then a flush.
  result<std::shared_ptr<transfer>> issue(int blocks, std::vector<uint32_t>& sent) {
    const std::vector<uint32_t> full = rig_.full_blocks();
    const uint64_t bytes = rig_.block_bytes();
    if (full.size() < size_t(blocks))
      return status{status_code::internal, fmt::format("{} full blocks, {} to move", full.size(), blocks)};
    if ((sent.size() + size_t(blocks)) * bytes > region_.bytes)
      return status{status_code::internal, "the peer's arena is too small for this phase"};
    auto t = std::make_shared<transfer>(blocks + 1);
    for (int b = 0; b < blocks; ++b) {
      const uint32_t block = full[cursor_++ % full.size()];
      const uint64_t remote = region_.address + uint64_t(sent.size()) * bytes;
      sent.push_back(block);
      plane_.put(child_peer_id, rig_.pool().block_data(block), bytes, region_, remote, t->on_done());
    }
    plane_.flush(child_peer_id, t->on_done());
    return t;
  }

  /// Compares the checksum of the blocks sent (read again from the pool: full blocks do not change)
  /// with the peer's checksum of the slots they went to.
  status verify(const std::vector<uint32_t>& sent) {
    uint64_t expected = checksum_seed;
    for (uint32_t block : sent) expected = checksum_words(rig_.pool().block_data(block), rig_.block_bytes(), expected);
    const uint64_t bytes = uint64_t(sent.size()) * rig_.block_bytes();
    auto got = peer_.checksum(bytes);
    if (!got.is_ok()) return actors::engine_status(got.error());
    verified_.checks += 1;
    verified_.bytes += bytes;
    if (got.value() != expected) verified_.mismatches += 1;
    verified_.sent = checksum_words(&expected, 8, verified_.sent);
    verified_.received = checksum_words(&got.value(), 8, verified_.received);
    return status::ok();
  }

  gpu::decode_rig& rig_;
  transport::data_plane& plane_;
  peer_process& peer_;
  transport::remote_region region_;
  uint64_t cursor_ = 0;
  uint64_t bytes_moved_ = 0;
  verification verified_;
};

/// Prints what runs next on stderr (not with --json).
struct progress_log {
  bool quiet;
  bench_clock::time_point start = bench_clock::now();
  void operator()(const std::string& what) const {
    if (!quiet) fmt::print(stderr, "bench: {:5.1f} s: {}\n", seconds_between(start, bench_clock::now()), what);
  }
};

int total_decode_steps(const migration_flags& f) {
  return warmup_plain_steps + 2 * warmup_moving_steps + f.rounds * phase_count * f.steps;
}

/// The link alone: transfers of `blocks` blocks with no step running, the fastest kept.
idle_link_figure measure_idle_link(migration_bench& bench, int blocks, uint64_t block_bytes) {
  idle_link_figure out{idle_link_runs, uint64_t(blocks) * block_bytes, 0};
  for (int i = 0; i < idle_link_runs; ++i) {
    auto seconds = bench.run_idle(blocks);
    if (!seconds.is_ok()) fail("moving blocks with no step running: " + seconds.error().message());
    out.best_seconds = i == 0 ? seconds.value() : std::min(out.best_seconds, seconds.value());
  }
  return out;
}

/// The warm-up, the link alone, then the rounds: each runs the three phases in an order rotated by
/// the round.
void run_rounds(const migration_flags& f, migration_bench& bench, migration_result& out, int idle_blocks,
                const progress_log& log) {
  std::vector<phase_figure>& phases = out.phases;
  log("warm-up");
  for (auto [blocks, steps] : {std::pair{0, warmup_plain_steps}, {1, warmup_moving_steps}, {2, warmup_moving_steps}})
    if (status s = bench.run(blocks, steps, nullptr); !s.is_ok()) fail("warm-up: " + s.message());
  log(fmt::format("the link alone: {} blocks at once, no step running", idle_blocks));
  out.idle_link = measure_idle_link(bench, idle_blocks, out.block_bytes);
  for (int r = 0; r < f.rounds; ++r) {
    log(fmt::format("round {} of {}", r + 1, f.rounds));
    for (int k = 0; k < phase_count; ++k) {
      phase_figure& p = phases[size_t((r + k) % phase_count)];
      if (status s = bench.run(p.blocks_per_step, f.steps, &p); !s.is_ok())
        fail(fmt::format("moving {} tokens per step: {}", p.tokens_per_step, s.message()));
    }
  }
}

/// The processes and memory of one run. Destroyed in reverse: the plane first (its in-flight puts read
/// the rig's pool), the rig, then the peer, which is stopped and reaped.
struct migration_setup {
  std::unique_ptr<peer_process> peer;
  transport::remote_region region;  ///< the peer's arena
  std::unique_ptr<gpu::decode_rig> rig;
  std::shared_ptr<transport::data_plane> plane;
};

gpu::decode_rig_options rig_options(const migration_flags& f) {
  return {.seed = f.seed, .threads = f.threads, .batch = f.batch, .context_tokens = f.context,
          .decode_steps = total_decode_steps(f)};
}

/// Refuses runs whose pool (every token of the run) would be too large.
void check_pool_size(const gpu::decode_rig_options& ro, uint64_t block_bytes) {
  const uint64_t blocks = gpu::blocks_for_tokens(int64_t(ro.context_tokens) + ro.decode_steps + 1);
  const uint64_t bytes = uint64_t(ro.batch) * blocks * block_bytes;
  if (bytes > max_pool_bytes)
    fail(fmt::format("this run needs a {:.1f} GiB KV pool (at most {} GiB): lower --batch, --context, --steps or "
                     "--rounds",
                     double(bytes) / (1 << 30), max_pool_bytes >> 30),
         2);
}

/// Starts the peer (before any thread starts here: fork copies only the calling thread) and a plane
/// connected to it.
void start_peer(const migration_flags& f, migration_setup& s) {
  auto spawned = peer_process::spawn(f);
  if (!spawned.is_ok()) fail("starting the peer: " + spawned.error().message);
  s.peer = std::move(spawned).value();
  auto ready = s.peer->wait_ready();
  if (!ready.is_ok()) fail(ready.error().message);
  s.region = ready->region;
  auto made = make_ucx_plane(f, parent_peer_id);
  if (!made.is_ok()) fail("creating the UCX plane: " + made.error().message);
  s.plane = std::move(made).value();
  if (auto st = s.plane->start_progress_thread(); !st.is_ok()) fail(st.message);
  if (auto st = s.plane->connect(child_peer_id, ready->worker_address); !st.is_ok())
    fail("connecting to the peer: " + st.message);
}

/// Builds the batch, prefills it, and registers its pool with the plane.
void start_batch(const gpu::decode_rig_options& ro, uint64_t block_bytes, migration_setup& s, const progress_log& log) {
  log(fmt::format("synthetic weights ({:.0f}M parameters) and a batch of {}",
                  double(ro.config.parameter_count(true)) / 1e6, ro.batch));
  auto built = gpu::decode_rig::create(ro);
  if (!built.is_ok()) fail(built.error().message());
  s.rig = std::move(built).value();
  if (s.rig->block_bytes() != block_bytes)
    fail(fmt::format("the pool's blocks are {} bytes, the peer's arena assumed {}", s.rig->block_bytes(), block_bytes));
  log(fmt::format("prefilling {} tokens per sequence", ro.context_tokens));
  if (status st = s.rig->prefill(); !st.is_ok()) fail("prefill: " + st.message());
  // Registered as an instance's pool would be: the puts read the blocks where they are.
  const gpu::kv_pool& pool = s.rig->pool();
  if (auto r = s.plane->register_memory(pool.base(), uint64_t(pool.total_blocks()) * block_bytes); !r.is_ok())
    fail("registering the KV pool: " + r.error().message);
}

/// The figures' frame: the three phases, and the run's shape.
migration_result empty_result(const migration_flags& f, const gpu::decode_rig& rig) {
  migration_result out;
  for (int tokens : phase_tokens) {
    out.phases.emplace_back();
    out.phases.back().tokens_per_step = tokens;
    out.phases.back().blocks_per_step = tokens / gpu::kv_block_tokens;
  }
  out.config = rig.options().config;
  out.parameters = rig.parameters();
  out.block_bytes = rig.block_bytes();
  out.batch = f.batch;
  out.context = f.context;
  out.threads = rig.threads();
  out.steps = f.steps;
  out.rounds = f.rounds;
  out.tls = f.tls;
  out.net_devices = f.net_devices;
  return out;
}

/// Starts the peer, the plane and the batch, measures, stops the peer; fails (the peer reaped) on error.
migration_result measure(migration_flags f) {
  const progress_log log{f.json};
  const auto t0 = bench_clock::now();
  const gpu::decode_rig_options ro = rig_options(f);
  const gpu::model_config& c = ro.config;
  const uint64_t block_bytes = gpu::kv_layout{c.n_layers, c.n_kv_heads, c.head_dim(), gpu::dtype::f32}.block_bytes();
  check_pool_size(ro, block_bytes);
  f.arena_bytes = uint64_t(max_blocks_per_step) * uint64_t(std::max(f.steps, warmup_moving_steps)) * block_bytes;

  migration_setup s;
  log(fmt::format("starting the peer ({:.0f} MiB arena)", double(f.arena_bytes) / (1 << 20)));
  start_peer(f, s);
  start_batch(ro, block_bytes, s, log);

  migration_result out = empty_result(f, *s.rig);
  migration_bench bench(*s.rig, *s.plane, *s.peer, s.region);
  const auto idle_blocks = int(std::min({idle_link_max_blocks, f.arena_bytes / block_bytes,
                                         uint64_t(f.batch) * uint64_t(f.context / gpu::kv_block_tokens)}));
  run_rounds(f, bench, out, idle_blocks, log);
  if (status st = s.rig->check(); !st.is_ok()) fail(st.message());
  out.bytes_moved = bench.bytes_moved();
  out.plane_put_bytes = s.plane->counters().put_bytes;
  out.verified = bench.verified();
  s.plane.reset();
  out.peer_pid = int(s.peer->pid());
  out.peer_exit = s.peer->stop();
  out.seconds = seconds_between(t0, bench_clock::now());
  return out;
}

// ---- Output -------------------------------------------------------------------------------------------

std::string mib(uint64_t bytes) {
  return fmt::format("{:.2f} MiB", double(bytes) / (1 << 20));
}

/// The median over the rounds of the phase's throughput against the 0-token phase's in the same round
/// (paired, so that a machine whose load drifts between rounds compares like with like).
double relative_change(const migration_result& r, const phase_figure& p) {
  const std::vector<double>& base = r.phases.front().round_tokens_per_second;
  std::vector<double> ratios;
  for (size_t i = 0; i < base.size() && i < p.round_tokens_per_second.size(); ++i)
    if (base[i] > 0) ratios.push_back(p.round_tokens_per_second[i] / base[i] - 1.0);
  return median(ratios);
}

double rate(uint64_t bytes, double seconds) {
  return seconds > 0 ? double(bytes) / seconds : 0.0;
}

std::string hex(uint64_t v) {
  return fmt::format("{:016x}", v);
}

nlohmann::json result_json(const migration_result& r) {
  const gpu::model_config& c = r.config;
  nlohmann::json j;
  j["model"] = {{"dim", c.dim},
                {"hidden_dim", c.hidden_dim},
                {"n_layers", c.n_layers},
                {"n_heads", c.n_heads},
                {"n_kv_heads", c.n_kv_heads},
                {"vocab_size", c.vocab_size},
                {"parameters", r.parameters},
                {"weights", "synthetic"},
                {"kv_dtype", "f32"}};
  j["backend"] = "cpu";
  j["threads"] = r.threads;
  j["batch"] = r.batch;
  j["context_tokens"] = r.context;
  j["block_tokens"] = gpu::kv_block_tokens;
  j["block_bytes"] = r.block_bytes;
  j["steps_per_round"] = r.steps;
  j["rounds"] = r.rounds;
  j["transport"] = {{"plane", "ucx"}, {"tls", r.tls}, {"net_devices", r.net_devices}};
  for (const auto& p : r.phases)
    j["phases"].push_back({{"tokens_per_step", p.tokens_per_step},
                           {"blocks_per_step", p.blocks_per_step},
                           {"steps", p.steps},
                           {"tokens", p.tokens},
                           {"seconds", p.seconds},
                           {"tokens_per_second", p.tokens_per_second()},
                           {"round_tokens_per_second", p.round_tokens_per_second},
                           {"relative_change", relative_change(r, p)},
                           {"bytes_moved", p.bytes_moved},
                           {"bytes_per_step", p.bytes_per_step()},
                           {"migration_bytes_per_second", rate(p.bytes_moved, p.seconds)},
                           {"transfer_seconds", p.transfer_seconds},
                           {"transfer_bytes_per_second", rate(p.bytes_moved, p.transfer_seconds)},
                           {"stall_seconds", p.stall_seconds}});
  j["idle_link"] = {{"runs", r.idle_link.runs},
                    {"bytes", r.idle_link.bytes},
                    {"best_seconds", r.idle_link.best_seconds},
                    {"bytes_per_second", r.idle_link.bytes_per_second()}};
  j["bytes_moved"] = r.bytes_moved;
  j["plane_put_bytes"] = r.plane_put_bytes;
  j["checksum"] = {{"checks", r.verified.checks},          {"bytes", r.verified.bytes},
                   {"mismatches", r.verified.mismatches},  {"sent", hex(r.verified.sent)},
                   {"received", hex(r.verified.received)}, {"match", r.verified.match()}};
  j["peer"] = {{"pid", r.peer_pid}, {"exit_status", r.peer_exit}};
  j["seconds"] = r.seconds;
  return j;
}

void print_table(const migration_result& r) {
  const gpu::model_config& c = r.config;
  fmt::print("illm bench migration: decode throughput while KV blocks move to a peer process (Fig. 12)\n");
  fmt::print(
      "  model: synthetic LLaMA-like, dim {}, {} layers, {} heads ({} kv), hidden {}, vocab {}, {:.0f}M "
      "parameters; cpu backend, {} threads\n",
      c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.hidden_dim, c.vocab_size, double(r.parameters) / 1e6, r.threads);
  fmt::print("  KV block: {} tokens x {} layers x K,V x {} kv heads x {} = {} (f32)\n", gpu::kv_block_tokens,
             c.n_layers, c.n_kv_heads, c.head_dim(), mib(r.block_bytes));
  fmt::print(
      "  batch {}, {} tokens of context prefilled; {} rounds x {} steps per phase, phases rotated; tok/s: median "
      "of the rounds, vs 0: median of each round's ratio\n",
      r.batch, r.context, r.rounds, r.steps);
  fmt::print("  peer process over UCX {} on {}: put + flush issued before a step, confirmed after it\n\n", r.tls,
             r.net_devices);
  fmt::print("  {:>11} {:>11} {:>11} {:>10} {:>8} {:>6} {:>11} {:>10} {:>10} {:>9}\n", "tokens/step", "blocks/step",
             "moved/step", "tok/s", "vs 0", "steps", "moved", "mig. GB/s", "xfer GB/s", "stall ms");
  for (const auto& p : r.phases)
    fmt::print("  {:>11} {:>11} {:>11} {:>10.2f} {:>7.1f}% {:>6} {:>11} {:>10.3f} {:>10.2f} {:>9.2f}\n",
               p.tokens_per_step, p.blocks_per_step, mib(p.bytes_per_step()), p.tokens_per_second(),
               relative_change(r, p) * 100, p.steps, mib(p.bytes_moved), rate(p.bytes_moved, p.seconds) / 1e9,
               rate(p.bytes_moved, p.transfer_seconds) / 1e9, p.stall_seconds * 1e3);
  fmt::print("\n  mig. GB/s: bytes moved / phase time; xfer GB/s: bytes moved / time from put to confirmed flush\n");
  fmt::print("  the link alone (no step running): {} in one put + flush, best of {}: {:.2f} GB/s\n",
             mib(r.idle_link.bytes), r.idle_link.runs, r.idle_link.bytes_per_second() / 1e9);
  fmt::print("  verified: {} checks of the peer's arena, {} in all: {} (sent {}, received {}); the plane put {}\n",
             r.verified.checks, mib(r.verified.bytes), r.verified.match() ? "match" : "MISMATCH", hex(r.verified.sent),
             hex(r.verified.received), mib(r.plane_put_bytes));
  fmt::print("  paper (Fig. 12): no loss at 16 tokens per step, -8.6% at 32; {:.1f} s in all\n", r.seconds);
}

void run_bench_migration(const migration_flags& f) {
  if (f.peer_fd >= 0) return run_peer(f);
  const auto kinds = transport::plane_kinds();
  if (std::find(kinds.begin(), kinds.end(), "ucx") == kinds.end())
    fail("this build has no UCX plane (configure with -DILLM_ENABLE_UCX=ON and libucx-dev installed)", 77);
  if (f.batch * (f.context / gpu::kv_block_tokens) < max_blocks_per_step)
    fail("--batch x --context must hold at least two full blocks", 2);
  const migration_result r = measure(f);
  if (f.json)
    std::cout << result_json(r).dump() << "\n";
  else
    print_table(r);
  if (!r.verified.match())
    fail(fmt::format("the peer's arena differs from the bytes sent in {} of {} checks", r.verified.mismatches,
                     r.verified.checks));
  if (r.peer_exit != 0) fail(fmt::format("the peer exited with status {}", r.peer_exit));
}

}  // namespace

void add_bench_migration_command(CLI::App& bench) {
  auto f = std::make_shared<migration_flags>();
  CLI::App* cmd = bench.add_subcommand(
      "migration", "Decode tok/s while 0, 16 and 32 tokens of KV per step move to a peer over UCX (Fig. 12)");
  cmd->add_flag("--json", f->json, "Print one JSON object");
  add_ranged_option(cmd, "--batch", f->batch, "Sequences decoding together", 1, 64);
  add_ranged_option(cmd, "--steps", f->steps, "Timed decode steps per phase and round", 1, 128);
  add_ranged_option(cmd, "--rounds", f->rounds, "Rounds of the three phases (median per phase)", 1, 50);
  add_ranged_option(cmd, "--context", f->context, "Tokens prefilled per sequence before decoding", 16, 2048);
  add_ranged_option(cmd, "--threads", f->threads, "CPU threads of the engine", 1, 1024);
  cmd->add_option("--seed", f->seed, "Weights and prompts")->capture_default_str();
  cmd->add_option("--tls", f->tls, "UCX_TLS of both processes")->capture_default_str();
  cmd->add_option("--net-devices", f->net_devices, "UCX_NET_DEVICES of both processes")->capture_default_str();
  cmd->add_option("--peer-fd", f->peer_fd, "Run as the peer on this socket")->group("");
  cmd->add_option("--arena-bytes", f->arena_bytes, "The peer's receive arena")->group("");
  cmd->callback([f] { run_bench_migration(*f); });
}

}  // namespace illm::cli
