// `illm chaos`: seeded fault scenarios on an embedded cluster (actors/chaos/), their books per scenario and in
// total as a table (or --json), the command that replays each failing seed, and the time it all took.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/chaos/chaos.hpp"
#include "actors/cli/backend_flag.hpp"
#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "gpu/model_files.hpp"

namespace illm::cli {

namespace {

struct chaos_flags {
  std::string weight_type;  // --weight-type; empty: as stored
  int seeds = 0;        // runs in all, round-robin over the scenarios (0: one per scenario)
  int64_t seed = -1;    // one seed for each scenario chosen (-1: seeds 1..N)
  std::string scenario;  // empty: all
  std::string model = "stories15M";
  bool json = false;
  bool list = false;
  bool verbose = false;
  std::string plant;  // a defect to plant (empty: none)
  double max_missed_percent = 5;  // a scenario whose faults missed in more of its runs fails the command
  actors::chaos::chaos_options options;
};

/// A scenario's books and the seeds it ran.
struct scenario_books {
  actors::chaos::books tally;
  std::vector<uint64_t> seeds;
};

/// (scenario, seed) of each run, in order.
std::vector<std::pair<const actors::chaos::scenario*, uint64_t>> plan_runs(const chaos_flags& f) {
  std::vector<const actors::chaos::scenario*> chosen;
  if (!f.scenario.empty()) {
    const auto* s = actors::chaos::find_scenario(f.scenario);
    if (!s) fail(fmt::format("--scenario {}: no such scenario (illm chaos --list names them)", f.scenario), 2);
    chosen.push_back(s);
  } else {
    for (const auto& s : actors::chaos::scenarios()) chosen.push_back(&s);
  }
  std::vector<std::pair<const actors::chaos::scenario*, uint64_t>> runs;
  const int n = f.seed >= 0 ? int(chosen.size()) : (f.seeds > 0 ? f.seeds : int(chosen.size()));
  for (int i = 0; i < n; ++i)
    runs.push_back({chosen[size_t(i) % chosen.size()], f.seed >= 0 ? uint64_t(f.seed) : uint64_t(i + 1)});
  return runs;
}

void progress(size_t done, size_t total, const std::string& what) {
  const int width = 30, filled = int(width * done / std::max<size_t>(1, total));
  fmt::print(stderr, "\r[{}{}] {}/{} {:<40}", std::string(size_t(filled), '#'), std::string(size_t(width - filled), ' '),
             done, total, what);
  std::fflush(stderr);
}

/// The flags that give a replay the cluster of this run (none for the defaults).
std::string cluster_flags(const actors::chaos::chaos_options& o) {
  const actors::chaos::chaos_options defaults;
  std::string out;
  if (o.instances != defaults.instances) out += fmt::format(" --instances {}", o.instances);
  if (o.kv_blocks_per_instance != defaults.kv_blocks_per_instance)
    out += fmt::format(" --kv-blocks-per-instance {}", o.kv_blocks_per_instance);
  if (o.replica_min_tokens != defaults.replica_min_tokens)
    out += fmt::format(" --replica-min-tokens {}", o.replica_min_tokens);
  if (o.backend != defaults.backend) out += fmt::format(" --backend {}", o.backend);
  if (o.kv_type != defaults.kv_type) out += fmt::format(" --kv-type {}", o.kv_type);
  if (o.prefix_cache != defaults.prefix_cache) out += fmt::format(" --prefix-cache {}", o.prefix_cache);
  if (o.prefix_copy != defaults.prefix_copy) out += fmt::format(" --prefix-copy {}", o.prefix_copy);
  return out;
}

nlohmann::json books_json(const actors::chaos::books& b) {
  nlohmann::json j;
  for (const auto& [name, count] : actors::chaos::books::counts()) j[name] = b.*count;
  j["faults"] = b.faults;
  return j;
}

void print_table(const std::map<std::string, scenario_books>& by, const actors::chaos::books& total, double seconds) {
  static constexpr const char* row =
      "{:<18} {:>4} {:>6} {:>6} {:>8} {:>9} {:>6} {:>11} {:>4} {:>10} {:>10} {:>5} {:>6} {:>7} {:>8} {:>9} {:>10}\n";
  fmt::print(fmt::runtime(row), "scenario", "runs", "faults", "missed", "accepted", "completed", "failed", "unjustified",
             "lost", "duplicated", "mismatched", "extra", "leaked", "replica", "takeover", "recompute", "recomputed");
  auto line = [&](const std::string& name, const actors::chaos::books& b) {
    fmt::print(fmt::runtime(row), name, b.runs, b.faults_injected, b.missed, b.accepted, b.completed, b.failed,
               b.unjustified_failed, b.lost, b.duplicated, b.mismatched, b.extra_tokens, b.leaked_blocks,
               b.recovered_by_replica, b.recovered_by_takeover, b.recovered_by_recompute, b.positions_recomputed);
  };
  for (const auto& [name, s] : by) line(name, s.tally);
  line("total", total);
  fmt::print("{} runs in {:.1f} s; replica, takeover, recompute: how requests that lost KV went on; recomputed: KV "
             "positions prefilled again\n",
             total.runs, seconds);
}

void run_chaos(const chaos_flags& f) {
  if (f.list) {
    for (const auto& s : actors::chaos::scenarios())
      fmt::print("{:<18} {}{}\n", s.name, s.description, s.faults.empty() ? "" : " (faults: " + s.faults + ")");
    return;
  }
  const auto runs = plan_runs(f);
  actors::chaos::chaos_options options = f.options;
  options.backend = instance_backend(f.options.backend, "chaos");
  if (!f.plant.empty()) {
    const auto plant = actors::planted_defect_named(f.plant);
    if (!plant || *plant == actors::planted_defect::none) fail(fmt::format("--plant {}: no such defect", f.plant), 2);
    options.plant = *plant;
  }
  if (f.verbose)
    options.log = [](const std::string& line) {
      fmt::print(stderr, "{}\n", line);
      std::fflush(stderr);
    };
  auto model = gpu::load_model(f.model, {.weight_type = weight_type_of(f.weight_type, "chaos")});
  if (!model.is_ok()) fail(model.error().message());
  const bool terminal = isatty(STDERR_FILENO);
  const auto started = std::chrono::steady_clock::now();
  std::map<std::string, scenario_books> by;
  actors::chaos::books total;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& [s, seed] = runs[i];
    if (terminal) progress(i, runs.size(), fmt::format("{} seed {}", s->name, seed));
    const actors::chaos::run_result r = actors::chaos::run(model.value(), *s, seed, options);
    by[s->name].tally += r.tally;
    by[s->name].seeds.push_back(seed);
    total += r.tally;
    if (!r.missed.empty()) {
      if (terminal) fmt::print(stderr, "\n");
      fmt::print(stderr, "MISSED {} seed {}: {}\n", s->name, seed, r.missed);
    }
    if (r.tally.clean()) continue;
    if (terminal) fmt::print(stderr, "\n");
    fmt::print(stderr, "FAILED {} seed {}: {}\n  replay: illm chaos --scenario {} --seed {}{}{}\n", s->name, seed,
               fmt::join(r.problems, "; "), s->name, seed, cluster_flags(options),
               f.plant.empty() ? "" : " --plant " + f.plant);
  }
  if (terminal) progress(runs.size(), runs.size(), "done"), fmt::print(stderr, "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (f.json) {
    nlohmann::json out = {{"seconds", seconds}, {"total", books_json(total)}};
    for (const auto& [name, s] : by) {
      out["scenarios"][name] = books_json(s.tally);
      out["scenarios"][name]["seeds"] = s.seeds;
    }
    fmt::print("{}\n", out.dump());
  } else {
    print_table(by, total, seconds);
  }
  if (!total.clean()) fail("the books do not balance: see FAILED above for the runs and how to replay them", 1);
  for (const auto& [name, s] : by)
    if (double(s.tally.missed) * 100 > f.max_missed_percent * double(s.tally.runs))
      fail(fmt::format("{}: the fault missed its moment in {} of {} runs (more than --max-missed {}%): see MISSED above",
                       name, s.tally.missed, s.tally.runs, f.max_missed_percent),
           1);
}

}  // namespace

void add_chaos_command(CLI::App& app) {
  auto f = std::make_shared<chaos_flags>();
  CLI::App* cmd = app.add_subcommand(
      "chaos", "Run seeded fault scenarios on an embedded cluster and check the books of every request and pool");
  auto seeds = cmd->add_option("--seeds", f->seeds, "Runs in all, round-robin over the scenarios, seeds 1..N "
                                                    "(default: one per scenario)")
                   ->check(CLI::Range(1, 1000000));
  cmd->add_option("--seed", f->seed, "Run each chosen scenario once at this seed (replays a run)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 62))
      ->excludes(seeds);
  cmd->add_option("--scenario", f->scenario, "Only this scenario (--list names them)");
  add_model_flags(*cmd, f->model, f->weight_type);
  add_kv_type_flag(*cmd, f->options.kv_type);
  add_prefix_cache_flag(*cmd, f->options.prefix_cache);
  cmd->add_option("--prefix-copy", f->options.prefix_copy,
                  "With --prefix-cache cluster: 0 read remote prefix runs in place, 1 copy them when the performance "
                  "model says so (default), 2 always copy them")
      ->check(CLI::Range(actors::prefix_copy_never, actors::prefix_copy_always));
  cmd->add_option("--instances", f->options.instances, "Instances of the cluster (default 3)")->check(CLI::Range(2, 16));
  cmd->add_option("--kv-blocks-per-instance", f->options.kv_blocks_per_instance,
                  "KV blocks of 16 tokens per instance (default 64)")
      ->check(CLI::Range(16, 4096));
  cmd->add_flag("--json", f->json, "Print the books as one JSON object (per scenario and total)");
  cmd->add_flag("--list", f->list, "List the scenarios and exit");
  cmd->add_option("--replica-min-tokens", f->options.replica_min_tokens,
                  "Replicas on in every scenario for requests of this many tokens, with two more instances for their "
                  "memory (0: only in the scenarios that turn them on)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--backend", f->options.backend,
                  std::string("What the instances run on: ") + backend_choices + " (default cpu)");
  cmd->add_option("--plant", f->plant,
                  "Plant a defect on purpose, to see the books catch it: second-end, wrong-token, token-past-max, "
                  "leaked-block or failed-fitting (the run then fails)");
  cmd->add_option("--max-missed", f->max_missed_percent,
                  "Fail when a scenario's fault missed its moment (or found no target of its kind) in more than this "
                  "percentage of its runs (default 5)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_flag("--verbose", f->verbose, "Show the cluster's log lines (instances killed, blocks released)");
  cmd->callback([f] { run_chaos(*f); });
}

}  // namespace illm::cli
