// `illm sim`: the cluster simulator over a trace, policies side by side, and a sweep of arrival rates
// giving each policy's highest rate within a latency SLO (the paper's Fig. 10), as CSV and a PNG plot.

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "actors/cli/setting_flags.hpp"
#include "actors/sim/simulation.hpp"

namespace illm::cli {

namespace {

struct sim_flags {
  std::string trace;
  std::string policies = "infinite,static-multi";
  actors::sim::sim_options options;
  std::string profile_file;
  std::string router = "least-requests";
  std::string hosted = "interleaved";
  std::string hosted_order = "decode-first";
  bool json = false;
  bool sweep = false;
  double slo_s = 0.05;  ///< median e2e latency per output token
  double room_pass_limit_s = std::chrono::duration<double>(actors::default_room_pass_limit).count();  ///< in seconds
  size_t sweep_limit = 2000;
  std::string sweep_out = "illm-sim-sweep";
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string item; std::getline(s, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

nlohmann::json timeline_json(const std::vector<actors::sim::timeline_row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : rows)
    out.push_back({{"end_s", t.end_s},
                   {"stepping_instances", t.stepping},
                   {"busy_fraction", t.busy_fraction},
                   {"hosted_fraction", t.hosted_fraction},
                   {"kv_used_fraction", t.kv_used_fraction},
                   {"kv_promised_fraction", t.kv_promised_fraction},
                   {"started", t.started},
                   {"finished", t.finished}});
  return out;
}

nlohmann::json report_json(const actors::sim::sim_report& r) {
  auto pct = [](const actors::sim::percentiles& p) {
    return nlohmann::json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}};
  };
  return {{"throughput_tok_s", r.throughput_tok_s},
          {"requests", r.requests},
          {"completed", r.completed},
          {"refused", r.refused},
          {"failed", r.failed},
          {"output_tokens", r.output_tokens},
          {"makespan_s", r.makespan_s},
          {"work_bound_s", r.work_bound_s},
          {"ttft_s", pct(r.ttft_s)},
          {"tpot_s", pct(r.tpot_s)},
          {"median_normalized_latency_s", r.median_normalized_latency_s},
          {"instances", r.instances},
          {"kv_tokens_per_instance", r.kv_tokens_per_instance},
          {"profile", r.profile_name},
          {"moves", r.moves},
          {"moves_failed", r.moves_failed},
          {"preemptions", r.preemptions},
          {"batch_tokens", r.batch_tokens},
          {"mean_step_tokens", r.mean_step_tokens},
          {"mean_step_sampled", r.mean_step_sampled},
          {"mixed_step_tokens", r.mixed_step_tokens},
          {"busy_fraction", r.busy_fraction},
          {"computing_fraction", r.computing_fraction},
          {"hosted_fraction", r.hosted_fraction},
          {"kv_used_fraction", r.kv_used_fraction},
          {"kv_promised_fraction", r.kv_promised_fraction},
          {"wall_s", r.wall_s},
          {"failures", r.failures},
          {"recovered_by_replica", r.recovered_by_replica},
          {"recovered_by_takeover", r.recovered_by_takeover},
          {"recovered_by_recompute", r.recovered_by_recompute},
          {"positions_recomputed", r.positions_recomputed},
          {"prompt_tokens", r.prompt_tokens},
          {"prefix_hit_tokens", r.prefix_hit_tokens},
          {"prefix_ceiling_tokens", r.prefix_ceiling_tokens},
          {"prefix_ceiling_idle_tokens", r.prefix_ceiling_idle_tokens},
          {"prefill_tokens", r.prefill_tokens},
          {"ttft_p50_s", r.ttft_s.p50},
          {"ttft_p99_s", r.ttft_s.p99},
          {"output_tokens_per_second", r.throughput_tok_s},
          {"timeline", timeline_json(r.timeline)}};
}

double percent(uint64_t part, uint64_t whole) { return whole > 0 ? 100.0 * double(part) / double(whole) : 0; }

void print_report(const actors::sim::sim_report& r) {
  fmt::print(
      "{:<14} {:>12.1f} tok/s  {:>6} done {:>5} refused {:>4} failed  makespan {:>9.1f} s (work {:.0f}%)  "
      "TTFT p50/p99 {:.2f}/{:.2f} s  TPOT p50/p99 {:.1f}/{:.1f} ms  moves {}  preempted {}  "
      "step {:.0f} tokens / {:.0f} sampled{}  busy {:.0f}% (computing {:.0f}%) + hosting {:.0f}%  "
      "KV used {:.0f}% + promised {:.0f}%  ({:.1f} s wall)\n",
      r.policy, r.throughput_tok_s, r.completed, r.refused, r.failed, r.makespan_s,
      r.makespan_s > 0 ? r.work_bound_s / r.makespan_s * 100 : 0, r.ttft_s.p50, r.ttft_s.p99, r.tpot_s.p50 * 1e3,
      r.tpot_s.p99 * 1e3, r.moves, r.preemptions, r.mean_step_tokens, r.mean_step_sampled,
      r.mixed_step_tokens > 0 ? fmt::format(" (<= {} with decodes)", r.mixed_step_tokens) : "", r.busy_fraction * 100,
      r.computing_fraction * 100, r.hosted_fraction * 100, r.kv_used_fraction * 100, r.kv_promised_fraction * 100,
      r.wall_s);
  if (r.prefix_hit_tokens > 0 || r.prefix_ceiling_tokens > 0)
    fmt::print("{:<14} prefix cache: {} of {} prompt tokens found ({:.1f}%; an LRU cache of the cluster's KV memory "
               "would find {:.1f}%, one of the memory the running requests leave {:.1f}%), {} prompt tokens computed\n",
               "", r.prefix_hit_tokens, r.prompt_tokens, percent(r.prefix_hit_tokens, r.prompt_tokens),
               percent(r.prefix_ceiling_tokens, r.prompt_tokens), percent(r.prefix_ceiling_idle_tokens, r.prompt_tokens),
               r.prefill_tokens);
  if (r.failures > 0)
    fmt::print("{:<14} {} instance(s) died: {} request(s) went on with replicas promoted, {} with the surviving "
               "blocks taken over, {} computed their KV again; {} positions computed again\n",
               "", r.failures, r.recovered_by_replica, r.recovered_by_takeover, r.recovered_by_recompute,
               r.positions_recomputed);
}

void print_timeline(const std::vector<actors::sim::timeline_row>& rows) {
  if (rows.empty()) return;
  fmt::print("  {:>9}  {:>8}  {:>5}  {:>7}  {:>7}  {:>8}  {:>7}  {:>7}\n", "until (s)", "stepping", "busy", "hosting",
             "KV used", "promised", "started", "done");
  for (const auto& t : rows)
    fmt::print("  {:>9.1f}  {:>8}  {:>4.0f}%  {:>6.0f}%  {:>6.0f}%  {:>7.0f}%  {:>7}  {:>7}\n", t.end_s, t.stepping,
               t.busy_fraction * 100, t.hosted_fraction * 100, t.kv_used_fraction * 100, t.kv_promised_fraction * 100,
               t.started, t.finished);
}

/// `first` over each other policy's throughput (those with any), keyed by the other policy.
nlohmann::json over_others(double first, const nlohmann::json& results, const std::vector<std::string>& policies) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 1; i < policies.size(); ++i)
    if (const double other = results[policies[i]]["throughput_tok_s"].get<double>(); other > 0)
      out[policies[i]] = first / other;
  return out;
}

/// The first policy's throughput over each other policy's, keyed by the other.
nlohmann::json throughput_ratios(const nlohmann::json& results, const std::vector<std::string>& policies) {
  return over_others(results[policies.front()]["throughput_tok_s"].get<double>(), results, policies);
}

/// The most the first policy's throughput could be over each other policy's: the first's output tokens over its
/// work bound (no schedule finishes that work sooner), over the other's throughput, keyed by the other.
nlohmann::json throughput_ratio_bounds(const nlohmann::json& results, const std::vector<std::string>& policies) {
  const auto& first = results[policies.front()];
  const double bound_s = first["work_bound_s"].get<double>();
  if (bound_s <= 0) return nlohmann::json::object();
  return over_others(first["output_tokens"].get<double>() / bound_s, results, policies);
}

/// What one instance is, for the header: "a100-80g llama2-13b", "2 a100-80g llama2-13b" or a profile's name.
std::string instance_label(const actors::sim::sim_options& o) {
  if (o.profile) return "'" + o.profile->name + "'";
  return fmt::format("{}{} {}", o.gpus_per_instance ? fmt::format("{} ", o.gpus_per_instance) : "", o.gpu, o.model);
}

/// One point of a sweep: a policy's run at one rate scale.
struct sweep_point {
  double scale = 0, request_rate = 0, median_normalized_latency_s = 0, throughput_tok_s = 0;
};

/// Runs `policy` on the sweep's requests with arrivals `scale` times faster.
sweep_point run_sweep_point(const sim_flags& f, const std::vector<actors::frontend::trace_row>& trace,
                            const std::string& policy, double scale) {
  actors::sim::sim_options o = f.options;
  o.policy = policy;
  o.rate_scale = scale;
  o.limit = f.sweep_limit;
  auto r = actors::sim::simulate(trace, o);
  if (!r.is_ok()) fail(r.error().message());
  return {scale, r->request_rate, r->median_normalized_latency_s, r->throughput_tok_s};
}

/// A policy's sweep, by ascending scale: doubling from 1/4 until far past the SLO, then halving the
/// gap between the highest scale within the SLO and the next one above it `refinements` times, so that
/// the highest rate within the SLO is known to 2^(1/2^refinements) rather than to a factor of 2.
std::vector<sweep_point> sweep_policy(const sim_flags& f, const std::vector<actors::frontend::trace_row>& trace,
                                      const std::string& policy) {
  constexpr int refinements = 4;
  std::vector<sweep_point> points;
  const auto within = [&](const sweep_point& p) { return p.median_normalized_latency_s < f.slo_s; };
  for (double scale = 0.25; scale <= 256; scale *= 2) {
    points.push_back(run_sweep_point(f, trace, policy, scale));
    if (points.back().median_normalized_latency_s > 10 * f.slo_s) break;  // far past the knee
  }
  const auto first_out = std::find_if_not(points.begin(), points.end(), within);
  if (first_out == points.begin() || first_out == points.end()) return points;
  double low = std::prev(first_out)->scale, high = first_out->scale;
  for (int i = 0; i < refinements; ++i) {
    const sweep_point mid = run_sweep_point(f, trace, policy, std::sqrt(low * high));
    (within(mid) ? low : high) = mid.scale;
    points.push_back(mid);
  }
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.scale < b.scale; });
  return points;
}

/// Draws the sweep as a PNG with gnuplot (fed on its standard input; the data inline); false when it
/// cannot.
bool plot_sweep(const sim_flags& f, const std::vector<std::pair<std::string, std::vector<sweep_point>>>& sweeps,
                const std::string& png) {
  const auto quoted = [](std::string text) {  // a gnuplot single-quoted string: '' is a quote
    for (size_t at = text.find('\''); at != std::string::npos; at = text.find('\'', at + 2)) text.insert(at, 1, '\'');
    return "'" + text + "'";
  };
  std::string script = fmt::format(
      "set terminal png size 900,600\nset output {}\nset xlabel 'request rate (req/s)'\n"
      "set ylabel 'median latency per output token (s)'\nset logscale xy\nset key top left\n"
      "set title {}\n",
      quoted(png),
      quoted(fmt::format("Latency against load ({} instances, {})", f.options.instances, instance_label(f.options))));
  for (size_t i = 0; i < sweeps.size(); ++i) {
    script += fmt::format("$policy{} << EOD\n", i);
    for (const sweep_point& p : sweeps[i].second)
      script += fmt::format("{} {}\n", p.request_rate, p.median_normalized_latency_s);
    script += "EOD\n";
  }
  script += "plot ";
  for (size_t i = 0; i < sweeps.size(); ++i)
    script += fmt::format("$policy{} using 1:2 with linespoints title {}, ", i, quoted(sweeps[i].first));
  script += fmt::format("{} title 'SLO' with lines dashtype 2\n", f.slo_s);
  const auto previous = std::signal(SIGPIPE, SIG_IGN);  // a gnuplot that is missing or quits early
  FILE* gnuplot = popen("gnuplot 2>/dev/null", "w");
  bool drawn = false;
  if (gnuplot) {
    const bool written = std::fwrite(script.data(), 1, script.size(), gnuplot) == script.size();
    drawn = pclose(gnuplot) == 0 && written;
  }
  std::signal(SIGPIPE, previous);
  return drawn;
}

/// Per policy: the highest offered request rate whose median normalized latency stays under the SLO;
/// every point as CSV and drawn as a PNG. Printed unless --json; returned as JSON (per policy the highest
/// rate and the points; the files written).
nlohmann::json run_sweep(const sim_flags& f, const std::vector<actors::frontend::trace_row>& trace,
                         const std::vector<std::string>& policies) {
  const std::string csv = f.sweep_out + ".csv", png = f.sweep_out + ".png";
  std::ofstream out(csv);
  if (!out) fail("cannot write " + csv);
  out << "policy,rate_scale,request_rate,median_normalized_latency_s,throughput_tok_s\n";
  std::vector<std::pair<std::string, std::vector<sweep_point>>> sweeps;
  nlohmann::json j = {{"slo_s", f.slo_s}, {"csv", csv}, {"policies", nlohmann::json::object()}};
  for (const auto& policy : policies) {
    sweeps.emplace_back(policy, sweep_policy(f, trace, policy));
    double best_rate = 0;
    nlohmann::json points = nlohmann::json::array();
    for (const sweep_point& p : sweeps.back().second) {
      out << fmt::format("{},{:.6g},{:.4f},{:.6f},{:.1f}\n", policy, p.scale, p.request_rate,
                         p.median_normalized_latency_s, p.throughput_tok_s);
      points.push_back({{"rate_scale", p.scale},
                        {"request_rate", p.request_rate},
                        {"median_normalized_latency_s", p.median_normalized_latency_s},
                        {"throughput_tok_s", p.throughput_tok_s}});
      if (p.median_normalized_latency_s < f.slo_s) best_rate = std::max(best_rate, p.request_rate);
    }
    j["policies"][policy] = {{"highest_rate_within_slo", best_rate}, {"points", points}};
    if (!f.json)
      fmt::print("{:<14} highest rate within the SLO ({} s per token, median): {:.2f} requests/s\n", policy, f.slo_s,
                 best_rate);
  }
  out.close();
  if (!out) fail("cannot write " + csv);
  const bool plotted = plot_sweep(f, sweeps, png);
  j["png"] = plotted ? nlohmann::json(png) : nlohmann::json();
  if (!f.json)
    fmt::print("sweep: {}{}\n", csv, plotted ? ", " + png : " (no plot: gnuplot failed or is not installed)");
  return j;
}

/// The simulator's options from the flags: the profile file read, the names of the routing and the hosted
/// attention's timing and order resolved; exits with a clear message on a bad one.
sim_flags resolve_flags(const sim_flags& f) {
  sim_flags flags = f;
  if (!f.profile_file.empty()) {
    auto p = actors::placement::profile_from_file(f.profile_file);
    if (!p.is_ok()) fail(p.error().message());
    flags.options.profile = p.value();
  }
  const auto routers = actors::sim::routing_names();
  const auto router = std::find(routers.begin(), routers.end(), f.router);
  if (router == routers.end()) fail("unknown --router '" + f.router + "'", 2);
  flags.options.router = actors::sim::routing(router - routers.begin());
  const auto timings = actors::sim::hosted_timing_names();
  const auto hosted = std::find(timings.begin(), timings.end(), f.hosted);
  if (hosted == timings.end())
    fail("unknown --hosted-attention '" + f.hosted + "' (interleaved, priority, shared or queued)", 2);
  flags.options.hosted = actors::sim::hosted_timing(hosted - timings.begin());
  if (f.hosted_order != "decode-first" && f.hosted_order != "arrival")
    fail("unknown --hosted-order '" + f.hosted_order + "' (decode-first or arrival)", 2);
  flags.options.decode_first = f.hosted_order == "decode-first";
  flags.options.room_pass_limit = std::chrono::milliseconds(int64_t(f.room_pass_limit_s * 1000 + 0.5));
  return flags;
}

/// The run's settings, as the JSON report gives them.
nlohmann::json settings_json(const sim_flags& f, const sim_flags& flags, size_t trace_rows) {
  return {
      {"trace", f.trace},
      {"requests", f.options.limit ? std::min(f.options.limit, trace_rows) : trace_rows},
      {"instances", f.options.instances},
      {"gpus_per_instance",
       f.options.gpus_per_instance ? nlohmann::json(f.options.gpus_per_instance) : nlohmann::json("fewest")},
      {"gpu", f.options.gpu},
      {"model", f.options.model},
      {"profile", flags.options.profile ? nlohmann::json(flags.options.profile->name) : nlohmann::json()},
      {"router", f.router},
      {"prefix_weight", f.options.prefix_weight},
      {"prefix_cache", f.options.instance.prefix_cache},
      {"max_unstarted", f.options.max_unstarted},
      {"rate_scale", f.options.rate_scale > 0 ? nlohmann::json(f.options.rate_scale) : nlohmann::json("saturating")},
      {"max_batch_tokens", f.options.batch.max_batch_tokens},
      {"max_batch_seqs", f.options.batch.max_batch_seqs},
      {"mixed_step_tokens", f.options.batch.mixed_step_tokens == actors::sim::auto_mixed_step_tokens
                                ? nlohmann::json("knee")
                                : nlohmann::json(f.options.batch.mixed_step_tokens)},
      {"overlap_min_tokens", f.options.batch.overlap_min_tokens},
      {"room_prefill_min_chunks", f.options.batch.room_prefill_min_chunks},
      {"room_pass_limit_s", f.room_pass_limit_s},
      {"kv_scale", f.options.kv_scale},
      {"timed_links", f.options.timed_links},
      {"hosted_attention", f.hosted},
      {"hosted_order", f.hosted_order}};
}

/// The run's settings in one line, before the reports.
void print_settings(const sim_flags& f, const sim_flags& flags, const nlohmann::json& settings) {
  fmt::print("illm sim: {} ({} requests), {} x {}{}{}, arrivals {}, batches <= {} tokens / {} sequences, {}, {}{}{}\n",
             f.trace, settings["requests"].get<size_t>(), f.options.instances, instance_label(flags.options),
             f.options.kv_scale != 1 ? fmt::format(" with {}x its KV memory", f.options.kv_scale) : "",
             f.options.timed_links ? "" : ", links taking no time",
             f.options.rate_scale > 0 ? fmt::format("x{}", f.options.rate_scale) : "all at once",
             f.options.batch.max_batch_tokens, f.options.batch.max_batch_seqs,
             f.options.batch.overlap_min_tokens > 0
                 ? fmt::format("two lanes from {} tokens with remote blocks", f.options.batch.overlap_min_tokens)
                 : "one lane",
             f.options.batch.room_prefill_min_chunks > 0
                 ? fmt::format("room prefill from {} chunks", f.options.batch.room_prefill_min_chunks)
                 : "rooms filled by moves",
             f.hosted == "interleaved" ? "" : ", hosted attention " + f.hosted,
             f.hosted_order == "decode-first" ? "" : ", hosted attention in arrival order");
}

void run_sim(const sim_flags& f) {
  auto trace = actors::frontend::read_trace(f.trace);
  if (!trace.is_ok()) fail(trace.error().message());
  const sim_flags flags = resolve_flags(f);
  const auto policies = split(f.policies);
  if (policies.empty()) fail("--policy needs at least one policy", 2);
  for (const auto& policy : policies) {  // before any output
    actors::sim::sim_options o = flags.options;
    o.policy = policy;
    if (gpu::status s = actors::sim::check_options(o); !s.is_ok()) fail(s.message());
  }
  nlohmann::json j;
  j["settings"] = settings_json(f, flags, trace->size());
  if (!f.json) print_settings(f, flags, j["settings"]);
  for (const auto& policy : policies) {
    actors::sim::sim_options o = flags.options;
    o.policy = policy;
    auto r = actors::sim::simulate(trace.value(), o);
    if (!r.is_ok()) fail(r.error().message());
    j["results"][policy] = report_json(r.value());
    if (!f.json) {
      print_report(r.value());
      print_timeline(r->timeline);
    }
  }
  j["throughput_ratio"] = throughput_ratios(j["results"], policies);
  j["throughput_ratio_bound"] = throughput_ratio_bounds(j["results"], policies);
  if (!f.json)
    for (const auto& [other, ratio] : j["throughput_ratio"].items())
      fmt::print("throughput {} / {}: {:.2f}x (no schedule of {}'s work passes {:.2f}x)\n", policies.front(), other,
                 ratio.get<double>(), policies.front(), j["throughput_ratio_bound"].value(other, 0.0));
  if (f.sweep) j["sweep"] = run_sweep(flags, trace.value(), policies);
  if (f.json) std::cout << j.dump() << "\n";
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto f = std::make_shared<sim_flags>();
  CLI::App* cmd = app.add_subcommand("sim", "Simulate a cluster on a trace with placement policies side by side");
  cmd->add_option("--trace", f->trace,
                  "Trace: a CSV of arrival_s,input_tokens,output_tokens, or Mooncake's JSON lines with hash_ids "
                  "(which prompts share which prefixes)")
      ->required();
  cmd->add_option("--instances", f->options.instances, "Instances (GPUs, or GPU groups for big models)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--gpus-per-instance", f->options.gpus_per_instance,
                  "GPUs of one instance, tensor parallel (default: as few as the weights need)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--gpu", f->options.gpu, "a100-80g, h100 or h200")->capture_default_str();
  cmd->add_option("--model", f->options.model, "llama2-7b, llama2-13b, llama2-70b or llama3-8b")->capture_default_str();
  cmd->add_option("--policy", f->policies, "Comma-separated: infinite, passive, static-multi, static-single")
      ->capture_default_str();
  cmd->add_option("--rate-scale", f->options.rate_scale, "Arrivals this many times faster (default: all at once)")
      ->check(number_from(0));
  cmd->add_option("--limit", f->options.limit, "The first N requests of the trace (0: all)");
  cmd->add_option("--router", f->router,
                  "least-requests, least-prompt-tokens, least-tokens (knows outputs), round-robin or prefix-aware "
                  "(as Dynamo's KV router: --prefix-weight x the prompt tokens not cached there + its unfinished "
                  "prompt tokens)")
      ->capture_default_str();
  cmd->add_option("--prefix-weight", f->options.prefix_weight,
                  "prefix-aware routing's weight of the prompt tokens to prefill against the load")
      ->check(number_from(0))
      ->capture_default_str();
  add_prefix_cache_flag(*cmd, f->options.instance.prefix_cache);
  cmd->add_option("--max-unstarted", f->options.max_unstarted,
                  "Requests an instance may hold that have not started; the front end queues the rest (0: none held)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  add_setting_flags(cmd, actors::batch_settings_table(), f->options.batch);  // per GPU of an instance
  cmd->get_option("--mixed-step-tokens")
      ->default_str(
          "the profile's knee: where its dense time per token comes within "
          "10% of its best");
  cmd->add_option("--room-pass-limit", f->room_pass_limit_s,
                  "While a long request waits for its room, younger requests whose rooms are no larger and fit have "
                  "theirs first, for this many seconds of its waiting (0: they wait behind it)")
      ->check(number_from(0, 1e9))
      ->capture_default_str();
  cmd->add_flag(
      "--free-links", [f](int64_t) { f->options.timed_links = false; },
      "Queries, partials and moved KV blocks cross between instances in no time (what if; by default at "
      "the GPU's NVLink inside a node of 8 and its NIC between nodes)");
  cmd->add_option("--kv-scale", f->options.kv_scale,
                  "Pools this many times the profile's KV capacity, for every policy (what if: more memory, a "
                  "smaller KV format)")
      ->check(above_zero())
      ->capture_default_str();
  cmd->add_option("--timeline", f->options.timeline_period_s,
                  "Per policy, a row per this many simulated seconds: instances stepping, GPU time, KV memory, "
                  "requests started and done (0: none)")
      ->check(number_from(0))
      ->capture_default_str();
  cmd->add_option("--hosted-attention", f->hosted,
                  "How a holder's GPU fits the attention it computes for others beside its own steps: interleaved "
                  "(one job at a time with its own layers, the attention first, its own step that much longer), "
                  "priority (first, its next step after it all), shared (half speed beside them) or queued (after "
                  "them)")
      ->capture_default_str();
  cmd->add_option("--hosted-order", f->hosted_order,
                  "The order a holder attends the queries it hosts in: decode-first (decode tokens before the "
                  "prefill queries queued, as the runtime's attention server) or arrival")
      ->capture_default_str();
  cmd->add_option("--fail-at", f->options.fail_at_s,
                  "Simulated seconds from the first arrival at which an instance dies (comma-separated); its requests "
                  "go on elsewhere")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fail-rate", f->options.fail_rate_per_hour,
                  "Instances also die at random times, this many per instance per simulated hour (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fail-seed", f->options.fail_seed, "Seed of which instances die and when (with --fail-rate)")
      ->capture_default_str();
  cmd->add_option("--replica-min-tokens", f->options.instance.replica_min_tokens,
                  "Full KV blocks of requests of at least this many tokens get a second copy on another instance "
                  "(0: no replicas)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--profile", f->profile_file, "A measured profile (illm profile) instead of the GPU's roofline");
  cmd->add_flag("--json", f->json, "Print one JSON object (results keyed by policy; with --sweep, the sweep as well)");
  cmd->add_flag("--sweep", f->sweep, "Sweep arrival rates; CSV and PNG of latency against load");
  cmd->add_option("--slo", f->slo_s, "Sweep SLO: median e2e latency per output token, seconds")
      ->check(above_zero())
      ->capture_default_str();
  cmd->add_option("--sweep-limit", f->sweep_limit, "Requests per sweep point")->capture_default_str();
  cmd->add_option("--sweep-out", f->sweep_out, "Sweep output prefix (.csv, .png)")->capture_default_str();
  cmd->callback([f] { run_sim(*f); });
}

}  // namespace illm::cli
