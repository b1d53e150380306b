#pragma once
// The typed interfaces of the runtime's four actors: which messages each accepts and what it answers, checked
// by the compiler at every send and request. Read with DESIGN.md section 5: the paper's protocol is
// heartbeat (rManager -> gManager, answered by the cluster view), move_kvcache (gManager -> the source
// rManager) and try_move_kvcache (source -> destination rManager, answered by a reservation, granted or
// refused); around it membership, leases, rooms, room prefill and the instance's own traffic with its
// rManager. The messages are declared in actors/messages/declarations.hpp and defined beside it.

#include "actors/attention_server_interface.hpp"
#include "actors/gmanager_interface.hpp"
#include "actors/instance/interface.hpp"
#include "actors/rmanager/interface.hpp"
