#include "actors/metrics/runtime_metrics.hpp"

namespace illm::actors::metrics {

/// Adds families to a registry under a name prefix; most of the runtime's are labelled by instance.
class family_maker {
 public:
  family_maker(registry& r, const std::string& prefix) : r_(r), prefix_(prefix) {}
  family<counter>& add_counter(const std::string& name, const std::string& help,
                               std::vector<std::string> labels = {}) const {
    return r_.add_counter(prefix_ + name, help, std::move(labels));
  }
  family<gauge>& add_gauge(const std::string& name, const std::string& help,
                           std::vector<std::string> labels = {}) const {
    return r_.add_gauge(prefix_ + name, help, std::move(labels));
  }
  family<histogram>& add_histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                                   std::vector<std::string> labels = {}) const {
    return r_.add_histogram(prefix_ + name, help, std::move(bounds), std::move(labels));
  }
  /// The same, labelled by instance alone.
  family<counter>& instance_counter(const std::string& name, const std::string& help) const {
    return add_counter(name, help, {"instance"});
  }
  family<gauge>& instance_gauge(const std::string& name, const std::string& help) const {
    return add_gauge(name, help, {"instance"});
  }
  family<histogram>& instance_histogram(const std::string& name, const std::string& help,
                                        std::vector<double> bounds) const {
    return add_histogram(name, help, std::move(bounds), {"instance"});
  }

 private:
  registry& r_;
  const std::string& prefix_;
};

runtime_metrics::runtime_metrics(registry& r, const std::string& prefix) : runtime_metrics(family_maker(r, prefix)) {}

runtime_metrics::runtime_metrics(const family_maker& make)
    : prompt_tokens(make.add_counter("prompt_tokens_total", "Prompt tokens processed.")),
      generation_tokens(make.add_counter("generation_tokens_total", "Generation tokens produced.")),
      request_success(
          make.add_counter("request_success_total", "Requests that ended, by finish reason.", {"finished_reason"})),
      request_refused(
          make.add_counter("request_refused_total", "Requests refused before running, by reason.", {"reason"})),
      requests_failed(make.add_counter("requests_failed_total",
                                       "Accepted requests that ended with an error, by reason: kv_lost, instance_lost, "
                                       "no_capacity, other.",
                                       {"reason"})),
      time_to_first_token(
          make.add_histogram("time_to_first_token_seconds", "Time to the first token.", latency_buckets())),
      inter_token_latency(
          make.add_histogram("inter_token_latency_seconds", "Time between two streamed tokens.", latency_buckets())),
      e2e_latency(
          make.add_histogram("e2e_request_latency_seconds", "Time from arrival to the last token.", latency_buckets())),
      requests_running(make.instance_gauge("num_requests_running", "Requests in an instance's batch.")),
      requests_waiting(make.instance_gauge("num_requests_waiting", "Requests queued at an instance.")),
      blocks_hosted(make.instance_gauge("kv_blocks_hosted", "KV blocks of other instances' requests kept here.")),
      blocks_borrowed(
          make.instance_gauge("kv_blocks_borrowed", "KV blocks of this instance's requests kept elsewhere.")),
      replica_blocks(make.instance_gauge(
          "kv_replica_blocks", "Second copies of KV blocks (replicas) kept here in free memory, given up first.")),
      blocks_lent(make.instance_counter("kv_blocks_lent_total", "KV blocks this instance took in for others.")),
      blocks_prefilled(make.instance_counter(
          "kv_blocks_prefilled_total", "KV blocks of other instances' requests computed here, chunks of their rooms.")),
      moves_started(make.instance_counter("kv_moves_started_total", "KV block moves started, by source instance.")),
      moves_refused(make.instance_counter("kv_moves_refused_total",
                                          "KV block moves the destination refused, by source instance.")),
      moves_failed(
          make.instance_counter("kv_moves_failed_total", "KV block moves that failed otherwise, by source instance.")),
      move_bytes(
          make.add_counter("kv_move_bytes_total",
                           "KV bytes moved between instances, by source instance and path (device: copied device "
                           "to device in one process; staged: from a device pool through pinned host memory over "
                           "the data plane; host: from a host pool over the data plane).",
                           {"instance", "path"})),
      move_copy_seconds(
          make.add_histogram("kv_move_copy_seconds",
                             "Time a move's blocks took to reach the destination's pool, from its "
                             "reservation granted to its commit there (bytes put or copied, landed blocks "
                             "uploaded, checksums compared), by path.",
                             transfer_buckets(), {"instance", "path"})),
      remote_attention_latency(make.instance_histogram(
          "remote_attention_latency_seconds",
          "From a layer's queries sent to remote holders to the last of their partials in, per layer and lane.",
          latency_buckets())),
      attention_relays(
          make.instance_counter("remote_attention_relays_total",
                                "Remote attention requests relayed to holders on this instance's node, their "
                                "partials merged into one answer.")),
      plane_messages_dropped(
          make.instance_counter("data_plane_messages_dropped_total",
                                "Attention messages on the data plane dropped because their sender is no "
                                "member of the view.")),
      peer_limit_violations(
          make.instance_counter("peer_limit_violations_total",
                                "Control messages of a peer beyond a limit of the protocol (too many blocks, "
                                "too many open reservations): refused, and the peer expelled.")),
      requests_restarted(
          make.instance_counter("requests_restarted_total",
                                "Requests that started over from their tokens because a holder of their KV "
                                "failed, by owner instance.")),
      requests_recovered(make.add_counter("requests_recovered_total",
                                          "Requests that lost KV with a holder or their owner and went on: with copies "
                                          "of lost blocks promoted where they were (how=replica), with only the "
                                          "surviving primaries adopted by a new owner (how=takeover), or by computing "
                                          "the lost KV again (how=recompute; positions_recomputed_total counts the "
                                          "positions).",
                                          {"instance", "how"})),
      recovery_seconds(
          make.instance_histogram("recovery_seconds",
                                  "Time from a step that lost a request's KV (or a new owner's takeover of it) "
                                  "to the request's next token.",
                                  latency_buckets())),
      positions_recomputed(
          make.instance_counter("positions_recomputed_total",
                                "KV positions the engine computed again because the blocks holding them were lost.")),
      prefix_cache_queries(make.instance_counter("prefix_cache_queries_total",
                                                 "Prompt tokens (of full blocks) looked up in the prefix cache.")),
      prefix_cache_hits(make.add_counter(
          "prefix_cache_hits_total",
          "Prompt tokens found in the prefix cache, whose KV was not computed again "
          "(where=local: in the instance's own pool; where=remote: in another instance's, read there in place).",
          {"instance", "where"})),
      prefix_cache_hit_bytes(
          make.add_counter("prefix_cache_hit_bytes_total",
                           "KV bytes of the prefix cache's hits: neither computed again nor (where=remote) "
                           "copied.",
                           {"instance", "where"})),
      prefix_cache_evicted(
          make.instance_counter("prefix_cache_evicted_blocks_total",
                                "Cached KV blocks no request read, taken back when memory was needed (or "
                                "flushed).")),
      prefix_cache_copied(
          make.instance_counter("prefix_cache_copied_blocks_total",
                                "KV blocks of prefixes cached on another instance copied into this one's "
                                "cache, the performance model finding the copy cheaper than reading them "
                                "where they lie.")),
      prefix_cache_blocks(
          make.add_gauge("prefix_cache_blocks",
                         "KV blocks the prefix cache holds: read by requests now (state=read) or by none "
                         "(state=idle: free memory, kept until it is needed).",
                         {"instance", "state"})),
      heartbeat_age(
          make.instance_gauge("heartbeat_age_seconds", "Age of an instance's last heartbeat at the gManager.")),
      instances_alive(make.add_gauge("instances_alive", "Instances with a recent heartbeat.")),
      prefix_index_lookups(
          make.add_counter("prefix_index_lookups_total",
                           "Lookups in the gManager's index of the members' prefix caches: one per new "
                           "request the front end routes (its instance reads the runs named), and one "
                           "per request that starts over.")),
      cluster_peers_refused(make.add_counter("cluster_peers_refused_total",
                                             "Control connections this process made that the peer refused in the "
                                             "handshake (TLS: a certificate not accepted).")),
      http_connections_refused(make.add_counter("http_connections_refused_total",
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

void add_constraint_cache_gauges(registry& r, const std::string& prefix,
                                 std::weak_ptr<const gpu::grammar::constraint_cache> cache) {
  const auto sample = [cache](auto read) {
    auto held = cache.lock();
    return std::vector<std::pair<label_values, double>>{{{}, held ? double(read(*held)) : 0.0}};
  };
  r.add_sampled_gauge(prefix + "constraint_cache_bytes",
                      "Bytes the compiled constraints of structured outputs and tools keep (grammars and token masks), "
                      "bounded by constraint_cache_mib.",
                      {}, [sample] { return sample([](const auto& c) { return c.bytes(); }); });
  r.add_sampled_gauge(prefix + "constraint_cache_constraints", "Compiled constraints the cache keeps.", {},
                      [sample] { return sample([](const auto& c) { return c.size(); }); });
}

}  // namespace illm::actors::metrics
