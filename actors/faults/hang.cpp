#include "actors/faults/hang.hpp"

#include "actors/messages/declarations.hpp"

namespace illm::actors::faults {

namespace {

/// Leaves a message unread in the mailbox, as a hung process leaves it in its socket: no error goes back to a
/// sender that asked something (a dropped request would be answered with one).
caf::result<caf::message> leave_unread(caf::scheduled_actor*, caf::message_view&) { return caf::skip(); }

/// From now on `self` matches nothing: every message stays unread, and no down message is acted on. Answers to
/// requests it made may still run their handlers once (as if the process hung a moment later); nothing else does.
void go_silent(caf::scheduled_actor* self) {
  self->set_default_handler(leave_unread);
  self->set_down_handler([](caf::scheduled_actor*, caf::down_msg&) {});
  self->do_become(caf::behavior{[](hang_atom) {}}, true);
}

caf::result<caf::message> hang_or_drop(caf::scheduled_actor* self, caf::message_view& x) {
  if (x.content().match_elements<hang_atom>()) {
    go_silent(self);
    return caf::message{};
  }
  return caf::print_and_drop(self, x);
}

}  // namespace

void silent_when_told(caf::scheduled_actor* self) { self->set_default_handler(hang_or_drop); }

void tell_to_hang(const caf::actor_addr& actor) {
  if (auto a = caf::actor_cast<caf::actor>(actor)) caf::anon_send(a, hang_atom::value);
}

}  // namespace illm::actors::faults
