#include "actors/sim/hosted_calendar.hpp"

#include <algorithm>
#include <iterator>
#include <vector>

namespace illm::actors::sim {

namespace {

/// The end of the job in `jobs` that holds `t` (t itself when none does).
double out_of(const std::map<double, double>& jobs, double t) {
  auto it = jobs.upper_bound(t);
  if (it == jobs.begin()) return t;
  --it;
  return it->second > t ? it->second : t;
}

}  // namespace

double hosted_calendar::book_queued(gpu_jobs& jobs, double earliest, double seconds) {
  double begin = earliest;
  for (;;) {
    for (double before = -1; before != begin;) {  // out of every job that holds it
      before = begin;
      begin = out_of(jobs.urgent, out_of(jobs.queued, begin));
    }
    // Runs from `begin` for `seconds` of the GPU's time, stepping over the urgent jobs on the way.
    double t = begin, left = seconds;
    for (auto u = jobs.urgent.lower_bound(begin); u != jobs.urgent.end() && u->first < t + left; ++u) {
      left -= u->first - t;
      t = u->second;
    }
    const double end = t + left;
    const auto next = jobs.queued.lower_bound(begin);  // the first that begins at or after it
    if (next == jobs.queued.end() || next->first >= end) {
      jobs.queued[begin] = end;
      return end;
    }
    begin = next->second;  // a queued job begins before this one would end: after it
  }
}

double hosted_calendar::book_urgent(gpu_jobs& jobs, double earliest, double seconds) {
  const double begin = out_of(jobs.urgent, earliest), end = begin + seconds;
  jobs.urgent[begin] = end;
  // The queued job it lands in runs longer; those after it move later as far as they must.
  std::vector<std::pair<double, double>> moved;
  auto it = jobs.queued.upper_bound(begin);
  if (it != jobs.queued.begin() && std::prev(it)->second > begin) --it;
  double last_end = end;
  while (it != jobs.queued.end()) {
    const double b = it->first, e = it->second;
    const double nb = b < begin ? b : std::max(b, last_end);
    const double ne = b < begin ? e + seconds : nb + (e - b);
    if (nb == b && ne == e) break;  // nothing after it moves
    moved.emplace_back(nb, ne);
    last_end = ne;
    it = jobs.queued.erase(it);
  }
  for (const auto& [b, e] : moved) jobs.queued[b] = e;
  return end;
}

double hosted_calendar::book(uint32_t gpu, double earliest, double seconds, kind k) {
  if (!(seconds > 0)) return earliest;
  gpu_jobs& jobs = booked_[gpu];
  return k == kind::urgent ? book_urgent(jobs, earliest, seconds) : book_queued(jobs, earliest, seconds);
}

void hosted_calendar::forget_before(double now) {
  for (auto gpu = booked_.begin(); gpu != booked_.end();) {
    for (auto* jobs : {&gpu->second.queued, &gpu->second.urgent})
      while (!jobs->empty() && jobs->begin()->second <= now) jobs->erase(jobs->begin());
    gpu = gpu->second.queued.empty() && gpu->second.urgent.empty() ? booked_.erase(gpu) : std::next(gpu);
  }
}

size_t hosted_calendar::size() const {
  size_t n = 0;
  for (const auto& [gpu, jobs] : booked_) n += jobs.queued.size() + jobs.urgent.size();
  return n;
}

}  // namespace illm::actors::sim
