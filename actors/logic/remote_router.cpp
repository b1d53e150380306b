#include "actors/logic/remote_router.hpp"
#include "actors/logic/status_bridge.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "actors/logic/attention_wire.hpp"

namespace illm::actors {

remote_router::remote_router(std::shared_ptr<transport::data_plane> plane, int n_heads, int head_dim,
                             std::chrono::milliseconds timeout, metrics::histogram* latency,
                             std::shared_ptr<peer_nodes> nodes, int relay_min_rows)
    : plane_(std::move(plane)),
      nodes_(std::move(nodes)),
      relay_min_rows_(relay_min_rows),
      n_heads_(n_heads),
      head_dim_(head_dim),
      timeout_(timeout),
      latency_(latency) {}

namespace {

gpu::status check_lane(int lane) {
  if (lane >= 0 && lane < gpu::attention_router::lanes) return gpu::status::ok();
  return {gpu::status_code::invalid_argument,
          fmt::format("no lane {} (a router has {})", lane, gpu::attention_router::lanes)};
}

}  // namespace

std::vector<std::vector<gpu::remote_attention_job>> remote_router::group(
    std::span<const gpu::remote_attention_job> jobs) const {
  std::vector<std::vector<gpu::remote_attention_job>> groups;
  std::map<std::tuple<uint64_t, uint64_t, std::string>, size_t> relayed;  // (sequence, request, node) -> group
  for (const gpu::remote_attention_job& job : jobs) {
    const bool relays = nodes_ && job.n_q >= relay_min_rows_ && nodes_->apart(plane_->self(), job.holder);
    if (!relays) {
      groups.push_back({job});
      continue;
    }
    const auto key = std::make_tuple(job.seq_id, job.foreign_request, nodes_->of(job.holder));
    auto [it, fresh] = relayed.try_emplace(key, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(job);
  }
  return groups;
}

void remote_router::send_group(int lane, std::vector<gpu::remote_attention_job> group) {
  const gpu::remote_attention_job& job = group.front();
  attend a;
  a.req_id = job.foreign_request ? job.foreign_request : job.seq_id;
  a.owner = job.foreign_request ? job.foreign_owner : plane_->self();
  if (job.foreign_request) {  // a chunk of another's request: its blocks there may still be written
    a.blocks.assign(job.blocks.begin(), job.blocks.end());
    a.block_pos.assign(job.block_pos.begin(), job.block_pos.end());
  }
  for (size_t i = 1; i < group.size(); ++i)  // relayed: the holder there is told each one's blocks
    a.forwards.push_back({group[i].holder, {group[i].blocks.begin(), group[i].blocks.end()},
                          {group[i].block_pos.begin(), group[i].block_pos.end()}});
  a.layer = job.layer;
  a.n_q = job.n_q;
  const size_t row = size_t(n_heads_) * head_dim_;
  a.q.resize(size_t(job.n_q) * row);
  for (int t = 0; t < job.n_q; ++t) std::copy_n(job.q + size_t(t) * job.q_ld, row, a.q.data() + size_t(t) * row);
  a.q_pos.assign(job.q_pos, job.q_pos + job.n_q);
  a.num_blocks = uint32_t(job.blocks.size());
  if (!job.foreign_request) a.logical_runs = logical_runs_of(job.block_pos);  // exactly the blocks it placed there
  const uint32_t holder = job.holder;
  {
    std::lock_guard lock(mutex_);
    a.tag = next_tag_++;
  }
  const uint64_t tag = a.tag;
  const std::vector<uint8_t> payload = encode(a);  // outside the lock; kept in pending_ to be sent again
  {
    std::lock_guard lock(mutex_);
    pending_[tag] = {job, lane, false, std::vector<gpu::remote_attention_job>(group.begin() + 1, group.end()), payload};
  }
  plane_->send(holder, transport::channel::attend, payload, [this, tag](transport::status s) {
    if (!s.is_ok()) fail(tag, engine_status(s));
  });
}

gpu::status remote_router::begin(int lane, std::span<const gpu::remote_attention_job> jobs) {
  if (gpu::status bad = check_lane(lane); !bad.is_ok()) return bad;
  auto groups = group(jobs);
  {
    std::lock_guard lock(mutex_);
    std::erase_if(pending_, [lane](const auto& entry) { return entry.second.lane == lane; });
    const auto now = std::chrono::steady_clock::now();
    rounds_[size_t(lane)] = {groups.size(), gpu::status::ok(), now, now};
  }
  for (auto& g : groups) send_group(lane, std::move(g));
  return gpu::status::ok();
}

void remote_router::settle(pending& p, gpu::status why, std::optional<uint32_t> at) {
  p.done = true;
  round& r = rounds_[size_t(p.lane)];
  if (--r.outstanding == 0) r.answered = std::chrono::steady_clock::now();
  if (!why.is_ok()) failed_.insert({p.job.seq_id, at.value_or(p.job.holder)});
  if (!why.is_ok() && r.first_error.is_ok()) r.first_error = std::move(why);
  answered_.notify_all();
}

void remote_router::fail(uint64_t tag, gpu::status why) {
  std::lock_guard lock(mutex_);
  auto it = pending_.find(tag);
  if (it == pending_.end() || it->second.done) return;
  settle(it->second, {why.code(), fmt::format("remote attention at instance {}: {}", it->second.job.holder,
                                              why.message())});
}

void remote_router::on_partials(transport::peer_id from, std::vector<uint8_t> payload) {
  auto decoded = decode_partials(payload);
  if (!decoded.is_ok()) return;  // nothing to match it to; the step times out on the missing answer
  const partials& p = decoded.value();
  std::lock_guard lock(mutex_);
  auto it = pending_.find(p.tag);
  if (it == pending_.end() || it->second.done || it->second.job.holder != from) return;  // late or foreign
  const gpu::remote_attention_job& job = it->second.job;
  const size_t rows = size_t(job.n_q) * n_heads_;
  if (!p.ok || p.m.size() != rows || p.ma.size() != rows * head_dim_)
    return settle(it->second, {gpu::status_code::backend_error,
                               fmt::format("instance {} could not attend request {}: {}", from, job.seq_id,
                                           p.ok ? "answer of the wrong size" : p.error)});
  std::copy(p.m.begin(), p.m.end(), job.m);
  std::copy(p.e.begin(), p.e.end(), job.e);
  std::copy(p.ma.begin(), p.ma.end(), job.ma);
  for (const gpu::remote_attention_job& other : it->second.relayed) {  // merged into the relay's
    std::fill_n(other.m, rows, -INFINITY);
    std::fill_n(other.e, rows, 0.0f);
    std::fill_n(other.ma, rows * head_dim_, 0.0f);
  }
  settle(it->second, gpu::status::ok());
}

void remote_router::peer_failed(transport::peer_id peer, const std::string& why) {
  std::lock_guard lock(mutex_);
  auto involves = [peer](const pending& p) {
    return p.job.holder == peer ||
           std::any_of(p.relayed.begin(), p.relayed.end(), [peer](const auto& j) { return j.holder == peer; });
  };
  for (auto& [tag, p] : pending_)
    if (!p.done && involves(p))
      settle(p, {gpu::status_code::io_error,
                 fmt::format("instance {} holding blocks of request {} failed: {}", peer, p.job.seq_id, why)},
             uint32_t(peer));
}

void remote_router::cancel() {
  std::lock_guard lock(mutex_);
  pending_.clear();
  for (round& r : rounds_) r.outstanding = 0;
}

gpu::status remote_router::finish(int lane) {
  if (gpu::status bad = check_lane(lane); !bad.is_ok()) return bad;
  std::unique_lock lock(mutex_);
  round& r = rounds_[size_t(lane)];
  // Waits in quarters of the timeout; after each one without every answer, the unanswered attends go again.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  bool answered = false;
  while (!(answered = answered_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + timeout_ / 4),
                                           [&r] { return r.outstanding == 0; })) &&
         std::chrono::steady_clock::now() < deadline)
    resend_unanswered(lane, lock);
  const bool any = std::any_of(pending_.begin(), pending_.end(), [lane](const auto& e) { return e.second.lane == lane; });
  if (latency_ && any) {
    // Until the last answer, not until this call: the engine may have run the other lane meanwhile.
    const auto end = answered ? r.answered : std::chrono::steady_clock::now();
    latency_->observe(std::chrono::duration<double>(end - r.started).count());
  }
  if (!answered) {
    gpu::status late = gpu::status::ok();
    for (auto& [tag, p] : pending_)
      if (p.lane == lane && !p.done) {
        failed_.insert({p.job.seq_id, p.job.holder});
        if (late.is_ok())
          late = {gpu::status_code::io_error, fmt::format("instance {} did not answer remote attention for request {} "
                                                          "within {} ms",
                                                          p.job.holder, p.job.seq_id, timeout_.count())};
      }
    if (!late.is_ok()) return late;
  }
  return r.first_error;
}

void remote_router::resend_unanswered(int lane, std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> again;
  for (const auto& [tag, p] : pending_)
    if (p.lane == lane && !p.done) again.push_back({p.job.holder, p.payload});
  lock.unlock();
  for (const auto& [holder, payload] : again) plane_->send(holder, transport::channel::attend, payload, [](transport::status) {});
  lock.lock();
}

std::vector<gpu::failed_attention> remote_router::take_failed() {
  std::lock_guard lock(mutex_);
  std::vector<gpu::failed_attention> out(failed_.begin(), failed_.end());
  failed_.clear();
  return out;
}

}  // namespace illm::actors
