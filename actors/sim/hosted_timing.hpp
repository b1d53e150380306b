#pragma once
// How the simulator fits the attention a holder computes for other instances' requests beside the work
// already queued on the holder's GPU (its own steps). The runtime's attention server runs apart from the
// worker; on a GPU, a stream of its own with priority gives `interleaved` (the default) or, counted more
// coarsely, `priority`; one shared evenly `shared`.

#include <string>
#include <vector>

namespace illm::actors::sim {

/// How a holder's GPU fits the attention it hosts beside the work already queued on it.
enum class hosted_timing {
  /// First, one job at a time with the GPU's own layers: those run in the time the attention booked before
  /// them leaves free, and attention booked after them goes first and makes the GPU's step end that much
  /// later (hosted_calendar::kind::own), so hosted work fills the time a step waits for its holders
  interleaved,
  priority,  ///< first: the GPU's next step waits for all of it, also what ran while its step waited
  shared,    ///< at half speed when it starts before the queued work is done (two streams sharing the GPU)
  queued,    ///< after the queued work (one stream)
};

/// The names of the hosted_timing values, in order.
inline std::vector<std::string> hosted_timing_names() { return {"interleaved", "priority", "shared", "queued"}; }

}  // namespace illm::actors::sim
