// `illm profile`: measures the performance model on a real backend, or checks a profile against
// mixed batches it was not fitted on.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "actors/placement/profiler.hpp"
#include "gpu/backend_registry.hpp"

namespace illm::cli {

namespace {

struct profile_flags {
  std::string model = "stories15M";
  std::string weight_type;
  std::string kv_type = "f32";
  std::string backend = "cpu";
  int threads = 0;
  std::string out = "profile.json";
  std::string profile;  // with --validate: the profile to check (default: measure one first)
  bool validate = false;
  bool json = false;
  int repeats = 5;
};

void print_profile(const actors::placement::profile& p) {
  fmt::print("{}: {} layers, attention g = {:.3g} KV tokens/s per layer, sampled row {:.3g} ms\n", p.name, p.n_layers,
             p.attention_tokens_per_s, p.sampled_row_s * 1e3);
  fmt::print("  non-attention time per layer (and throughput f):\n");
  for (const auto& [tokens, seconds] : p.dense_s)
    fmt::print("  {:>6} tokens  {:>9.4f} ms  {:>10.0f} tokens/s\n", tokens, seconds * 1e3, tokens / seconds);
  if (p.sampled_s.empty()) return;
  fmt::print("  classifier and sampling:\n");
  for (const auto& [rows, seconds] : p.sampled_s) fmt::print("  {:>6} rows    {:>9.4f} ms\n", rows, seconds * 1e3);
}

/// The profile to check: read from --profile, which must describe the model it is checked on; one measured
/// on another device (or thread count) is checked with a note saying so.
actors::placement::profile profile_to_validate(const profile_flags& f, const gpu::loaded_model& model,
                                               const gpu::backend& device) {
  auto loaded = actors::placement::profile_from_file(f.profile);
  if (!loaded.is_ok()) fail(loaded.error().message());
  const actors::placement::profile& p = loaded.value();
  const int layers = model.weights->config().n_layers;
  if (p.model != model.name || p.n_layers != layers)
    fail(fmt::format("{} describes {} ({} layers), not {} ({} layers): measure one with illm profile --model {}",
                     f.profile, p.model.empty() ? "an unnamed model" : p.model, p.n_layers, model.name, layers,
                     f.model));
  if (p.name.rfind(device.description() + " ", 0) != 0)
    fmt::print(stderr, "note: {} is '{}', checked on {}\n", f.profile, p.name, device.description());
  return p;
}

/// Measures a profile and writes it to --out: into a file beside it, opened first (a bad path costs no
/// measuring), then renamed over it (a failed run leaves an earlier profile there as it was).
void write_profile(const profile_flags& f, const gpu::loaded_model& model, gpu::backend& device,
                   const actors::placement::profiler_options& options) {
  const std::string partial = f.out + ".partial";
  std::ofstream out(partial);
  if (!out) fail("cannot write " + f.out);
  auto measured = actors::placement::measure_profile(model, device, options);
  const std::string json = measured.is_ok() ? actors::placement::to_json(measured.value()) : "";
  out << json << "\n";
  out.close();
  if (!measured.is_ok() || !out || std::rename(partial.c_str(), f.out.c_str()) != 0) {
    std::remove(partial.c_str());
    fail(measured.is_ok() ? "cannot write " + f.out : measured.error().message());
  }
  if (f.json) {
    std::cout << json << "\n";
  } else {
    print_profile(measured.value());
    fmt::print("written to {}\n", f.out);
  }
}

/// The predicted and measured times of the held-back batches, with the median error.
void print_validation(const profile_flags& f, const actors::placement::profile& p,
                      const std::vector<actors::placement::validation_point>& points) {
  std::vector<double> errors;
  for (const auto& v : points) errors.push_back(std::abs(v.error()));
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
  const double median = errors[errors.size() / 2];
  if (f.json) {
    nlohmann::json j = {{"profile", p.name}, {"median_abs_error", median}};
    for (const auto& v : points)
      j["batches"].push_back({{"decode_sequences", v.decode_sequences},
                              {"prefill_tokens", v.prefill_tokens},
                              {"kv_tokens", v.work.kv_tokens},
                              {"predicted_s", v.predicted_s},
                              {"measured_s", v.measured_s},
                              {"error", v.error()}});
    std::cout << j.dump() << "\n";
    return;
  }
  fmt::print("validation of {} on {} held-back mixed batches:\n", p.name, points.size());
  fmt::print("{:>8} {:>8} {:>10} {:>12} {:>12} {:>8}\n", "decodes", "prefill", "KV tokens", "predicted ms",
             "measured ms", "error");
  for (const auto& v : points)
    fmt::print("{:>8} {:>8} {:>10.0f} {:>12.3f} {:>12.3f} {:>7.1f}%\n", v.decode_sequences, v.prefill_tokens,
               v.work.kv_tokens, v.predicted_s * 1e3, v.measured_s * 1e3, v.error() * 100);
  fmt::print("median |error|: {:.1f}%\n", median * 100);
}

void run_profile(const profile_flags& f) {
  auto model = gpu::load_model(f.model, {.weight_type = weight_type_of(f.weight_type, "profile")});
  if (!model.is_ok()) fail(model.error().message());
  auto device = gpu::make_backend(f.backend, f.threads);
  if (!device.is_ok()) fail(device.error().message());
  actors::placement::profiler_options options;
  options.kv_type = kv_type_of(f.kv_type, "profile");
  options.repeats = f.repeats;
  if (!f.validate) return write_profile(f, model.value(), *device.value(), options);
  if (!f.profile.empty()) {
    const actors::placement::profile p = profile_to_validate(f, model.value(), *device.value());
    auto points = actors::placement::validate_profile(p, model.value(), *device.value(), options);
    if (!points.is_ok()) fail(points.error().message());
    return print_validation(f, p, points.value());
  }
  auto checked = actors::placement::measure_and_validate(model.value(), *device.value(), options, true);
  if (!checked.is_ok()) fail(checked.error().message());
  print_validation(f, checked->measured, checked->points);
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto flags = std::make_shared<profile_flags>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure the performance model on a backend (or --validate one)");
  add_model_flags(*cmd, flags->model, flags->weight_type);
  add_kv_type_flag(*cmd, flags->kv_type);
  cmd->add_option("--backend", flags->backend, "Backend to measure")->capture_default_str();
  cmd->add_option("--threads", flags->threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--out", flags->out, "Where the profile is written")->capture_default_str();
  cmd->add_flag("--validate", flags->validate, "Compare predicted and measured times on held-back mixed batches");
  cmd->add_option("--profile", flags->profile, "With --validate: the profile to check (default: measure one)");
  cmd->add_option("--repeats", flags->repeats, "Runs per step (the lower quartile is kept)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print JSON");
  cmd->callback([flags] { run_profile(*flags); });
}

}  // namespace illm::cli
