#include "actors/metrics/metrics.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

namespace illm::actors::metrics {

namespace {

void atomic_add(std::atomic<double>& a, double v) {
  double old = a.load();
  while (!a.compare_exchange_weak(old, old + v)) {
  }
}

/// A sample value as the text format writes it.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);  // shortest exact form
  return std::string(buffer, end);
}

/// `v` with backslashes and newlines escaped, and double quotes too with `quotes` (label values need it,
/// HELP text does not).
std::string escape(const std::string& v, bool quotes) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quotes)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

/// {a="x",b="y"} with an optional extra label (le for buckets); empty when there are none.
std::string labels(const std::vector<std::string>& names, const label_values& values,
                   const std::string& extra_name = {}, const std::string& extra_value = {}) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i)
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + escape(values[i], true) + "\"";
  if (!extra_name.empty()) out += (out.empty() ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  return out.empty() ? out : "{" + out + "}";
}

}  // namespace

void counter::add(double v) {
  if (v > 0) atomic_add(value_, v);  // counters never go down
}

void gauge::add(double v) {
  atomic_add(value_, v);
}

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i] = 0;
}

void histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1);
  atomic_add(sum_, v);
  count_.fetch_add(1);
}

std::vector<uint64_t> histogram::cumulative() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) out[i] = running += buckets_[i].load();
  return out;
}

/// One metric family of any kind, able to write itself.
struct registry::entry {
  std::string name, help, type;
  std::unique_ptr<family<counter>> counters;
  std::unique_ptr<family<gauge>> gauges;
  std::unique_ptr<family<histogram>> histograms;
  std::vector<std::string> sampled_labels;
  sampled_values sampled;

  void write(std::ostringstream& out) const {
    out << "# HELP " << name << " " << escape(help, false) << "\n# TYPE " << name << " " << type << "\n";
    if (counters)
      counters->each([&](const label_values& v, const counter& c) {
        out << name << labels(counters->label_names(), v) << " " << number(c.value()) << "\n";
      });
    if (gauges)
      gauges->each([&](const label_values& v, const gauge& g) {
        out << name << labels(gauges->label_names(), v) << " " << number(g.value()) << "\n";
      });
    if (sampled)
      for (const auto& [v, value] : sampled()) out << name << labels(sampled_labels, v) << " " << number(value) << "\n";
    if (histograms)
      histograms->each([&](const label_values& v, const histogram& h) {
        const auto counts = h.cumulative();
        for (size_t i = 0; i < counts.size(); ++i)
          out << name << "_bucket"
              << labels(histograms->label_names(), v, "le", i < h.bounds().size() ? number(h.bounds()[i]) : "+Inf")
              << " " << counts[i] << "\n";
        out << name << "_sum" << labels(histograms->label_names(), v) << " " << number(h.sum()) << "\n";
        out << name << "_count" << labels(histograms->label_names(), v) << " " << counts.back() << "\n";
      });
  }
};

registry::registry() = default;
registry::~registry() = default;

registry::entry& registry::add_entry(const std::string& name, const std::string& help, const char* type,
                                     const std::function<void(entry&)>& fill) {
  auto e = std::make_unique<entry>();
  e->name = name;
  e->help = help;
  e->type = type;
  fill(*e);
  std::lock_guard lock(mutex_);
  entries_.push_back(std::move(e));
  return *entries_.back();
}

family<counter>& registry::add_counter(const std::string& name, const std::string& help,
                                       std::vector<std::string> labels) {
  return *add_entry(name, help, "counter", [&](entry& e) {
            e.counters =
                std::make_unique<family<counter>>(std::move(labels), [] { return std::make_unique<counter>(); });
          }).counters;
}

family<gauge>& registry::add_gauge(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  return *add_entry(name, help, "gauge", [&](entry& e) {
            e.gauges = std::make_unique<family<gauge>>(std::move(labels), [] { return std::make_unique<gauge>(); });
          }).gauges;
}

family<histogram>& registry::add_histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                                           std::vector<std::string> labels) {
  return *add_entry(name, help, "histogram", [&](entry& e) {
            e.histograms = std::make_unique<family<histogram>>(
                std::move(labels), [bounds] { return std::make_unique<histogram>(bounds); });
          }).histograms;
}

void registry::add_sampled(const std::string& name, const std::string& help, const char* type,
                           std::vector<std::string> labels, sampled_values sample) {
  add_entry(name, help, type, [&](entry& e) {
    e.sampled_labels = std::move(labels);
    e.sampled = std::move(sample);
  });
}

void registry::add_sampled_gauge(const std::string& name, const std::string& help, std::vector<std::string> labels,
                                 sampled_values sample) {
  add_sampled(name, help, "gauge", std::move(labels), std::move(sample));
}

void registry::add_sampled_counter(const std::string& name, const std::string& help, std::vector<std::string> labels,
                                   sampled_values sample) {
  add_sampled(name, help, "counter", std::move(labels), std::move(sample));
}

std::string registry::expose() const {
  std::ostringstream out;
  std::lock_guard lock(mutex_);
  for (const auto& e : entries_) e->write(out);
  return out.str();
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.25, 0.5,
          0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0, 120.0};
}

std::vector<double> transfer_buckets() {
  return {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0};
}

}  // namespace illm::actors::metrics
