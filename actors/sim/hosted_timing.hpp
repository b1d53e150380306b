#pragma once
// How the simulator fits the attention a holder computes for other instances' requests beside the work
// already queued on the holder's GPU (its own steps). The runtime's attention server runs apart from the
// worker; on a GPU, a stream of its own with priority gives `priority`, one shared evenly `shared`.

#include <string>
#include <vector>

namespace illm::actors::sim {

/// How a holder's GPU fits the attention it hosts beside the work already queued on it.
enum class hosted_timing {
  priority,  ///< first: the queued work waits, the owner never does
  shared,    ///< at half speed when it starts before the queued work is done (two streams sharing the GPU)
  queued,    ///< after the queued work (one stream)
};

/// The names of the hosted_timing values, in order.
inline std::vector<std::string> hosted_timing_names() { return {"priority", "shared", "queued"}; }

}  // namespace illm::actors::sim
