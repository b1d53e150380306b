#pragma once
// A fault plan: what `--faults SPEC` asks of a process. One spec names faults of both planes: the data
// plane's (put.*, send.*, partition, transport/faulty/fault_spec.hpp) and the control plane's, injected by
// the actors (heartbeat.*, reply.*, promise.*). Its seed and delay_ms are shared. docs/faults.md lists
// every key with examples.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "gpu/status.hpp"
#include "transport/faulty/fault_spec.hpp"

namespace illm::actors::faults {

/// Where the actors inject control-plane faults.
enum class control_point {
  heartbeat,  ///< an rManager's heartbeat to the gManager
  reply,      ///< a destination's answers to a move (try_move_kvcache, commit_move) and a holder's to a chunk
  promise,    ///< a holder's answer to keep_blocks (a room's promise)
  order,      ///< the gManager's move orders (move_kvcache) to source rManagers
};
inline constexpr int control_point_count = 4;

/// Where a process crashes on purpose (`crash=POINT`): it dies there as SIGKILL would.
enum class crash_point {
  none,
  mid_move,     ///< a move's source, once its copies are put and flushed, before it commits
  mid_room,     ///< a room's owner, once a chunk of the room is reserved at its holder, before it is written
  after_order,  ///< the gManager, right after it sent a round of move orders
};

/// The name of a point in specs and counts: "heartbeat", "reply", "promise", "order".
const char* to_string(control_point p);
/// The name of a crash point in specs and counts: "mid_move", "mid_room", "after_order".
const char* to_string(crash_point p);

/// The chances (0 to 1) of each control-plane fault per point.
struct control_fault_spec {
  /// [point]: the message (or answer) is lost, arrives twice, or arrives delay later.
  double drop[control_point_count] = {};
  double duplicate[control_point_count] = {};
  double delay_chance[control_point_count] = {};
  /// [point]: the first this many messages (or answers) are lost for sure, before the chances apply.
  uint32_t drop_first[control_point_count] = {};
  /// Whether any fault is asked for.
  bool any() const;
};

/// A whole plan: the data plane's spec, the control plane's, the text it was read from.
struct fault_plan {
  std::string text;             ///< as given (empty: no faults)
  transport::fault_spec data;   ///< seed and delay are shared with control
  bool data_faults = false;     ///< whether the data plane gets any fault (else it is not wrapped)
  std::string data_text;        ///< the data plane's pairs of the text (for transport::make_plane)
  control_fault_spec control;
  crash_point crash = crash_point::none;  ///< where the process dies on purpose (none: nowhere)
  uint32_t crash_at = 1;                  ///< the how-manyth time the point is reached
  bool empty() const { return text.empty(); }
  /// Whether the actors inject anything (control-plane faults or a crash).
  bool in_actors() const { return control.any() || crash != crash_point::none; }
  /// The data plane's spec for endpoint `n` of a process with several: its own seed, drawn from the plan's.
  std::string data_text_for(uint64_t n) const;
};

/// Reads a spec ("seed=7,send.drop=0.02,heartbeat.drop=0.1,reply.dup=0.05,crash=mid_move@2"); the error names the key or value
/// that is wrong and what is allowed. An empty text is the empty plan.
gpu::result<fault_plan> parse_fault_plan(std::string_view text);

/// Which process injects a plan: the gManager's own (`illm gmanager`), an instance's (`illm instance`), or a
/// whole cluster in one process (`illm serve`, `illm chaos`).
enum class fault_role { gmanager, instance, embedded };

/// Whether `role` can inject every fault of `plan`; the error names the keys it cannot (the gManager injects
/// only order.* and crash=after_order, an instance every other fault).
gpu::status check_role(const fault_plan& plan, fault_role role);

/// Every fault a plan injects, for the loud line at start ("faults injected: ...").
std::string describe(const fault_plan& plan);

}  // namespace illm::actors::faults
