#pragma once
// The attention server's typed interface (actors/interfaces.hpp has all four).

#include <cstdint>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages/declarations.hpp"

namespace illm::actors {

/// An attention server: remote MicroAttention over the blocks its instance hosts (actors/attention_server).
using attention_server_actor =
    caf::typed_actor<caf::reacts_to<incoming_attend>, caf::reacts_to<incoming_partials>, caf::reacts_to<written_atom>,
                     caf::reacts_to<recheck_atom>>;

}  // namespace illm::actors
