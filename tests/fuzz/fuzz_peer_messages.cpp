// The control plane's messages as another process can send them: CAF's binary deserializer (what its wire
// protocol uses) over each message type that a peer's rManager, instance, front end or the gManager can reach
// (the first byte picks the type). Actor handles in them (joins, views, requests, room chunks) are read in an
// actor system of the fuzzer's own, as a receiving process reads them: a handle of this node is looked up in its
// registry, one of another node needs the middleman's proxies, which this system has not, and is refused.
// What decodes must serialize and decode again to the same bytes.
#include <caf/all.hpp>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "actors/messages/membership.hpp"
#include "actors/messages/placement.hpp"
#include "actors/messages/prefix_cache.hpp"
#include "actors/messages/replicas.hpp"
#include "actors/messages/requests.hpp"
#include "actors/messages/room_prefill.hpp"
#include "actors/messages/rooms.hpp"
#include "actors/messages/status.hpp"
#include "actors/messages/takeover.hpp"

using namespace illm::actors;

namespace {

/// The receiving process's actor system, made once and never destroyed (CAF 0.17's system does not survive the
/// destruction of statics at exit).
caf::actor_system& receiving_system() {
  static caf::actor_system& system = *new caf::actor_system(*new caf::actor_system_config);
  return system;
}

/// Decodes a T from `data`; when it decodes, checks that it serializes to bytes that decode to the same bytes.
template <class T>
void round_trip(const uint8_t* data, size_t size) {
  caf::actor_system& sys = receiving_system();
  caf::binary_deserializer source{sys, reinterpret_cast<const char*>(data), size};
  T x;
  if (source(x)) return;  // refused: nothing more to check
  std::vector<char> first, second;
  caf::binary_serializer sink{sys, first};
  if (sink(x)) std::abort();
  caf::binary_deserializer again{sys, first};
  T y;
  if (again(y)) std::abort();
  caf::binary_serializer sink2{sys, second};
  if (sink2(y) || first != second) std::abort();
}

using decoder = void (*)(const uint8_t*, size_t);

constexpr decoder decoders[] = {
    round_trip<heartbeat>,        round_trip<move_kvcache>,     round_trip<try_move_kvcache>,
    round_trip<move_reservation>, round_trip<commit_move>,      round_trip<commit_result>,
    round_trip<abort_move>,       round_trip<release_blocks>,   round_trip<move_report>,
    round_trip<keep_blocks>,      round_trip<release_room>,     round_trip<replicate_blocks>,
    round_trip<replica_result>,   round_trip<replicas_lost>,    round_trip<promote_replicas>,
    round_trip<replicas_promoted>, round_trip<report_orphan>,   round_trip<orphan_report>,
    round_trip<adopt_orphan>,     round_trip<orphan_adopted>,   round_trip<expel_member>,
    round_trip<drain_instance>,   round_trip<leave_cluster>,
    // with actor handles
    round_trip<join_cluster>,     round_trip<cluster_view>,     round_trip<use_gmanager>,
    round_trip<generate_request>, round_trip<token_event>,      round_trip<request_finished>,
    round_trip<cancel_request>,   round_trip<reserve_room>,     round_trip<room_answer>,
    round_trip<reserve_chunk>,    round_trip<prefill_chunk>,    round_trip<chunk_started>,
    round_trip<chunk_done>,       round_trip<commit_chunk>,     round_trip<abort_chunk>,
    round_trip<take_reservation>, round_trip<return_reservation>, round_trip<cancel_chunk>,
    // the gManager's answer to a front end
    round_trip<cluster_status>,
    // the cluster-wide prefix cache
    round_trip<prefix_lookup>,    round_trip<prefix_holders>,   round_trip<find_prefix>,
    round_trip<read_prefix>,      round_trip<prefix_read>,      round_trip<copy_prefix>,
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  decoders[data[0] % std::size(decoders)](data + 1, size - 1);
  return 0;
}
