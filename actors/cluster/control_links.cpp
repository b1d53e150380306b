// Control links: per instance of a view with a control port, one connect through CAF's middleman (whose
// handshake makes the route between the two nodes direct; a second connection between them is closed by
// CAF as redundant), then a monitor on the instance's rManager. A link that fails, or whose rManager goes
// down, is forgotten, and the next view that lists the instance links again (a restarted process at a new
// port, too).
#include "actors/cluster/control_links.hpp"

#include "actors/cluster/control_security.hpp"

#include <map>
#include <set>

#include <caf/io/all.hpp>

namespace illm::actors {

namespace {

/// One instance linked to, or being linked to.
struct link {
  control_endpoint at;
  caf::actor_addr rmanager;  ///< watched once linked
  bool pending = true;
};

struct links_state {
  control_links_config config;
  std::map<instance_id, link> links;
  static inline const char* name = "control_links";
};

using self_ptr = control_links_actor::stateful_pointer<links_state>;

void connect(self_ptr self, const instance_view& i) {
  auto& st = self->state;
  st.links[i.inst_id] = link{i.control, i.rmanager.address(), true};
  const instance_id id = i.inst_id;
  const control_endpoint at = i.control;
  auto still_ours = [=] {
    auto it = self->state.links.find(id);
    return it != self->state.links.end() && it->second.at == at && it->second.pending;
  };
  self->request(control_connector(self->system()), caf::infinite, caf::connect_atom::value, at.host, at.port)
      .then(
          [=](const caf::node_id&, const caf::strong_actor_ptr&, const std::set<std::string>&) {
            if (!still_ours()) return;
            link& l = self->state.links[id];
            l.pending = false;
            self->monitor(l.rmanager);
            if (self->state.config.on_link) self->state.config.on_link(id, at, {});
          },
          [=](const caf::error& e) {
            if (refused_by_peer(e) && self->state.config.on_refused) self->state.config.on_refused();
            if (!still_ours()) return;
            self->state.links.erase(id);  // the next view tries again
            if (self->state.config.on_link) self->state.config.on_link(id, at, self->system().render(e));
          });
}

/// Watches instance `i` without connecting to it: it connects to this process (it has the lower id).
void watch(self_ptr self, const instance_view& i) {
  self->state.links[i.inst_id] = link{i.control, i.rmanager.address(), false};
  self->monitor(i.rmanager);
  if (self->state.config.on_link) self->state.config.on_link(i.inst_id, i.control, {});
}

void on_view(self_ptr self, const cluster_view& v) {
  auto& st = self->state;
  for (const instance_view& i : v.instances) {
    if (i.control.empty() || i.control == st.config.self) continue;
    if (auto it = st.links.find(i.inst_id); it != st.links.end() && it->second.at == i.control) continue;
    if (st.config.self_id && i.inst_id < *st.config.self_id)
      watch(self, i);
    else
      connect(self, i);
  }
}

control_links_actor::behavior_type links_behavior(self_ptr self, control_links_config config) {
  self->state.config = std::move(config);
  self->set_down_handler([=](const caf::down_msg& d) {
    auto& links = self->state.links;
    for (auto it = links.begin(); it != links.end(); ++it)
      if (!it->second.pending && it->second.rmanager == d.source) {
        const instance_id id = it->first;
        links.erase(it);
        if (self->state.config.on_gone) self->state.config.on_gone(id, self->system().render(d.reason));
        return;
      }
  });
  return {
      [=](const cluster_view& v) { on_view(self, v); },
  };
}

}  // namespace

control_links_actor spawn_control_links(caf::actor_system& sys, control_links_config config) {
  return sys.spawn<caf::hidden>(links_behavior, std::move(config));
}

}  // namespace illm::actors
