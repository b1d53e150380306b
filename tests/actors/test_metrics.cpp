// The metrics module writes the Prometheus text format 0.0.4: HELP and TYPE lines, labels (escaped),
// cumulative histogram buckets with +Inf, _sum and _count, and sampled gauges read at scrape time.
#include <doctest/doctest.h>

#include "actors/metrics/runtime_metrics.hpp"

using namespace illm::actors::metrics;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

/// Checks that `text` has each of `lines`, naming any it lacks.
void check_lines(const std::string& text, std::initializer_list<std::string> lines) {
  for (const std::string& line : lines) CHECK_MESSAGE(has_line(text, line), "missing: ", line);
}

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("counters and gauges are exposed with their labels") {
    registry r;
    auto& c = r.add_counter("illm:things_total", "Things.", {"kind"});
    c.with({"a"}).add();
    c.with({"a"}).add(2);
    c.with({"b\"x"}).add();
    c.with({"a"}).add(-5);  // counters never go down
    auto& g = r.add_gauge("illm:level", "A level.");
    g.with().set(1.5);
    const std::string text = r.expose();
    check_lines(text, {"# HELP illm:things_total Things.", "# TYPE illm:things_total counter",
                       "illm:things_total{kind=\"a\"} 3", "illm:things_total{kind=\"b\\\"x\"} 1",
                       "# TYPE illm:level gauge", "illm:level 1.5"});
  }

  TEST_CASE("histograms are cumulative with an infinite bucket a sum and a count") {
    registry r;
    auto& h = r.add_histogram("illm:wait_seconds", "Waits.", {0.1, 1.0}, {"instance"});
    for (double v : {0.05, 0.1, 0.5, 2.0}) h.with({"0"}).observe(v);
    const std::string text = r.expose();
    check_lines(text, {"illm:wait_seconds_bucket{instance=\"0\",le=\"0.1\"} 2",
                       "illm:wait_seconds_bucket{instance=\"0\",le=\"1\"} 3",
                       "illm:wait_seconds_bucket{instance=\"0\",le=\"+Inf\"} 4",
                       "illm:wait_seconds_sum{instance=\"0\"} 2.65", "illm:wait_seconds_count{instance=\"0\"} 4"});
  }

  TEST_CASE("sampled gauges are read when scraped and the runtime families take a prefix") {
    registry r;
    double level = 0.25;
    r.add_sampled_gauge("illm:kv_cache_usage_perc", "Usage.", {"instance"}, [&] {
      return std::vector<std::pair<label_values, double>>{{{"3"}, level}};
    });
    CHECK(has_line(r.expose(), "illm:kv_cache_usage_perc{instance=\"3\"} 0.25"));
    level = 0.5;
    CHECK(has_line(r.expose(), "illm:kv_cache_usage_perc{instance=\"3\"} 0.5"));
    registry plain;
    runtime_metrics m(plain, "illm_");
    m.prompt_tokens.with().add(7);
    const std::string text = plain.expose();
    CHECK(has_line(text, "illm_prompt_tokens_total 7"));
    CHECK(text.find("illm:") == std::string::npos);
  }
}
