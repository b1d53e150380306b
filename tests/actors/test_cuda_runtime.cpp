// The runtime on the cuda backend, here on the CPU emulation of CUDA (main_cuda_emulated.cpp): KV pools in
// device memory, moves through host staging and landing slots (their bytes checksummed on arrival), remote
// attention computed on the holder's device, and a holder killed mid-decode. The ids are those of the cpu
// backend alone on one pool; the books close (every pool whole, every landing slot back).
#include <doctest/doctest.h>

#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "actors/chaos/chaos.hpp"
#include "actors/cluster/cluster.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "tests/actors/support.hpp"

using namespace illm;
using namespace illm::actors;
using namespace std::chrono_literals;

namespace illm_emu {
void set_device_count(int n);  // tests/gpu/cuda/emu: how many GPUs the emulation has
}

namespace {

/// The emulation has `n` GPUs while this lives (each host thread has its current device, as on CUDA).
struct emulated_gpus {
  explicit emulated_gpus(int n) { illm_emu::set_device_count(n); }
  ~emulated_gpus() { illm_emu::set_device_count(1); }
};

const gpu::loaded_model& model() { return test::stories15m(); }

/// n random tokens after BOS (a fixed seed).
std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> ids{1};
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 1; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(int32_t(3 + (x >> 33) % uint64_t(model().weights->config().vocab_size - 3)));
  }
  return ids;
}

/// Runs one request on `c` to its end: its tokens and how it ended.
std::pair<std::vector<int32_t>, request_finished> run_one(cluster& c, const generate_params& params) {
  std::mutex mutex;
  std::condition_variable done;
  std::vector<int32_t> tokens;
  std::optional<request_finished> end;
  c.submit(params, {[&](int32_t token) {
                      std::lock_guard lock(mutex);
                      tokens.push_back(token);
                    },
                    [&](const request_finished& e) {
                      std::lock_guard lock(mutex);
                      end = e;
                      done.notify_all();
                    },
                    {}});
  std::unique_lock lock(mutex);
  REQUIRE(done.wait_for(lock, 600s, [&] { return end.has_value(); }));
  return {tokens, *end};
}

}  // namespace

TEST_SUITE("cuda runtime") {
  TEST_CASE("emulated cuda: a request over device pools on one or two GPUs moves its blocks device to device or through host staging, with the ids of one cpu instance") {
    cluster_options o;
    o.instances = 3;
    o.instance.backend = "cuda";
    o.instance.kv_blocks_per_instance = 16;  // 256 tokens: the request needs two pools
    o.instance.landing_blocks = 8;           // fewer than a pool: a move too large for them is refused and retried
    o.instance.staging_chunk_blocks = 2;     // a move out is several chunks, waiting for the two staging buffers
    o.instance.threads_per_instance = 1;
    o.batch.room_prefill_min_chunks = 0;
    o.batch.max_batch_tokens = 128;  // the owner computes the prompt and moves full blocks out (copies of KV)
    o.gmanager.policy_period_ms = 50;
    std::optional<emulated_gpus> two;
    int gpus = 1;
    SUBCASE("device to device within the process") { o.device_copies = true; }
    SUBCASE("through host staging and landing slots, as between processes") { o.device_copies = false; }
    SUBCASE("over two GPUs: device to device on one, peer to peer between them") {
      two.emplace(2);
      gpus = 2;
      o.instance.devices = "0,1";  // instances 0 and 2 on GPU 0, instance 1 on GPU 1
    }
    metrics::registry registry;
    o.metrics = std::make_shared<metrics::runtime_metrics>(registry);
    auto c = cluster::start(model().weights, o);
    REQUIRE(c.is_ok());
    const std::vector<int32_t> prompt = prompt_of(360);
    const int max_tokens = 8;
    const auto [tokens, end] = run_one(*c.value(), {prompt, max_tokens, 0.0f, 1.0f, 0, true});
    REQUIRE_MESSAGE(end.reason == "length", end.error);
    CHECK(tokens == test::alone_on_cpu(prompt, max_tokens));
    CHECK(c.value()->weight_placements() == gpus);  // one copy of the weights per GPU, not per instance
    std::set<instance_id> holders;
    for (const auto& e : end.placement) holders.insert(e.inst_id);
    CHECK(holders.size() >= 2);
    uint32_t moved = 0;
    for (const move_report& m : c.value()->moves()) {
      if (m.ok) moved += m.blocks;
      CHECK_MESSAGE(m.reason.find("checksum") == std::string::npos, m.reason);
    }
    CHECK(moved >= 7);  // 23 blocks, at most 16 on the owner
    uint64_t attention_bytes = 0, put_bytes = 0;
    for (const auto& i : c.value()->instances()) {
      attention_bytes += i.traffic.message_bytes[uint8_t(transport::channel::partials)];
      put_bytes += i.traffic.put_bytes;
    }
    if (o.device_copies)
      CHECK(put_bytes == 0);  // every move copied device to device (peer to peer between GPUs): none crossed the plane
    else
      CHECK(put_bytes > 0);  // the moves' bytes went through staging and landing slots
    // The metrics count every committed move's bytes on the path it took, and time each copy.
    std::map<std::string, double> bytes_by_path, copies_by_path;
    o.metrics->move_bytes.each(
        [&](const metrics::label_values& l, const metrics::counter& n) { bytes_by_path[l.at(1)] += n.value(); });
    o.metrics->move_copy_seconds.each(
        [&](const metrics::label_values& l, const metrics::histogram& h) { copies_by_path[l.at(1)] += h.count(); });
    const std::string path = o.device_copies ? "device" : "staged";
    CHECK(bytes_by_path.size() == 1);
    const double per_block = bytes_by_path[path] / double(moved);  // the same bytes for every block moved
    CHECK(per_block > 0);
    CHECK(per_block == std::floor(per_block));
    if (!o.device_copies) CHECK(bytes_by_path[path] <= double(put_bytes));  // puts carried them (and refused ones)
    CHECK(copies_by_path[path] >= 1);
    CHECK(attention_bytes > 0);  // holders answered with partials computed on their devices
    CHECK(c.value()->wait_pools_free(10s));
    for (const auto& i : c.value()->instances()) {
      CHECK_MESSAGE(i.accounting.is_ok(), i.accounting.message());
      CHECK(i.free_blocks == i.total_blocks);
      CHECK(i.landing_taken == 0);
    }
    c.value()->shutdown();
  }

  TEST_CASE("emulated cuda: a holder of device pools killed mid-decode: every request answered once with its ids, the books whole") {
    const actors::chaos::scenario* s = actors::chaos::find_scenario("kill-holder");
    REQUIRE(s);
    actors::chaos::chaos_options o;
    o.backend = "cuda";
    o.instances = 3;
    o.kv_blocks_per_instance = 16;
    o.short_requests = 2;
    const uint64_t seed = 1;
    MESSAGE("kill-holder on the emulated cuda backend, seed ", seed,
            " (replay: illm chaos --scenario kill-holder --seed 1 --kv-blocks-per-instance 16 --backend cuda)");
    const actors::chaos::run_result r = actors::chaos::run(model(), *s, seed, o);
    for (const std::string& p : r.problems) MESSAGE(p);
    CHECK(r.tally.clean());
    CHECK(r.tally.accepted == 3);
    CHECK(r.tally.lost == 0);
    CHECK(r.tally.duplicated == 0);
    CHECK(r.tally.faults.count("instance_killed") == 1);
  }
}

