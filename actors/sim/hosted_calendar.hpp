#pragma once
// When each simulated GPU runs the attention it hosts for other instances' steps (plain C++). A holder
// attends one job at a time, none earlier than its queries arrive. Every worker books its holders' jobs
// when its step starts (the test coordinator runs one actor at a time), so two owners attending the same
// holder at once take turns.
//
// Jobs come in two kinds. A `queued` job takes the first gap the jobs booked before it leave. An `urgent`
// job (a decode token's attention, on a stream of its own with priority) waits only for the urgent jobs
// before it: a queued job it lands in is stretched by its time, and the queued jobs after that one move
// later as far as they must. The steps that booked those jobs were timed already, so each learns nothing
// of its delay: its holder's time is still all counted, in the jobs booked after it.
//
// A GPU's own layers may be booked too (kind `own`, hosted_timing::interleaved): they run in pieces in the
// time the hosted jobs booked before them leave free, so the attention a GPU hosts fills the time its own
// step waits for its holders. A hosted job booked later still goes first: it does not see the GPU's own
// pieces, and the GPU's own step ends later by the time the job overlaps its pieces (take_pushed).

#include <cstdint>
#include <map>
#include <utility>

namespace illm::actors::sim {

/// The hosted-attention jobs booked on each GPU, in simulated seconds.
class hosted_calendar {
 public:
  /// How a job fits beside the jobs booked before it.
  enum class kind {
    queued,  ///< whole, in the first gap the jobs before it leave (stepping over urgent ones)
    urgent,  ///< waits only for urgent jobs; the job it lands in runs that much longer
    own,     ///< the GPU's own layers: in pieces, in the time the hosted jobs before them leave free
  };

  /// Books a job of `seconds` on `gpu` at or after `earliest`; returns when it ends.
  double book(uint32_t gpu, double earliest, double seconds, kind k = kind::queued);
  /// The time hosted jobs booked on `gpu` since the last call overlap its own pieces: how much later its
  /// own step ends than booked.
  double take_pushed(uint32_t gpu);
  /// Forgets the jobs that ended by `now`: nothing can begin before it.
  void forget_before(double now);
  /// Jobs booked and not forgotten, over every GPU (for tests).
  size_t size() const;

 private:
  /// One GPU's jobs, each kind disjoint; a queued job's span includes the urgent jobs inside it.
  struct gpu_jobs {
    std::map<double, double> queued, urgent;  // begin -> end
    std::map<double, double> own;             // the GPU's own pieces, disjoint from the jobs booked before them
    double pushed = 0;                        // hosted time over own pieces, not yet taken
  };
  /// Each books a job and returns its span, from its begin to its end.
  static std::pair<double, double> book_queued(gpu_jobs& jobs, double earliest, double seconds);
  static std::pair<double, double> book_urgent(gpu_jobs& jobs, double earliest, double seconds);
  static double book_own(gpu_jobs& jobs, double earliest, double seconds);

  std::map<uint32_t, gpu_jobs> booked_;
};

}  // namespace illm::actors::sim
