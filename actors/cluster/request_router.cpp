#include "actors/cluster/request_router.hpp"

#include "gpu/backend.hpp"

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
                          serving_instance target, request_callbacks callbacks, const cluster_view& chosen_from) {
  generate_request r{id, params, {}};
  auto on_finished = std::move(callbacks.on_finished);
  callbacks.on_finished = [this, id, on_finished](const request_finished& f) {
    {
      std::lock_guard lock(mutex_);
      requests_.erase(id);
    }
    if (on_finished) on_finished(f);
  };
  std::lock_guard lock(mutex_);
  caf::actor request = spawn_request(sys, std::move(r), std::move(target), std::move(callbacks), resume_elsewhere_);
  if (latest_ && latest_->newer_than(chosen_from)) caf::anon_send(request, *latest_);
  requests_[id] = std::move(request);
}

void request_table::cancel(request_id id) {
  std::lock_guard lock(mutex_);
  if (auto it = requests_.find(id); it != requests_.end()) caf::anon_send(it->second, cancel_request{id});
}

void request_table::cancel_all() {
  std::lock_guard lock(mutex_);
  for (auto& [id, r] : requests_) caf::anon_send(r, cancel_request{id});
}

void request_table::exit_all() {
  std::lock_guard lock(mutex_);
  for (auto& [id, r] : requests_) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

void request_table::tell_view(const cluster_view& view) {
  std::lock_guard lock(mutex_);
  if (!latest_ || view.newer_than(*latest_)) latest_ = view;
  for (auto& [id, r] : requests_) caf::anon_send(r, view);
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
