#include "actors/placement/perf_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

#include "gpu/model_config.hpp"

namespace illm::actors::placement {

namespace {

/// Seconds at `x` from (x, seconds) points in ascending x: proportional below the first, linear between
/// points, along the last segment's slope beyond them.
double interpolate(const std::vector<std::pair<double, double>>& pts, double x) {
  if (pts.empty()) return 0.0;
  if (pts.size() == 1 || x <= pts.front().first) return pts.front().second * std::max(x, 0.0) / pts.front().first;
  for (size_t i = 1; i < pts.size(); ++i)
    if (x <= pts[i].first || i + 1 == pts.size()) {
      const auto [x0, y0] = pts[i - 1];
      const auto [x1, y1] = pts[i];
      return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
    }
  return pts.back().second;
}

/// Whether `pts` is a table interpolate() can read: x ascending, distinct and above 0; seconds above 0, or
/// (`zero_allowed`) 0 or more.
bool valid_table(const std::vector<std::pair<double, double>>& pts, bool zero_allowed) {
  const auto distinct = [](const auto& a, const auto& b) { return a.first == b.first; };
  const auto seconds_ok = [&](const auto& point) { return zero_allowed ? point.second >= 0 : point.second > 0; };
  return std::is_sorted(pts.begin(), pts.end()) && (pts.empty() || pts.front().first > 0) &&
         std::adjacent_find(pts.begin(), pts.end(), distinct) == pts.end() &&
         std::all_of(pts.begin(), pts.end(), seconds_ok);
}

}  // namespace

double dense_time(const profile& p, double beta) { return interpolate(p.dense_s, beta); }

double sampled_time(const profile& p, double rows) {
  if (rows <= 0) return 0.0;
  return p.sampled_s.empty() ? rows * p.sampled_row_s : interpolate(p.sampled_s, rows);
}

double dense_throughput(const profile& p, double beta) {
  const double t = dense_time(p, beta);
  return t > 0 ? beta / t : 0.0;
}

double cheapest_dense_per_token(const profile& p, int max_tokens) {
  double best = dense_time(p, max_tokens) / max_tokens;
  for (int beta = 1; beta < max_tokens; beta *= 2) best = std::min(best, dense_time(p, beta) / beta);
  return best;
}

int dense_knee_tokens(const profile& p, int max_tokens, double tolerance) {
  const double good_enough = cheapest_dense_per_token(p, max_tokens) * (1 + tolerance);
  for (int beta = 1; beta < max_tokens; beta *= 2)
    if (dense_time(p, beta) / beta <= good_enough) return beta;
  return max_tokens;
}

double layer_time(const profile& p, double beta, double kv_tokens) {
  return dense_time(p, beta) + std::max(0.0, kv_tokens) / p.attention_tokens_per_s;
}

double debtor_layer_time(const profile& p, double beta, double kv_tokens, double lent_tokens) {
  return layer_time(p, beta, kv_tokens) - lent_tokens / p.attention_tokens_per_s;
}

prefix_copy_costs prefix_copy_cost(const prefix_copy_inputs& in) {
  prefix_copy_costs c;
  const double bytes = double(in.blocks) * double(in.block_bytes);
  c.copy_s = 3 * in.round_trip_s + (in.copy_bytes_per_s > 0 ? bytes / in.copy_bytes_per_s : 0.0);
  if (!in.holder_read_anyway) c.read_in_place_s = std::max(0.0, in.decode_steps) * in.layers * in.round_trip_s;
  return c;
}

bool copy_beats_reading_in_place(const prefix_copy_inputs& in) {
  if (in.blocks == 0 || in.round_trip_s <= 0 || in.copy_bytes_per_s <= 0) return false;
  const prefix_copy_costs c = prefix_copy_cost(in);
  return c.copy_s < c.read_in_place_s;
}

double creditor_layer_time(const profile& p, double beta, double kv_tokens, double hosted_tokens) {
  return layer_time(p, beta, kv_tokens) + hosted_tokens / p.attention_tokens_per_s;
}

double step_time(const profile& p, double beta, double kv_tokens, double sampled) {
  return p.step_overhead_s + sampled_time(p, sampled) + p.n_layers * layer_time(p, beta, kv_tokens);
}

double attention_time(const profile& p, double decode_kv_tokens, double prefill_pairs) {
  const double pairs_s = p.prefill_pairs_per_s > 0 ? prefill_pairs / p.prefill_pairs_per_s
                                                   : prefill_pairs / p.attention_tokens_per_s;
  return p.n_layers * (std::max(0.0, decode_kv_tokens) / p.attention_tokens_per_s + pairs_s);
}

double mixed_step_time(const profile& p, double beta, double decode_kv_tokens, double prefill_pairs,
                       double sampled) {
  return step_time(p, beta, 0, sampled) + attention_time(p, decode_kv_tokens, prefill_pairs);
}

double instance_tps(const profile& p, double beta, double kv_tokens) {
  if (beta <= 0) return 0.0;
  return beta / step_time(p, beta, kv_tokens, beta);
}

double cluster_tps(const profile& p, const std::vector<std::pair<double, double>>& instances) {
  double sum = 0;
  for (const auto& [beta, kv] : instances) sum += instance_tps(p, beta, kv);
  return sum;
}

std::string to_json(const profile& p) {
  nlohmann::json dense = nlohmann::json::array();
  for (const auto& [tokens, seconds] : p.dense_s) dense.push_back({{"tokens", tokens}, {"seconds", seconds}});
  nlohmann::json j{{"name", p.name},
                   {"model", p.model},
                   {"n_layers", p.n_layers},
                   {"gpus", p.gpus},
                   {"dense_seconds_per_layer", dense},
                   {"attention_tokens_per_s", p.attention_tokens_per_s},
                   {"prefill_pairs_per_s", p.prefill_pairs_per_s},
                   {"step_overhead_s", p.step_overhead_s},
                   {"sampled_row_s", p.sampled_row_s},
                   {"kv_bytes_per_token", p.kv_bytes_per_token},
                   {"kv_capacity_tokens", p.kv_capacity_tokens}};
  if (p.node_link_bytes_per_s > 0 || p.network_bytes_per_s > 0) {
    j["node_link_bytes_per_s"] = p.node_link_bytes_per_s;
    j["network_bytes_per_s"] = p.network_bytes_per_s;
    j["gpus_per_node"] = p.gpus_per_node;
  }
  if (!p.sampled_s.empty()) {
    nlohmann::json& sampled = j["sampled_seconds"] = nlohmann::json::array();
    for (const auto& [rows, seconds] : p.sampled_s) sampled.push_back({{"rows", rows}, {"seconds", seconds}});
  }
  return j.dump(2);
}

gpu::result<profile> profile_from_json(const std::string& text) {
  auto bad = [](const std::string& what) {
    return gpu::status{gpu::status_code::invalid_argument, "profile: " + what};
  };
  const nlohmann::json j = gpu::parse_bounded_or_discarded(text, gpu::json_depth_outside_requests);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  profile p;
  try {
    p.name = j.value("name", "");
    p.model = j.value("model", "");
    p.n_layers = j.at("n_layers").get<int>();
    p.gpus = j.value("gpus", 1);
    for (const auto& point : j.at("dense_seconds_per_layer"))
      p.dense_s.emplace_back(point.at("tokens").get<double>(), point.at("seconds").get<double>());
    p.attention_tokens_per_s = j.at("attention_tokens_per_s").get<double>();
    p.prefill_pairs_per_s = j.value("prefill_pairs_per_s", 0.0);
    p.step_overhead_s = j.value("step_overhead_s", 0.0);
    p.sampled_row_s = j.value("sampled_row_s", 0.0);
    p.kv_bytes_per_token = j.value("kv_bytes_per_token", uint64_t(0));
    p.kv_capacity_tokens = j.value("kv_capacity_tokens", uint64_t(0));
    p.node_link_bytes_per_s = j.value("node_link_bytes_per_s", 0.0);
    p.network_bytes_per_s = j.value("network_bytes_per_s", 0.0);
    p.gpus_per_node = j.value("gpus_per_node", 8);
    if (j.contains("sampled_seconds"))
      for (const auto& point : j.at("sampled_seconds"))
        p.sampled_s.emplace_back(point.at("rows").get<double>(), point.at("seconds").get<double>());
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  if (p.n_layers <= 0 || p.dense_s.empty() || !(p.attention_tokens_per_s > 0))
    return bad("needs n_layers, dense_seconds_per_layer and attention_tokens_per_s > 0");
  if (!valid_table(p.dense_s, false))
    return bad("dense_seconds_per_layer must be in ascending tokens above 0, with seconds above 0");
  if (!valid_table(p.sampled_s, true))
    return bad("sampled_seconds must be in ascending rows above 0, with seconds of 0 or more");
  if (p.prefill_pairs_per_s < 0 || p.step_overhead_s < 0 || p.sampled_row_s < 0 || p.gpus < 1)
    return bad("prefill_pairs_per_s, step_overhead_s and sampled_row_s must be 0 or more, gpus 1 or more");
  if (!(p.node_link_bytes_per_s >= 0) || !(p.network_bytes_per_s >= 0) || p.gpus_per_node < 1)
    return bad("node_link_bytes_per_s and network_bytes_per_s must be 0 or more, gpus_per_node 1 or more");
  return p;
}

gpu::result<profile> profile_from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return gpu::status{gpu::status_code::io_error, "cannot read " + path};
  std::stringstream text;
  text << in.rdbuf();
  auto p = profile_from_json(text.str());
  if (!p.is_ok()) return gpu::status{p.error().code(), path + ": " + p.error().message()};
  return p;
}

namespace {

/// A GPU's datasheet numbers (fp16 dense tensor math, HBM, links).
struct gpu_spec {
  const char* name;
  double flops;           ///< fp16 dense, per second
  double hbm_bytes_per_s;
  double memory_bytes;
  double nvlink_bytes_per_s;   ///< one direction, per GPU
  double network_bytes_per_s;  ///< between nodes, per GPU (one NIC each)
};

constexpr std::array<gpu_spec, 3> gpus = {{
    {"a100-80g", 312e12, 2.039e12, 80e9, 300e9, 25e9},
    {"h100", 989e12, 3.35e12, 80e9, 450e9, 50e9},
    {"h200", 989e12, 4.8e12, 141e9, 450e9, 50e9},
}};

// What kernels reach in practice, as fractions of the datasheet, and fixed costs.
constexpr double compute_efficiency = 0.6, memory_efficiency = 0.8, attention_efficiency = 0.75;
constexpr double kernel_launch_s = 20e-6;  // per layer
constexpr double scheduling_s = 1e-3;      // per step: scheduler, sampling, host work
constexpr int gpus_per_node = 8;
constexpr double link_latency_s = 8e-6;  // per step of an all-reduce

const gpu_spec* find_gpu(std::string_view name) {
  for (const auto& g : gpus)
    if (name == g.name) return &g;
  return nullptr;
}

/// How a tensor-parallel group of `n` GPUs splits one layer: a GPU takes whole heads, so the busiest
/// holds ceil(heads / n) of them, and a key/value head is copied to every GPU whose query heads use it
/// once there are more GPUs than key/value heads; the MLP splits evenly. Shares of the busiest GPU,
/// which every step waits for (1/n each when n divides the heads).
struct tp_split {
  double q_share = 1;    ///< query heads, and the q and o projections
  double kv_share = 1;   ///< key/value heads: their projections, KV memory and reads
  double mlp_share = 1;
};

tp_split split_over(const gpu::model_config& c, int n) {
  const auto busiest = [n](int parts) { return std::ceil(double(parts) / n) / parts; };
  return {busiest(c.n_heads), busiest(c.n_kv_heads), busiest(c.hidden_dim)};
}

/// Parameters of one layer, in all and on the busiest GPU of the split (of a mixture of experts, every expert's).
std::pair<double, double> layer_params(const gpu::model_config& c, const tp_split& s) {
  const double d = c.dim, kv = c.kv_dim(), h = c.ffn_rows(), shared = 3.0 * d * c.shared_hidden_dim + d * c.n_experts;
  return {2 * d * d + 2 * d * kv + 3 * d * h + shared,
          2 * d * d * s.q_share + 2 * d * kv * s.kv_share + (3 * d * h + shared) * s.mlp_share};
}

}  // namespace

double experts_touched(const gpu::model_config& c, double beta) {
  const double e = c.n_experts, k = c.n_experts_used;
  return e > 0 ? e * (1.0 - std::pow(1.0 - k / e, beta)) : 0.0;
}

namespace {

/// One layer's weights as a step of `beta` tokens uses them on the busiest GPU of the split: those each token
/// multiplies, and those the step reads (of a mixture of experts, only the experts its tokens chose).
struct layer_use {
  double per_token = 0;
  double read = 0;
};

layer_use use_of_layer(const gpu::model_config& c, double beta, const tp_split& s) {
  if (!c.has_experts()) {
    const double params = layer_params(c, s).second;
    return {params, params};
  }
  const double d = c.dim, kv = c.kv_dim(), expert = 3.0 * d * c.hidden_dim * s.mlp_share;
  const double always = 2 * d * d * s.q_share + 2 * d * kv * s.kv_share +
                        (3.0 * d * c.shared_hidden_dim + d * c.n_experts) * s.mlp_share;
  return {always + c.n_experts_used * expert, always + experts_touched(c, beta) * expert};
}

/// Non-attention time of one layer for `beta` tokens on the busiest GPU of the split.
double roofline_dense(const gpu_spec& g, const gpu::model_config& c, double beta, const tp_split& split) {
  const layer_use use = use_of_layer(c, beta, split);
  const double compute = 2 * use.per_token * beta / (g.flops * compute_efficiency);
  const double memory = 2 * use.read / (g.hbm_bytes_per_s * memory_efficiency);
  return std::max(compute, memory) + kernel_launch_s;
}

/// Two all-reduces of the activations per layer over `n` GPUs, as a collective library runs them: large
/// ones as rings, each GPU sending 2(n-1)/n of the bytes; across nodes one ring per NIC, so a node's
/// inter-node traffic spreads over all its GPUs' NICs (the slower of NVLink and the node's NICs together
/// bounds it); small ones as trees, 2 log2(n) steps of latency.
double all_reduce(const gpu_spec& g, const gpu::model_config& c, double beta, int n) {
  if (n <= 1) return 0.0;
  const double bytes = 2 * beta * c.dim;  // fp16
  const double link = n <= gpus_per_node ? g.nvlink_bytes_per_s
                                         : std::min(g.nvlink_bytes_per_s, g.network_bytes_per_s * gpus_per_node);
  return 2 * (2.0 * (n - 1) / n * bytes / link + 2.0 * std::ceil(std::log2(double(n))) * link_latency_s);
}

profile make_profile(const gpu_spec& g, const gpu::model_config& c, std::string_view model, int gpus_per_instance,
                     bool tensor_parallel) {
  const tp_split split = split_over(c, gpus_per_instance);
  profile p;
  p.name = fmt::format("{} x{} {} (roofline{})", g.name, gpus_per_instance, model,
                       tensor_parallel ? fmt::format(", TP, up to {} of {} heads per GPU",
                                                     int(std::ceil(double(c.n_heads) / gpus_per_instance)), c.n_heads)
                                       : "");
  p.model = std::string(model);
  p.n_layers = c.n_layers;
  p.gpus = gpus_per_instance;
  for (double beta : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0})
    p.dense_s.emplace_back(beta, roofline_dense(g, c, beta, split) + all_reduce(g, c, beta, gpus_per_instance));
  const double kv_bytes_per_layer_token = 2.0 * c.kv_dim() * 2;  // K and V, fp16
  // Attention splits by heads: the busiest GPU reads its key/value heads' KV and computes its query heads'.
  p.attention_tokens_per_s = g.hbm_bytes_per_s * attention_efficiency / (kv_bytes_per_layer_token * split.kv_share);
  // QK and PV: 4 flops per head dimension and pair, over every query head.
  p.prefill_pairs_per_s = g.flops * compute_efficiency / (4.0 * c.dim * split.q_share);
  p.sampled_row_s = 2.0 * c.vocab_size * c.dim / (g.flops * compute_efficiency * gpus_per_instance);
  p.step_overhead_s = 2.0 * c.vocab_size * c.dim / (g.hbm_bytes_per_s * memory_efficiency) + scheduling_s;
  p.kv_bytes_per_token = uint64_t(kv_bytes_per_layer_token * c.n_layers);
  p.node_link_bytes_per_s = g.nvlink_bytes_per_s;
  p.network_bytes_per_s = g.network_bytes_per_s;
  p.gpus_per_node = gpus_per_node;
  // The instance holds as many tokens as its busiest GPU does: its share of the weights and of each token's KV.
  const auto [params, params_here] = layer_params(c, split);
  const double weights_here = 2.0 * double(c.parameter_count(false)) * params_here / params;
  const double usable = 0.9 * g.memory_bytes - weights_here - 2e9;  // activations
  p.kv_capacity_tokens = uint64_t(std::max(0.0, usable) / (double(p.kv_bytes_per_token) * split.kv_share));
  return p;
}

}  // namespace

std::vector<std::string> builtin_gpus() {
  std::vector<std::string> out;
  for (const auto& g : gpus) out.emplace_back(g.name);
  return out;
}

gpu::result<profile> roofline_profile(std::string_view gpu_name, std::string_view model) {
  const gpu_spec* g = find_gpu(gpu_name);
  if (!g)
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("no built-in profile for GPU '{}' (built in: {})", gpu_name,
                                   fmt::join(builtin_gpus(), ", "))};
  auto c = gpu::preset_config(model);
  if (!c.is_ok()) return c.error();
  // As many GPUs per instance as the weights need, leaving at least a third of the memory for KV.
  const double weights = 2.0 * double(c->parameter_count(false));
  int n = 1;
  while (weights > 0.6 * g->memory_bytes * n) n *= 2;
  return make_profile(*g, c.value(), model, n, n > 1);
}

gpu::result<profile> tensor_parallel_profile(std::string_view gpu_name, std::string_view model, int gpus_count) {
  const gpu_spec* g = find_gpu(gpu_name);
  if (!g) return roofline_profile(gpu_name, model).error();
  auto c = gpu::preset_config(model);
  if (!c.is_ok()) return c.error();
  if (gpus_count < 1) return gpu::status{gpu::status_code::invalid_argument, "a tensor-parallel group needs GPUs"};
  return make_profile(*g, c.value(), model, gpus_count, true);
}

}  // namespace illm::actors::placement
