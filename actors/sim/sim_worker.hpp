#pragma once
// The simulator's worker: it runs no model. A step takes the time the performance model predicts for
// its batch, on the actor clock: the non-attention part for its tokens, and attention DistAttention-style
// (the owner attends its local blocks while each holder of its remote blocks attends those; a layer goes
// on when the slowest has). A holder spends that time too, and step_layout::hosted says how it fits beside
// the holder's own steps: by default (interleaved) the owner's own layers are booked on its GPU's calendar
// too, in the time the attention it hosts leaves free, and attention booked over them later goes first and
// makes the step end that much later; else it is added to the work queued on its GPU and runs first (its
// next step waits for it all), beside that work or after it. A holder
// attends one job at a time, booked on a calendar all the workers share (hosted_calendar.hpp): owners
// that attend it at once take turns, decode tokens' jobs first. A step
// the engine runs as two lanes (gpu::engine::long_enough_for_lanes, with remote blocks) is timed layer by
// layer as the engine orders it: one lane's dense layers run while the holders attend the other lane's
// queries. Queries reach a holder, and partials come back, over the links between them (links.hpp).
// A room's chunk (a batch entry computed for another instance's request) reads the blocks of the chunks
// before it, which other workers may still be computing: its queries of a layer reach such a holder no
// earlier than that holder's step has written the layer (chunk_layers, shared by the workers), and its
// own layers' written times are kept for the chunks after it.
// Every sampled token is an ordinary token (not an end of text), so requests run to their max tokens.

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "actors/messages.hpp"
#include "actors/placement/perf_model.hpp"
#include "actors/sim/hosted_calendar.hpp"
#include "actors/sim/hosted_timing.hpp"
#include "actors/sim/links.hpp"
#include "gpu/engine.hpp"
#include "gpu/model_config.hpp"

namespace illm::actors::sim {

/// What a simulated worker did (read after the run, on the coordinator's thread).
struct sim_worker_stats {
  uint64_t steps = 0;
  uint64_t tokens = 0;    ///< batch tokens over all steps
  uint64_t sampled = 0;   ///< sampled rows (decode tokens and last prefill chunks)
  double busy_s = 0;      ///< simulated time spent in steps
  double computing_s = 0; ///< of which computing: its dense layers, its own attention, sampling
  double hosted_s = 0;    ///< attention time spent for other instances' requests
};

/// How the engine's steps are laid out, for their timing.
struct step_layout {
  int overlap_min_tokens = gpu::engine_options{}.overlap_min_tokens;  ///< the engine's (two lanes from)
  /// The share of a layer's dense time before its attention (norm, QKV projection, RoPE): what a lane's
  /// holders wait for; the output projection and feed-forward come after.
  double front_share = 0.25;
  hosted_timing hosted = hosted_timing::interleaved;  ///< how a holder fits the attention it hosts
  /// Whether a holder attends decode tokens first, before the prefill queries queued on it (the runtime's
  /// attention server does: hosted_calendar::kind::urgent); else in the order they come.
  bool decode_first = true;
  /// What a lane's queries and their partials take to and from each holder: in a layer, those over NVLink
  /// go one after another, as do those over the NIC (none: no time).
  link_model links;
  attention_row_bytes row_bytes;
  /// A lane's queries of at least this many rows to several holders on another node go there once, to the
  /// first of them, which relays them over its node's links and sends their partials back merged (the
  /// runtime's remote router; 0: never).
  int relay_min_rows = 64;
};

/// The share of a layer's weights, and so of its dense time, in its QKV projection.
double dense_front_share(const gpu::model_config& shape);

/// When each layer of the room chunks under way is written, in simulated seconds: what the chunks after
/// them wait for. Shared by the workers (the test coordinator runs one actor at a time).
class chunk_layers {
 public:
  /// A chunk of (owner, request) at `pool`, positions [pos0, end), its layers written at these times.
  void add(uint32_t owner, uint64_t request, uint64_t chunk, uint32_t pool, int64_t pos0, std::vector<double> written_s);
  /// Forgets chunk `chunk` (its step ended: its layers are all written).
  void remove(uint64_t chunk);
  /// Per pool other than `pool`: the latest time each layer of the chunks of (owner, request) before position
  /// `before` is written, for those under way.
  std::map<instance_id, std::vector<double>> before(uint32_t owner, uint64_t request, int64_t before,
                                                    uint32_t pool) const;

 private:
  struct chunk {
    uint32_t owner = 0;
    uint64_t request = 0;
    uint32_t pool = 0;  ///< the instance computing it
    int64_t pos0 = 0;   ///< its first position
    std::vector<double> written_s;  ///< per layer, when its KV is written (simulated seconds)
  };
  std::map<uint64_t, chunk> chunks_;
};

/// Per lane of a step: for each holder, the earliest second (from the step's start) its attention of each
/// layer may begin, when it waits for a chunk before it to write that layer.
using layer_gates = std::vector<std::map<instance_id, std::vector<double>>>;

/// What a simulated worker needs.
struct sim_worker_config {
  instance_id id = 0;
  placement::profile model;
  step_layout layout;
  std::shared_ptr<std::vector<caf::actor>> workers;  ///< every simulated worker, by instance id
  std::shared_ptr<sim_worker_stats> stats;           ///< optional
  /// By instance id, the simulated second each worker's GPU is done with the work queued on it: every
  /// worker writes its own and reads its holders' (the test coordinator runs one actor at a time).
  std::shared_ptr<std::vector<double>> busy_until;
  std::shared_ptr<chunk_layers> chunks;  ///< the room chunks under way (none: chunks wait for nothing)
  /// The attention every GPU hosts, booked by all the workers (none: a holder attends each step's jobs as if
  /// it hosted nothing else).
  std::shared_ptr<hosted_calendar> calendar;
  /// Instances that died (failures injected): a step whose sequences read blocks there fails for them, as the
  /// runtime's attention router reports it (none: nobody dies).
  std::shared_ptr<std::set<uint32_t>> dead;
};

/// The predicted cost of a step.
struct step_cost {
  double seconds = 0;                      ///< until the owner has every partial
  double computing_s = 0;                  ///< of which the owner's GPU computes (the rest it waits)
  std::map<instance_id, double> hosted_s;  ///< attention each holder of remote blocks does for it
  std::vector<std::vector<double>> stored_s;  ///< per lane and layer: seconds until that layer's KV is stored
  int64_t middle_row = 0;                     ///< the first row of the second lane (the rows, with one lane)
};

/// Predicts a step of `plan` on instance `self` (exposed for tests); `holders_busy_s`: seconds from the step's
/// start until each holder's GPU is done with the work queued on it (none: idle); `gates`: when holders'
/// attention may begin, per lane and layer (none: at once); `calendar`: the hosted attention the holders
/// have booked, where this step, starting at second `start`, books its own (none: only its own).
step_cost predict_step(const placement::profile& model, instance_id self, const gpu::step_plan& plan,
                       const step_layout& layout, const std::map<instance_id, double>& holders_busy_s = {},
                       const layer_gates& gates = {}, hosted_calendar* calendar = nullptr, double start = 0);

/// Spawns a scheduled simulated worker.
caf::actor spawn_sim_worker(caf::actor_system& sys, sim_worker_config config);

}  // namespace illm::actors::sim
