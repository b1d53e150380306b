#include "actors/metrics/runtime_metrics.hpp"

namespace illm::actors::metrics {

runtime_metrics::runtime_metrics(registry& r, const std::string& prefix)
    : prompt_tokens(r.add_counter(prefix + "prompt_tokens_total", "Prompt tokens processed.")),
      generation_tokens(r.add_counter(prefix + "generation_tokens_total", "Generation tokens produced.")),
      request_success(r.add_counter(prefix + "request_success_total", "Requests that ended, by finish reason.",
                                    {"finished_reason"})),
      request_refused(r.add_counter(prefix + "request_refused_total", "Requests refused before running, by reason.",
                                    {"reason"})),
      requests_failed(r.add_counter(prefix + "requests_failed_total",
                                    "Accepted requests that ended with an error, by reason: kv_lost, instance_lost, "
                                    "no_capacity, other.",
                                    {"reason"})),
      time_to_first_token(r.add_histogram(prefix + "time_to_first_token_seconds", "Time to the first token.",
                                          latency_buckets())),
      inter_token_latency(r.add_histogram(prefix + "inter_token_latency_seconds", "Time between two streamed tokens.",
                                          latency_buckets())),
      e2e_latency(r.add_histogram(prefix + "e2e_request_latency_seconds", "Time from arrival to the last token.",
                                  latency_buckets())),
      requests_running(r.add_gauge(prefix + "num_requests_running", "Requests in an instance's batch.", {"instance"})),
      requests_waiting(r.add_gauge(prefix + "num_requests_waiting", "Requests queued at an instance.", {"instance"})),
      blocks_hosted(r.add_gauge(prefix + "kv_blocks_hosted", "KV blocks of other instances' requests kept here.",
                                {"instance"})),
      blocks_borrowed(r.add_gauge(prefix + "kv_blocks_borrowed", "KV blocks of this instance's requests kept elsewhere.",
                                  {"instance"})),
      replica_blocks(r.add_gauge(prefix + "kv_replica_blocks",
                                 "Second copies of KV blocks (replicas) kept here in free memory, given up first.",
                                 {"instance"})),
      blocks_lent(r.add_counter(prefix + "kv_blocks_lent_total", "KV blocks this instance took in for others.",
                                {"instance"})),
      blocks_prefilled(r.add_counter(prefix + "kv_blocks_prefilled_total",
                                     "KV blocks of other instances' requests computed here, chunks of their rooms.",
                                     {"instance"})),
      moves_started(r.add_counter(prefix + "kv_moves_started_total", "KV block moves started, by source instance.",
                                  {"instance"})),
      moves_refused(r.add_counter(prefix + "kv_moves_refused_total",
                                  "KV block moves the destination refused, by source instance.", {"instance"})),
      moves_failed(r.add_counter(prefix + "kv_moves_failed_total",
                                 "KV block moves that failed otherwise, by source instance.", {"instance"})),
      move_bytes(r.add_counter(prefix + "kv_move_bytes_total",
                               "KV bytes moved between instances, by source instance and path (device: copied device "
                               "to device in one process; staged: from a device pool through pinned host memory over "
                               "the data plane; host: from a host pool over the data plane).",
                               {"instance", "path"})),
      move_copy_seconds(r.add_histogram(prefix + "kv_move_copy_seconds",
                                        "Time a move's blocks took to reach the destination's pool, from its "
                                        "reservation granted to its commit there (bytes put or copied, landed blocks "
                                        "uploaded, checksums compared), by path.",
                                        transfer_buckets(), {"instance", "path"})),
      remote_attention_latency(r.add_histogram(prefix + "remote_attention_latency_seconds",
                                               "From a layer's queries sent to remote holders to the last of their partials in, per layer and lane.",
                                               latency_buckets(), {"instance"})),
      attention_relays(r.add_counter(prefix + "remote_attention_relays_total",
                                     "Remote attention requests relayed to holders on this instance's node, their "
                                     "partials merged into one answer.",
                                     {"instance"})),
      plane_messages_dropped(r.add_counter(prefix + "data_plane_messages_dropped_total",
                                           "Attention messages on the data plane dropped because their sender is no "
                                           "member of the view.",
                                           {"instance"})),
      peer_limit_violations(r.add_counter(prefix + "peer_limit_violations_total",
                                          "Control messages of a peer beyond a limit of the protocol (too many blocks, "
                                          "too many open reservations): refused, and the peer expelled.",
                                          {"instance"})),
      requests_restarted(r.add_counter(prefix + "requests_restarted_total",
                                       "Requests that started over from their tokens because a holder of their KV "
                                       "failed, by owner instance.",
                                       {"instance"})),
      requests_recovered(r.add_counter(prefix + "requests_recovered_total",
                                       "Requests that lost KV with a holder or their owner and went on: with copies "
                                       "of lost blocks promoted where they were (how=replica), with only the "
                                       "surviving primaries adopted by a new owner (how=takeover), or by computing "
                                       "the lost KV again (how=recompute; positions_recomputed_total counts the "
                                       "positions).",
                                       {"instance", "how"})),
      recovery_seconds(r.add_histogram(prefix + "recovery_seconds",
                                       "Time from a step that lost a request's KV (or a new owner's takeover of it) "
                                       "to the request's next token.",
                                       latency_buckets(), {"instance"})),
      positions_recomputed(r.add_counter(prefix + "positions_recomputed_total",
                                         "KV positions the engine computed again because the blocks holding them were lost.",
                                         {"instance"})),
      prefix_cache_queries(r.add_counter(prefix + "prefix_cache_queries_total",
                                         "Prompt tokens (of full blocks) looked up in the prefix cache.", {"instance"})),
      prefix_cache_hits(r.add_counter(prefix + "prefix_cache_hits_total",
                                      "Prompt tokens found in the prefix cache, whose KV was not computed again "
                                      "(where=local: in the instance's own pool; where=remote: in another instance's, read there in place).",
                                      {"instance", "where"})),
      prefix_cache_hit_bytes(r.add_counter(prefix + "prefix_cache_hit_bytes_total",
                                           "KV bytes of the prefix cache's hits: neither computed again nor (where=remote) "
                                           "copied.",
                                           {"instance", "where"})),
      prefix_cache_evicted(r.add_counter(prefix + "prefix_cache_evicted_blocks_total",
                                         "Cached KV blocks no request read, taken back when memory was needed (or "
                                         "flushed).",
                                         {"instance"})),
      prefix_cache_copied(r.add_counter(prefix + "prefix_cache_copied_blocks_total",
                                        "KV blocks of prefixes cached on another instance copied into this one's "
                                        "cache, the performance model finding the copy cheaper than reading them "
                                        "where they lie.",
                                        {"instance"})),
      prefix_cache_blocks(r.add_gauge(prefix + "prefix_cache_blocks",
                                      "KV blocks the prefix cache holds: read by requests now (state=read) or by none "
                                      "(state=idle: free memory, kept until it is needed).",
                                      {"instance", "state"})),
      heartbeat_age(r.add_gauge(prefix + "heartbeat_age_seconds", "Age of an instance's last heartbeat at the gManager.",
                                {"instance"})),
      instances_alive(r.add_gauge(prefix + "instances_alive", "Instances with a recent heartbeat.")),
      prefix_index_lookups(r.add_counter(prefix + "prefix_index_lookups_total",
                                         "Lookups in the gManager's index of the members' prefix caches: one per new "
                                         "request the front end routes (its instance reads the runs named), and one "
                                         "per request that starts over.")),
      cluster_peers_refused(r.add_counter(prefix + "cluster_peers_refused_total",
                                          "Control connections this process made that the peer refused in the "
                                          "handshake (TLS: a certificate not accepted).")),
      http_connections_refused(r.add_counter(prefix + "http_connections_refused_total",
                                             "HTTP connections refused or cut off: an address over its cap, no "
                                             "connection free, made room for another, too slow, malformed.",
                                             {"reason"})) {}

std::string failure_reason(const std::string& error) {
  auto has = [&](const char* words) { return error.find(words) != std::string::npos; };
  if (has("KV was lost")) return "kv_lost";
  if (has("left the cluster") || has("instance serving the request stopped")) return "instance_lost";
  if (has("KV blocks; the cluster has") || has("cannot hold")) return "no_capacity";
  return "other";
}

recovery_counts recoveries(const runtime_metrics& m) {
  recovery_counts out;
  m.requests_recovered.each([&](const label_values& labels, const counter& n) {
    if (labels.size() != 2) return;
    const uint64_t count = uint64_t(n.value());
    if (labels[1] == "replica") out.replica += count;
    else if (labels[1] == "takeover") out.takeover += count;
    else out.recompute += count;
  });
  m.positions_recomputed.each([&](const label_values&, const counter& n) { out.positions += uint64_t(n.value()); });
  return out;
}

void add_gmanager_connected(registry& r, const std::string& prefix, std::function<bool()> connected) {
  r.add_sampled_gauge(prefix + "gmanager_connected",
                      "1 while this process reaches a gManager; 0 while it serves on from its last view.", {},
                      [connected = std::move(connected)] {
                        return std::vector<std::pair<label_values, double>>{{{}, connected() ? 1.0 : 0.0}};
                      });
}

}  // namespace illm::actors::metrics
