#pragma once
// The metrics of the runtime, under the `illm:` prefix. Names follow vLLM's where the meaning is the
// same (requests running and waiting, KV cache usage, prompt and generation tokens, TTFT, inter-token
// and end-to-end latency); the rest are this system's own: blocks hosted and borrowed per instance,
// blocks lent and prefilled for others, moves started / refused / failed, bytes moved, remote attention
// latency, heartbeat age, instances alive. Labels stay low-cardinality (instance, reason; never a request id).

#include <memory>
#include <string>

#include "actors/metrics/metrics.hpp"
#include "gpu/grammar/constraint_cache.hpp"

namespace illm::actors::metrics {

class family_maker;

/// The runtime's metric families on one registry.
struct runtime_metrics {
  /// Registers every family on `r`; names start with `prefix`: "illm:" as vLLM's "vllm:", or "illm_",
  /// which promtool's linter accepts (it keeps ':' for recording rules).
  explicit runtime_metrics(registry& r, const std::string& prefix = "illm:");
  /// Registers every family through `make` (the registry and prefix above).
  explicit runtime_metrics(const family_maker& make);

  // Requests (the front end).
  family<counter>& prompt_tokens;      ///< illm:prompt_tokens_total
  family<counter>& generation_tokens;  ///< illm:generation_tokens_total
  family<counter>& request_success;    ///< illm:request_success_total{finished_reason}
  family<counter>& request_refused;    ///< illm:request_refused_total{reason}
  /// illm:requests_failed_total{reason}: accepted requests that ended with an error (failure_reason names why)
  family<counter>& requests_failed;
  family<histogram>& time_to_first_token;  ///< illm:time_to_first_token_seconds
  family<histogram>& inter_token_latency;  ///< illm:inter_token_latency_seconds
  family<histogram>& e2e_latency;          ///< illm:e2e_request_latency_seconds

  // Instances.
  family<gauge>& requests_running;  ///< illm:num_requests_running{instance}
  family<gauge>& requests_waiting;  ///< illm:num_requests_waiting{instance}
  family<gauge>& blocks_hosted;     ///< illm:kv_blocks_hosted{instance}: other instances' blocks kept here
  family<gauge>& blocks_borrowed;   ///< illm:kv_blocks_borrowed{instance}: its requests' blocks elsewhere
  family<gauge>& replica_blocks;    ///< illm:kv_replica_blocks{instance}: second copies of blocks kept here
  family<counter>& blocks_lent;     ///< illm:kv_blocks_lent_total{instance}: blocks it took in for others
  /// illm:kv_blocks_prefilled_total{instance}: blocks of others' requests it computed (their rooms' chunks)
  family<counter>& blocks_prefilled;
  family<counter>& moves_started;   ///< illm:kv_moves_started_total{instance} (as the source)
  family<counter>& moves_refused;   ///< illm:kv_moves_refused_total{instance}
  family<counter>& moves_failed;    ///< illm:kv_moves_failed_total{instance}
  /// illm:kv_move_bytes_total{instance, path}: bytes of the moves that committed, by source and by how they travelled
  /// (path="device": a device-to-device copy within the process, "staged": from a device pool through pinned host
  /// buffers over the data plane, "host": from a host pool over the data plane)
  family<counter>& move_bytes;
  /// illm:kv_move_copy_seconds{instance, path}: a move's copy, from its reservation granted to its blocks committed in
  /// the destination's pool (landed blocks uploaded there, checksums compared); paths as move_bytes
  family<histogram>& move_copy_seconds;
  family<histogram>& remote_attention_latency;  ///< illm:remote_attention_latency_seconds{instance}
  /// illm:remote_attention_relays_total{instance}: attends it relayed to holders on its node, their partials merged
  family<counter>& attention_relays;
  /// illm:data_plane_messages_dropped_total{instance}: attention messages from a sender that is no member
  family<counter>& plane_messages_dropped;
  /// illm:peer_limit_violations_total{instance}: control messages of a peer beyond a limit of the protocol (refused;
  /// the peer is expelled)
  family<counter>& peer_limit_violations;
  /// illm:requests_restarted_total{instance}: requests that started over because a holder of their KV failed
  family<counter>& requests_restarted;
  /// illm:requests_recovered_total{instance, how}: requests that lost KV with a holder (or their owner) and went on:
  /// copies of lost blocks promoted (how="replica"), only the surviving primaries adopted by a new owner
  /// (how="takeover"), or nothing kept and the lost KV computed again (how="recompute")
  family<counter>& requests_recovered;
  /// illm:recovery_seconds{instance}: from the failed step (or a takeover's start) to the request's next token
  family<histogram>& recovery_seconds;
  /// illm:positions_recomputed_total{instance}: KV positions the engine computed again because their blocks were lost
  family<counter>& positions_recomputed;
  /// illm:prefix_cache_queries_total{instance}: prompt tokens (of full blocks) looked up in the prefix cache
  family<counter>& prefix_cache_queries;
  /// illm:prefix_cache_hits_total{instance, where}: of those, found (where="local": in the instance's own pool,
  /// "remote": in another instance's, read there in place)
  family<counter>& prefix_cache_hits;
  /// illm:prefix_cache_hit_bytes_total{instance, where}: the KV bytes of those hits, neither computed nor (remote)
  /// copied: what the cache saved
  family<counter>& prefix_cache_hit_bytes;
  /// illm:prefix_cache_evicted_blocks_total{instance}: cached blocks taken back for other use, or flushed
  family<counter>& prefix_cache_evicted;
  /// illm:prefix_cache_copied_blocks_total{instance}: blocks of other instances' caches copied into this one's
  family<counter>& prefix_cache_copied;
  /// illm:prefix_cache_blocks{instance, state}: blocks the prefix cache holds, read by requests now (state="read")
  /// or by none (state="idle": free memory, kept until it is needed)
  family<gauge>& prefix_cache_blocks;

  // Membership (the gManager).
  family<gauge>& heartbeat_age;    ///< illm:heartbeat_age_seconds{instance}
  family<gauge>& instances_alive;  ///< illm:instances_alive
  /// illm:prefix_index_lookups_total: lookups in the gManager's index of the members' prefix caches
  family<counter>& prefix_index_lookups;
  /// illm:cluster_peers_refused_total: control connections this process made that the peer refused (its TLS
  /// handshake: the peer did not accept this process's certificate, or this process not the peer's)
  family<counter>& cluster_peers_refused;

  /// illm:http_connections_refused_total{reason}: HTTP connections refused or cut off by the service
  /// (client_limit, full, evicted, timeout, malformed: actors/frontend/http_server.hpp)
  family<counter>& http_connections_refused;
};

/// The reason label of illm:requests_failed_total for a request's error: kv_lost (a holder of its KV failed too
/// often), instance_lost (its instance left and none could take it), no_capacity (the cluster cannot hold it),
/// or other.
std::string failure_reason(const std::string& error);

/// Requests that lost KV and went on, each way (illm:requests_recovered_total{how}), and the positions computed
/// again (illm:positions_recomputed_total), summed over the instances.
struct recovery_counts {
  uint64_t replica = 0, takeover = 0, recompute = 0, positions = 0;
};
recovery_counts recoveries(const runtime_metrics& m);

/// Registers illm:gmanager_connected (under `prefix`): 1 while `connected()` says this process reaches a
/// gManager, 0 while it serves on from its last view.
void add_gmanager_connected(registry& r, const std::string& prefix, std::function<bool()> connected);

/// Registers illm:constraint_cache_bytes and illm:constraint_cache_constraints: what `cache` (the process's
/// constraints of structured outputs) keeps.
void add_constraint_cache_gauges(registry& r, const std::string& prefix,
                                 std::weak_ptr<const gpu::grammar::constraint_cache> cache);

}  // namespace illm::actors::metrics
