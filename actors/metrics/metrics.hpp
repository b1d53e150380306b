#pragma once
// A small Prometheus metrics module (prometheus-cpp is not packaged for Debian 12): counters, gauges
// (set, or computed at scrape time) and histograms, each a family of series told apart by labels, and
// the text exposition format 0.0.4. Thread-safe; updating a series is lock-free once it exists.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace illm::actors::metrics {

/// Label values of a series, in the order of the family's label names.
using label_values = std::vector<std::string>;

/// A value that only goes up.
class counter {
 public:
  void add(double v = 1.0);
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0.0};
};

/// A value that goes up and down.
class gauge {
 public:
  void set(double v) { value_.store(v); }
  void add(double v);
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0.0};
};

/// Observations counted into cumulative buckets, with their sum and count.
class histogram {
 public:
  explicit histogram(std::vector<double> bounds);
  void observe(double v);
  /// Cumulative counts per bucket upper bound (the last is +Inf), the sum and the count.
  std::vector<uint64_t> cumulative() const;
  double sum() const { return sum_.load(); }
  uint64_t count() const { return count_.load(); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bound, then +Inf (not cumulative)
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

/// A family of series of one kind, by label values.
template <class Series>
class family {
 public:
  family(std::vector<std::string> label_names, std::function<std::unique_ptr<Series>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}
  /// The series with these label values (created on first use).
  Series& with(const label_values& values = {}) {
    std::lock_guard lock(mutex_);
    auto& s = series_[values];
    if (!s) s = make_();
    return *s;
  }
  const std::vector<std::string>& label_names() const { return label_names_; }
  /// Visits every series in label order.
  template <class F>
  void each(F&& f) const {
    std::lock_guard lock(mutex_);
    for (const auto& [values, s] : series_) f(values, *s);
  }

 private:
  std::vector<std::string> label_names_;
  std::function<std::unique_ptr<Series>()> make_;
  mutable std::mutex mutex_;
  std::map<label_values, std::unique_ptr<Series>> series_;
};

/// Series whose value is read when scraped.
using sampled_values = std::function<std::vector<std::pair<label_values, double>>()>;

/// Every metric of a process, and their exposition.
class registry {
 public:
  registry();
  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;

  family<counter>& add_counter(const std::string& name, const std::string& help,
                               std::vector<std::string> labels = {});
  family<gauge>& add_gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  family<histogram>& add_histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                                   std::vector<std::string> labels = {});
  /// A gauge family whose series come from `sample` at scrape time.
  void add_sampled_gauge(const std::string& name, const std::string& help, std::vector<std::string> labels,
                         sampled_values sample);
  /// A counter family whose series come from `sample` at scrape time (values that only grow).
  void add_sampled_counter(const std::string& name, const std::string& help, std::vector<std::string> labels,
                           sampled_values sample);

  /// The Prometheus text format 0.0.4 of every metric.
  std::string expose() const;

 private:
  struct entry;
  /// Adds a metric named `name` of `type`, its family or sampler set by `fill`.
  entry& add_entry(const std::string& name, const std::string& help, const char* type,
                   const std::function<void(entry&)>& fill);
  /// Adds a metric of `type` whose series come from `sample` at scrape time.
  void add_sampled(const std::string& name, const std::string& help, const char* type, std::vector<std::string> labels,
                   sampled_values sample);
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<entry>> entries_;
};

/// Bucket bounds for latencies in seconds, 1 ms to 2 minutes.
std::vector<double> latency_buckets();
/// Buckets for copies that take from microseconds (a device-to-device copy) to seconds (megabytes over TCP).
std::vector<double> transfer_buckets();

}  // namespace illm::actors::metrics
