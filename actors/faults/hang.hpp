#pragma once
// A hang, for fault tests: the actors of an instance told hang_atom go silent, as the threads of a hung process
// would. Each leaves every message unread from then on (timers, requests, answers to its own requests that have no
// handler waiting) and sends nothing, while it stays alive: nobody gets a down message, the gManager only misses
// its heartbeats, and whoever asks it something waits for a timeout. An exit still ends it (the cluster's shutdown).

#include <caf/all.hpp>

namespace illm::actors::faults {

/// Makes `self` go silent when it receives hang_atom (outside its interface: send it to the untyped handle).
/// Every other message its behaviour lacks is printed and dropped, as by default.
void silent_when_told(caf::scheduled_actor* self);

/// Tells `actor` to go silent (it must have called silent_when_told).
void tell_to_hang(const caf::actor_addr& actor);

}  // namespace illm::actors::faults
