#pragma once
// The paper's performance model (plain C++, no CAF). One layer of a step with a batch of β tokens whose
// queries attend S KV tokens in all takes T(β, S) = W(β)/f(β) + S/g: the non-attention part at the
// throughput f(β) this batch size reaches, plus attention at g KV tokens per second. An instance whose K
// tokens are attended by a creditor (a debtor) takes T - K/g; the creditor takes T + K/g. Its
// throughput is β / (L · T) tokens per second; the cluster's is the sum over instances.
//
// A profile holds the measured (illm profile) or modelled (a GPU's roofline) numbers behind f and g.
// Prefill chunks add the causal attention of their own queries: many queries share each key, so it
// costs per (query, key) pair at the rate h rather than per key read; a step's attention is
// S_decode / g + P_prefill / h.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu/model_config.hpp"
#include "gpu/status.hpp"

namespace illm::actors::placement {

/// The costs of one instance running one model.
struct profile {
  std::string name;   ///< e.g. "a100-80g llama2-13b (roofline)" or "cpu stories15m (measured)"
  std::string model;  ///< the model shape
  int n_layers = 0;
  int gpus = 1;  ///< devices of one instance (tensor parallel)
  /// Non-attention time of one layer, in seconds, at batch sizes in tokens (ascending); linear between
  /// points, and along the last segment's slope beyond them.
  std::vector<std::pair<double, double>> dense_s;
  double attention_tokens_per_s = 0;  ///< g: KV tokens one layer's attention reads per second
  double prefill_pairs_per_s = 0;     ///< h: (query, key) pairs of prefill attention per second, per layer
  double step_overhead_s = 0;         ///< per step, outside the layers
  double sampled_row_s = 0;           ///< per sampled token (classifier, sampling)
  /// Measured: classifier and sampling time of n sampled rows, at row counts (ascending), as dense_s is
  /// read; a kernel that pads small batches makes it a staircase, not a line. Empty: n · sampled_row_s.
  std::vector<std::pair<double, double>> sampled_s;
  uint64_t kv_bytes_per_token = 0;    ///< all layers
  uint64_t kv_capacity_tokens = 0;    ///< KV one instance holds
  /// The links between GPUs, one direction, per GPU: NVLink inside a node of gpus_per_node, a NIC between
  /// nodes (0: not modelled, as between instances of one process).
  double node_link_bytes_per_s = 0;
  double network_bytes_per_s = 0;
  int gpus_per_node = 8;
};

/// W(β)/f(β): one layer's non-attention time for β tokens.
double dense_time(const profile& p, double beta);
/// The classifier and sampling time of `rows` sampled rows: the sampled_s table, or rows · sampled_row_s.
double sampled_time(const profile& p, double rows);
/// f(β): non-attention tokens per second at batch β.
double dense_throughput(const profile& p, double beta);
/// The least non-attention time per token over batches of at most `max_tokens` (powers of two, and
/// `max_tokens` itself): what the dense layers cost a token at best.
double cheapest_dense_per_token(const profile& p, int max_tokens);
/// The smallest power-of-two batch (at most `max_tokens`) whose non-attention time per token is within
/// `tolerance` of the cheapest: below it a step pays for reading the weights more than for its tokens.
int dense_knee_tokens(const profile& p, int max_tokens, double tolerance = 0.1);
/// T(β, S).
double layer_time(const profile& p, double beta, double kv_tokens);
/// T(β, S) - K/g: a debtor whose K tokens are attended elsewhere.
double debtor_layer_time(const profile& p, double beta, double kv_tokens, double lent_tokens);
/// T(β, S) + K/g: a creditor attending K more tokens for others.
double creditor_layer_time(const profile& p, double beta, double kv_tokens, double hosted_tokens);
/// A whole step: L · T(β, S) plus the per-step and per-sample costs (decode attention only).
double step_time(const profile& p, double beta, double kv_tokens, double sampled);
/// A whole step of a mixed batch: β tokens, S KV tokens read by decode queries, P (query, key) pairs of
/// prefill attention, and the sampled rows.
double mixed_step_time(const profile& p, double beta, double decode_kv_tokens, double prefill_pairs, double sampled);
/// The attention part of a step, all layers: S decode KV tokens and P prefill (query, key) pairs. What a
/// holder of blocks spends on a request whose blocks it keeps.
double attention_time(const profile& p, double decode_kv_tokens, double prefill_pairs);
/// β / (L · T): the decode tokens per second of an instance.
double instance_tps(const profile& p, double beta, double kv_tokens);
/// Σ instance_tps over (β, S) per instance.
double cluster_tps(const profile& p, const std::vector<std::pair<double, double>>& instances);

/// A run of a shared prefix that another instance's cache holds: what attending it where it lies costs the reading
/// request, against copying it into the reader's cache first.
struct prefix_copy_inputs {
  uint32_t blocks = 0;         ///< the run's blocks
  uint64_t block_bytes = 0;    ///< KV bytes of one block (all layers)
  int layers = 0;              ///< a decode step attends the run once per layer
  double decode_steps = 0;     ///< the steps the request will attend it (its new tokens at most)
  double round_trip_s = 0;     ///< measured between the reader and the holder (0: not measured yet)
  double copy_bytes_per_s = 0; ///< the rate copies reach (measured, or a stated prior)
  /// The request attends blocks in place at some holder anyway (this one or another: a step's queries go to all
  /// at once): the round trips are paid.
  bool holder_read_anyway = false;
};

/// The two costs, in seconds of the reading request's time.
struct prefix_copy_costs {
  /// The copy, once: a reservation, the puts and their flush, the commit (three round trips), and the bytes.
  double copy_s = 0;
  /// Attending in place: a round trip per layer per decode step, the query out and the partials back (none when
  /// the request attends a holder in place anyway).
  double read_in_place_s = 0;
};

prefix_copy_costs prefix_copy_cost(const prefix_copy_inputs& in);
/// Copy when the copy costs less than reading in place; never without a measured round trip or a rate.
bool copy_beats_reading_in_place(const prefix_copy_inputs& in);

/// JSON of a profile (what `illm profile --out` writes) and back; a malformed file is an error.
std::string to_json(const profile& p);
gpu::result<profile> profile_from_json(const std::string& text);
/// A profile read from a file; an unreadable or malformed file is an error naming it.
gpu::result<profile> profile_from_file(const std::string& path);

/// Experts a step of `beta` tokens reads in each layer of model `c`: each token picks k of the E, so E (1 - (1 -
/// k/E)^beta) on average (for Qwen3-30B-A3B, 128 experts, 8 a token: 64% of them at 16 tokens, 98% at 64); 0 for
/// a dense model.
double experts_touched(const gpu::model_config& c, double beta);

/// GPUs with a built-in roofline: a100-80g, h100, h200.
std::vector<std::string> builtin_gpus();
/// The roofline profile of `model` (llama2-7b, llama2-13b, llama2-70b, llama3-8b, mixtral-8x7b, qwen3-30b-a3b) on
/// `gpu`, fp16 weights and KV; an instance spans as many GPUs as its weights need. A step of a mixture of experts
/// multiplies each token's k experts and reads the experts its tokens chose (experts_touched).
gpu::result<profile> roofline_profile(std::string_view gpu, std::string_view model);
/// One instance over `gpus` GPUs of `gpu` by tensor parallelism (static-single): the non-attention work
/// is split, with two all-reduces per layer over NVLink inside a node and the network between nodes.
gpu::result<profile> tensor_parallel_profile(std::string_view gpu, std::string_view model, int gpus);

}  // namespace illm::actors::placement
