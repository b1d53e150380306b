#pragma once
// The runtime's messages declared (defined in actors/messages/, but for the two shapes several messages share, defined
// here: move_notice and move_outcome), and its atoms: what the actors' typed interfaces (actors/interfaces.hpp) name.

#include <caf/all.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "actors/placement/types.hpp"

namespace illm::actors {

/// The most bytes a string or byte vector of a message may hold on the wire (reasons, addresses and keys are far
/// smaller). CAF 0.17 allocates a byte sequence at the length a peer claims before it reads a byte: a 20-byte
/// message could make the receiver allocate gigabytes. Fields of ILLM_INSPECT are read through bounded_bytes.
inline constexpr size_t max_wire_bytes = size_t(1) << 20;

/// A string or byte vector of a message, read with its length checked before anything is allocated.
template <class Bytes>
struct bounded_bytes {
  Bytes& value;
};

/// Saves a bounded_bytes as CAF saves the sequence itself; loads it in the same format, its length checked.
template <class Inspector, class Bytes>
typename Inspector::result_type inspect(Inspector& f, bounded_bytes<Bytes>& b) {
  if constexpr (Inspector::reads_state) {
    return f(b.value);
  } else {
    size_t n = 0;
    if (auto err = f.begin_sequence(n)) return err;
    if (n > max_wire_bytes) return caf::make_error(caf::sec::invalid_argument, "a message field longer than allowed");
    b.value.resize(n);
    if (n > 0)
      if (auto err = f.apply_raw(n, static_cast<void*>(&b.value[0]))) return err;
    return f.end_sequence();
  }
}

/// A floating-point field of a message, finite both ways: CAF 0.17 writes floats through a loop that never ends
/// for an infinity or a NaN (a peer's message holding one would hang whichever process forwarded it), so such a
/// value is refused when read and when written.
template <class Float>
struct finite_number {
  Float& value;
};

/// Saves or loads a finite_number as CAF does the number itself; a value that is not finite is an error.
template <class Inspector, class Float>
typename Inspector::result_type inspect(Inspector& f, finite_number<Float>& x) {
  auto refused = [] { return caf::make_error(caf::sec::invalid_argument, "a message number that is not finite"); };
  if constexpr (std::is_void_v<typename Inspector::result_type>) {
    return f(x.value);  // printed: nothing to refuse
  } else if constexpr (Inspector::reads_state) {
    if (!std::isfinite(x.value)) return refused();
    return f(x.value);
  } else {
    if (auto err = f(x.value)) return err;
    if (!std::isfinite(x.value)) return refused();
    return {};
  }
}

/// A message field as ILLM_INSPECT hands it to CAF: strings and byte vectors bounded, floating-point numbers
/// finite, the rest as they are.
template <class T>
decltype(auto) wire_field(T& x) {
  if constexpr (caf::detail::is_byte_sequence<T>::value)
    return bounded_bytes<T>{x};
  else if constexpr (std::is_floating_point_v<T>)
    return finite_number<T>{x};
  else
    return (x);
}

/// The fields of a message of type `name` through `f`, each as wire_field hands it.
template <class Inspector, class... Fields>
typename Inspector::result_type inspect_fields(Inspector& f, const char* name, Fields&... fields) {
  return f(caf::meta::type_name(name), wire_field(fields)...);
}

/// A message type's name as a template argument: move_notice<"abort_move">.
template <size_t N>
struct message_label {
  constexpr message_label(const char (&name)[N]) { std::copy_n(name, N, text); }
  char text[N];
};

/// A message that names a move (a room's chunk is named as a move) and says nothing more; Name tells the kinds
/// apart, each a type of its own: abort_move, chunk_started, abort_chunk, return_reservation, cancel_chunk.
template <message_label Name>
struct move_notice {
  move_id id = 0;
};

/// The answer to an order about a move: done, or why not. commit_result, replica_result, chunk_done.
template <message_label Name>
struct move_outcome {
  move_id id = 0;
  bool ok = false;
  std::string reason;  ///< why not
};

/// CAF's inspect of the two shapes, and their names (as ILLM_INSPECT defines them for a message struct).
template <class Inspector, message_label Name>
typename Inspector::result_type inspect(Inspector& f, move_notice<Name>& x) {
  return inspect_fields(f, Name.text, x.id);
}
template <message_label Name>
constexpr const char* message_name(const move_notice<Name>*) {
  return Name.text;
}
template <class Inspector, message_label Name>
typename Inspector::result_type inspect(Inspector& f, move_outcome<Name>& x) {
  return inspect_fields(f, Name.text, x.id, x.ok, x.reason);
}
template <message_label Name>
constexpr const char* message_name(const move_outcome<Name>*) {
  return Name.text;
}

}  // namespace illm::actors

/// Defines the CAF inspect overload (serialization) of message type T: its name on the wire and its fields,
/// written as members of `x` in the order they travel: ILLM_INSPECT(move_kvcache, x.id, x.req_id, ...).
/// Strings and byte vectors are read with their length checked (bounded_bytes), numbers must be finite.
/// message_name(const T*) gives the name, found by argument-dependent lookup (register_messages).
#define ILLM_INSPECT(T, ...)                                    \
  template <class Inspector>                                    \
  typename Inspector::result_type inspect(Inspector& f, T& x) { \
    return ::illm::actors::inspect_fields(f, #T, __VA_ARGS__);  \
  }                                                             \
  constexpr const char* message_name(const T*) { return #T; }

namespace illm::actors {

// The messages of the shapes move_notice and move_outcome.
using abort_move = move_notice<"abort_move">;
using chunk_started = move_notice<"chunk_started">;
using abort_chunk = move_notice<"abort_chunk">;
using return_reservation = move_notice<"return_reservation">;
using cancel_chunk = move_notice<"cancel_chunk">;
using commit_result = move_outcome<"commit_result">;
using chunk_done = move_outcome<"chunk_done">;
using replica_result = move_outcome<"replica_result">;

struct heartbeat;
struct move_kvcache;
struct try_move_kvcache;
struct move_reservation;
struct commit_move;
struct release_blocks;
struct move_report;
struct cluster_view;
struct cluster_status;
struct join_cluster;
struct drain_instance;
struct leave_cluster;
struct expel_member;
struct use_gmanager;
struct control_endpoint;
struct reserve_room;
struct room_answer;
struct keep_blocks;
struct release_room;
struct reserve_chunk;
struct prefill_chunk;
struct commit_chunk;
struct take_reservation;
struct need_blocks;
struct loan_result;
struct pick_blocks;
struct block_pick;
struct blocks_moved;
struct move_abandoned;
struct request_released;
struct placement_update;
struct transfer_done;
struct peer_failed;
struct incoming_attend;
struct incoming_partials;
struct pick_replicas;
struct replicate_blocks;
struct blocks_replicated;
struct replicas_lost;
struct spare_reclaimed;
struct promote_replicas;
struct replicas_promoted;
struct take_over;
struct taken_over;
struct report_orphan;
struct orphan_report;
struct adopt_orphan;
struct orphan_adopted;
struct prefix_lookup;
struct prefix_holders;
struct find_prefix;
struct read_prefix;
struct copy_prefix;
struct prefix_read;
struct generate_request;
struct cancel_request;

// ---- timers and requests without a payload of their own (CAF 0.17 atoms: at most 10 characters) -------------

using heartbeat_tick_atom = caf::atom_constant<caf::atom("hb_tick")>;
using policy_tick_atom = caf::atom_constant<caf::atom("pol_tick")>;
using lease_check_atom = caf::atom_constant<caf::atom("lease_chk")>;
using liveness_tick_atom = caf::atom_constant<caf::atom("live_tick")>;
/// (attach_atom, instance): tells an rManager which instance it manages.
using attach_atom = caf::atom_constant<caf::atom("attach")>;
/// (view_atom): asks the gManager for its cluster_view.
using view_atom = caf::atom_constant<caf::atom("view")>;
/// (status_atom): asks the gManager for its cluster_status (what a status page shows).
using status_atom = caf::atom_constant<caf::atom("status")>;
/// (moves_atom, request_id) -> gManager: the reports of that request's moves it has (the latest ones).
using moves_atom = caf::atom_constant<caf::atom("moves")>;
/// The pool wrote a layer of some blocks: attends waiting for it may be answered.
using written_atom = caf::atom_constant<caf::atom("written")>;
/// (deferred_atom, id): an actor runs what it put off (e.g. an injected delay) now.
using deferred_atom = caf::atom_constant<caf::atom("deferred")>;
/// (requeue_atom, request_id): an instance queues a request that paused before starting over.
using requeue_atom = caf::atom_constant<caf::atom("requeue")>;
/// An attention server looks at its waiting attends again; an idle instance at its queue.
using recheck_atom = caf::atom_constant<caf::atom("recheck")>;
/// An actor of an instance goes silent: from then on it handles nothing and sends nothing, as in a hung process
/// (actors/faults/hang.hpp: fault tests whose deaths only missed heartbeats reveal).
using hang_atom = caf::atom_constant<caf::atom("hang")>;

}  // namespace illm::actors
