#include "actors/sim/hosted_calendar.hpp"

#include <algorithm>
#include <iterator>
#include <utility>
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

/// Books [begin, end) in `jobs` as one span with the jobs that end at `begin` or begin at `end`: the GPU is
/// as busy either way, and the calendar stays short.
void join(std::map<double, double>& jobs, double begin, double end) {
  if (const auto after = jobs.find(end); after != jobs.end()) {
    end = after->second;
    jobs.erase(after);
  }
  if (auto before = jobs.lower_bound(begin); before != jobs.begin() && std::prev(before)->second == begin) {
    std::prev(before)->second = end;
    return;
  }
  jobs[begin] = end;
}

/// How much of [begin, end) the spans of `jobs` cover.
double overlap(const std::map<double, double>& jobs, double begin, double end) {
  double covered = 0;
  auto it = jobs.upper_bound(begin);
  if (it != jobs.begin()) --it;
  for (; it != jobs.end() && it->first < end; ++it)
    covered += std::max(0.0, std::min(end, it->second) - std::max(begin, it->first));
  return covered;
}

}  // namespace

std::pair<double, double> hosted_calendar::book_queued(gpu_jobs& jobs, double earliest, double seconds) {
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
      return {begin, end};
    }
    begin = next->second;  // a queued job begins before this one would end: after it
  }
}

std::pair<double, double> hosted_calendar::book_urgent(gpu_jobs& jobs, double earliest, double seconds) {
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
  return {begin, end};
}

double hosted_calendar::book_own(gpu_jobs& jobs, double earliest, double seconds) {
  double t = earliest, left = seconds;
  while (left > 0) {
    for (double before = -1; before != t;) {  // out of every job that holds it
      before = t;
      t = out_of(jobs.own, out_of(jobs.urgent, out_of(jobs.queued, t)));
    }
    double next = t + left;  // the next job's begin, if it comes before this one would end
    for (const auto* booked : {&jobs.queued, &jobs.urgent, &jobs.own})
      if (const auto it = booked->upper_bound(t); it != booked->end()) next = std::min(next, it->first);
    if (!(next > t)) break;  // what is left is below the clock's resolution here
    left -= next - t;
    join(jobs.own, t, next);
    t = next;
  }
  return t;
}

double hosted_calendar::book(uint32_t gpu, double earliest, double seconds, kind k) {
  if (!(seconds > 0)) return earliest;
  gpu_jobs& jobs = booked_[gpu];
  if (k == kind::own) return book_own(jobs, earliest, seconds);
  const auto [begin, end] =
      k == kind::urgent ? book_urgent(jobs, earliest, seconds) : book_queued(jobs, earliest, seconds);
  if (!jobs.own.empty()) jobs.pushed += overlap(jobs.own, begin, end);
  return end;
}

double hosted_calendar::take_pushed(uint32_t gpu) {
  const auto it = booked_.find(gpu);
  if (it == booked_.end()) return 0;
  return std::exchange(it->second.pushed, 0.0);
}

void hosted_calendar::forget_before(double now) {
  for (auto gpu = booked_.begin(); gpu != booked_.end();) {
    gpu_jobs& g = gpu->second;
    for (auto* jobs : {&g.queued, &g.urgent, &g.own})
      while (!jobs->empty() && jobs->begin()->second <= now) jobs->erase(jobs->begin());
    const bool empty = g.queued.empty() && g.urgent.empty() && g.own.empty() && g.pushed == 0;
    gpu = empty ? booked_.erase(gpu) : std::next(gpu);
  }
}

size_t hosted_calendar::size() const {
  size_t n = 0;
  for (const auto& [gpu, jobs] : booked_) n += jobs.queued.size() + jobs.urgent.size() + jobs.own.size();
  return n;
}

}  // namespace illm::actors::sim
