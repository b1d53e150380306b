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

#include <cstdint>
#include <map>

namespace illm::actors::sim {

/// The hosted-attention jobs booked on each GPU, in simulated seconds.
class hosted_calendar {
 public:
  /// How a job fits beside the jobs booked before it.
  enum class kind { queued, urgent };

  /// Books a job of `seconds` on `gpu` at or after `earliest`; returns when it ends.
  double book(uint32_t gpu, double earliest, double seconds, kind k = kind::queued);
  /// Forgets the jobs that ended by `now`: nothing can begin before it.
  void forget_before(double now);
  /// Jobs booked and not forgotten, over every GPU (for tests).
  size_t size() const;

 private:
  /// One GPU's jobs, each kind disjoint; a queued job's span includes the urgent jobs inside it.
  struct gpu_jobs {
    std::map<double, double> queued, urgent;  // begin -> end
  };
  static double book_queued(gpu_jobs& jobs, double earliest, double seconds);
  static double book_urgent(gpu_jobs& jobs, double earliest, double seconds);

  std::map<uint32_t, gpu_jobs> booked_;
};

}  // namespace illm::actors::sim
