#include "actors/frontend/cluster_feed.hpp"

#include <nlohmann/json.hpp>

namespace illm::actors::frontend {

namespace {

using json = nlohmann::json;

json instance_json(const member_status& m) {
  const instance_stats& s = m.stats;
  return {{"id", m.inst_id},
          {"state", m.state},
          {"node", m.node},
          {"reason", m.reason},
          {"heard_ms_ago", m.heard_ms_ago},
          {"total_blocks", s.total_blocks},
          {"owned_blocks", s.owned_blocks},
          {"hosted_blocks", s.hosted_blocks},
          {"promised_blocks", s.promised_blocks},
          {"free_blocks", s.free_blocks},
          {"replica_blocks", s.replica_blocks},
          {"cached_blocks", s.cached_blocks},
          {"shared_blocks", s.shared_blocks},
          {"borrowed_blocks", s.borrowed_blocks},
          {"running", s.batch_size},
          {"waiting", s.waiting}};
}

json request_json(const request_status& r) {
  json blocks = json::array();
  uint64_t total = 0;
  for (const request_placement_entry& e : r.blocks) {
    blocks.push_back({{"instance", e.inst_id}, {"blocks", e.num_blocks}, {"local", e.local}});
    total += e.num_blocks;
  }
  return {{"id", r.req_id}, {"owner", r.owner}, {"total_blocks", total}, {"blocks", std::move(blocks)}};
}

/// What a move report was: a gManager's order, a loan its debtor asked for, or a room's chunk computed there.
const char* move_kind(const move_report& r) {
  return r.computed ? "chunk" : r.self_initiated ? "loan" : "order";
}

json move_json(const move_report& r) {
  return {{"id", r.id},     {"request", r.req_id}, {"from", r.src_inst}, {"to", r.dst_inst}, {"blocks", r.blocks},
          {"ok", r.ok},     {"kind", move_kind(r)}, {"reason", r.reason}};
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// The JSON of `status` as snapshot `seq`, with the cluster's output tokens so far and per second.
std::string cluster_json(const cluster_status& status, uint64_t seq, uint64_t tokens_generated, double tokens_per_second) {
  json instances = json::array(), requests = json::array(), moves = json::array();
  for (const member_status& m : status.members) instances.push_back(instance_json(m));
  for (const request_status& r : status.requests) requests.push_back(request_json(r));
  for (const move_report& r : status.moves) moves.push_back(move_json(r));
  json out = {{"seq", seq},
              {"epoch", status.epoch},
              {"version", status.version},
              {"settled", status.settled},
              {"time_ms", unix_ms()},
              {"tokens_generated", tokens_generated},
              {"tokens_per_second", tokens_per_second},
              {"moves_done", status.moves_done},
              {"moves_refused", status.moves_refused},
              {"instances", std::move(instances)},
              {"requests", std::move(requests)},
              {"moves", std::move(moves)}};
  return out.dump();
}

}  // namespace

cluster_feed::cluster_feed(request_router& router, std::function<uint64_t()> tokens_generated)
    : router_(router), tokens_generated_(std::move(tokens_generated)) {}

double cluster_feed::token_rate(clock::time_point now, uint64_t tokens) {
  constexpr auto window = std::chrono::seconds(5);
  token_samples_.push_back({now, tokens});
  while (token_samples_.size() > 2 && now - token_samples_[1].first >= window) token_samples_.pop_front();
  const auto& [then, before] = token_samples_.front();
  const double seconds = std::chrono::duration<double>(now - then).count();
  return seconds > 0 ? double(tokens - before) / seconds : 0.0;
}

std::optional<std::string> cluster_feed::latest() {
  std::optional<cluster_status> status = router_.status();  // outside the lock: it may wait for the gManager
  if (!status) return std::nullopt;
  const uint64_t tokens = tokens_generated_ ? tokens_generated_() : 0;
  std::lock_guard lock(mutex_);
  const double rate = token_rate(clock::now(), tokens);
  const std::pair key{status->epoch, status->version};
  if (key <= last_key_ && !kept_.empty()) return kept_.back().second;  // no change (or an answer overtaken)
  last_key_ = key;
  ++seq_;
  kept_.push_back({seq_, cluster_json(*status, seq_, tokens, rate)});
  if (kept_.size() > max_kept) kept_.pop_front();
  return kept_.back().second;
}

std::optional<std::string> cluster_feed::at(uint64_t seq) const {
  std::lock_guard lock(mutex_);
  for (const auto& [n, body] : kept_)
    if (n == seq) return body;
  return std::nullopt;
}

}  // namespace illm::actors::frontend
