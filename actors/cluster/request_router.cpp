#include "actors/cluster/request_router.hpp"

#include <algorithm>

#include "actors/admission/admission_policy.hpp"
#include "gpu/backend.hpp"
#include "gpu/prefix_cache.hpp"

namespace illm::actors {

std::optional<cluster_status> ask_status(caf::actor_system& sys, const gmanager_actor& gm) {
  std::optional<cluster_status> out;
  if (!gm) return out;
  caf::scoped_actor s{sys, true};
  s->request(gm, std::chrono::seconds(5), status_atom::value)
      .receive([&](cluster_status& c) { out = std::move(c); }, [](const caf::error&) {});
  return out;
}

const instance_view* most_free_instance(const cluster_view& view) {
  const instance_view* target = nullptr;
  for (const instance_view& i : view.instances)
    if (!i.draining && i.instance && (!target || i.free_blocks > target->free_blocks)) target = &i;
  return target;
}

namespace {

/// Full prompt blocks a request may find cached: all but the one its last token is in (its logits are sampled).
uint32_t cacheable_blocks(const generate_params& p) {
  return p.prompt.empty() ? 0 : uint32_t((p.prompt.size() - 1) / gpu::kv_block_tokens);
}

}  // namespace

double instance_load(const instance_view& i, const routed_blocks& routed) {
  const double reported = double(i.total_blocks - std::min(i.total_blocks, i.free_blocks)) + double(i.waiting_blocks);
  const auto sent = routed.find(i.inst_id);
  return sent == routed.end() ? reported : std::max(reported, double(sent->second));
}

const instance_view* cheapest_instance(const cluster_view& view, uint32_t prompt_blocks, const prefix_hits& hits,
                                       uint32_t covered, const routed_blocks& routed) {
  uint32_t anywhere = std::min(covered, prompt_blocks);
  for (const auto& [id, blocks] : hits) anywhere = std::max(anywhere, std::min(blocks, prompt_blocks));
  const instance_view* target = nullptr;
  double least = 0;
  for (const instance_view& i : view.instances) {
    if (i.draining || !i.instance) continue;
    uint32_t here = 0;
    for (const auto& [id, blocks] : hits)
      if (id == i.inst_id) here = std::min(blocks, prompt_blocks);
    const uint32_t found = i.cache_shared ? anywhere : here;
    const double cost =
        instance_load(i, routed) + double(prompt_blocks - found) + remote_read_weight * double(found - here);
    if (!target || cost < least || (cost == least && i.free_blocks > target->free_blocks)) {
      target = &i;
      least = cost;
    }
  }
  return target;
}

std::optional<prefix_holders> look_up_prefix(caf::actor_system& sys, const gmanager_actor& gm,
                                             const cluster_view& view, const generate_params& p) {
  std::optional<prefix_holders> out;
  const uint32_t blocks = cacheable_blocks(p);
  auto cached = std::find_if(view.instances.begin(), view.instances.end(),
                             [](const instance_view& i) { return i.cache_root != gpu::block_key{}; });
  if (!gm || blocks == 0 || cached == view.instances.end()) return out;
  const gpu::block_key root = gpu::scoped_root(cached->cache_root, p.cache_scope);
  caf::scoped_actor s{sys, true};
  s->request(gm, std::chrono::seconds(5), prefix_lookup{gpu::chain_keys(root, p.prompt, blocks)})
      .receive([&](prefix_holders& h) { out = std::move(h); }, [](const caf::error&) {});
  return out;
}

namespace {

prefix_hits hits_of(const std::optional<prefix_holders>& h) {
  prefix_hits hits;
  if (h)
    for (size_t i = 0; i < h->holders.size() && i < h->blocks.size(); ++i) hits.push_back({h->holders[i], h->blocks[i]});
  return hits;
}

}  // namespace

prefix_hits cached_prefix_of(caf::actor_system& sys, const gmanager_actor& gm, const cluster_view& view,
                             const generate_params& p) {
  return hits_of(look_up_prefix(sys, gm, view, p));
}

const instance_view* route_request(const cluster_view& view, const generate_params& p,
                                   const std::optional<prefix_holders>& prefix, const routed_blocks& routed) {
  uint32_t covered = 0;
  if (prefix)
    for (const auto& run : prefix->cover) covered += run.count;
  return cheapest_instance(view, cacheable_blocks(p), hits_of(prefix), covered, routed);
}

serving_capacity capacity_of(const cluster_view& view) {
  serving_capacity c;
  for (const instance_view& i : view.instances)
    if (!i.draining && i.instance) {
      ++c.instances;
      c.kv_tokens += uint64_t(i.total_blocks) * uint64_t(gpu::kv_block_tokens);
    }
  return c;
}

void request_table::spawn(caf::actor_system& sys, request_id id, const generate_params& params,
                          const target_chooser& choose, request_callbacks callbacks, const cluster_view& chosen_from,
                          std::optional<prefix_holders> prefix) {
  generate_request r{id, params, {}};
  if (prefix) {
    r.prefix_found = true;
    r.prefix = std::move(*prefix);
  }
  auto on_finished = std::move(callbacks.on_finished);
  callbacks.on_finished = [this, id, on_finished](const request_finished& f) {
    {
      std::lock_guard lock(mutex_);
      requests_.erase(id);
    }
    if (on_finished) on_finished(f);
  };
  std::lock_guard lock(mutex_);
  serving_instance target = choose(routed_locked());
  const instance_id target_id = target.id;
  caf::actor request = spawn_request(sys, std::move(r), std::move(target), std::move(callbacks), resume_elsewhere_);
  if (latest_ && latest_->newer_than(chosen_from)) caf::anon_send(request, *latest_);
  requests_[id] = {std::move(request), target_id, admission::blocks_needed(params.prompt.size(), params.max_tokens)};
}

void request_table::cancel(request_id id) {
  std::lock_guard lock(mutex_);
  if (auto it = requests_.find(id); it != requests_.end()) caf::anon_send(it->second.actor, cancel_request{id});
}

void request_table::cancel_all() {
  std::lock_guard lock(mutex_);
  for (auto& [id, r] : requests_) caf::anon_send(r.actor, cancel_request{id});
}

void request_table::exit_all() {
  std::lock_guard lock(mutex_);
  for (auto& [id, r] : requests_) caf::anon_send_exit(r.actor, caf::exit_reason::user_shutdown);
}

void request_table::tell_view(const cluster_view& view) {
  std::lock_guard lock(mutex_);
  if (!latest_ || view.newer_than(*latest_)) latest_ = view;
  for (auto& [id, r] : requests_) caf::anon_send(r.actor, view);
}

routed_blocks request_table::routed_locked() const {
  routed_blocks out;
  for (const auto& [id, r] : requests_) out[r.instance] += r.blocks;
  return out;
}

size_t request_table::size() {
  std::lock_guard lock(mutex_);
  return requests_.size();
}

void request_table::clear() {
  std::lock_guard lock(mutex_);
  requests_.clear();
}

}  // namespace illm::actors
