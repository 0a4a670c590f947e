// A small Prometheus metrics registry: counters, gauges and histograms with fixed
// buckets, each a family of series told apart by labels, rendered in the text
// exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
//   MetricsRegistry reg;
//   Counter& ok = reg.counter("moe:requests_total", "Requests.", {{"status", "200"}});
//   ok.inc();
//   Histogram& ttft = reg.histogram("moe:ttft_seconds", "TTFT.", {0.1, 1});
//   ttft.observe(0.25);
//   std::string text = reg.render();
//
// Thread-safety: everything. Series are created once and live as long as the registry
// (returned references stay valid); inc/set/observe are lock-free or take a per-series
// lock only. Names and label names must match Prometheus' rules ([a-zA-Z_:][a-zA-Z0-9_:]*);
// a family keeps the type and buckets of its first creation (MOE_CHECK on a mismatch).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace moe::serve {

using Labels = std::vector<std::pair<std::string, std::string>>;  // name -> value

class Counter {
 public:
  void inc(double v = 1.0);  // v >= 0
  // Mirrors a monotonic count kept elsewhere (e.g. the engine's token totals).
  void set(double total);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `upper_bounds`: increasing bucket bounds; +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Mirrors a histogram kept elsewhere with the same bounds: `counts` per bucket (not
  // cumulative), +Inf last (MOE_CHECK on a size mismatch), and their sum.
  void set(const std::vector<uint64_t>& counts, double sum);
  struct Data {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Data data() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), +Inf last
  double sum_ = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  // The series of family `name` with `labels` (created on first use; `help` is taken
  // from the first call).
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const std::vector<double>& upper_bounds,
                       const Labels& labels = {});
  // Text format 0.0.4: families in creation order, series in label order, with
  // # HELP / # TYPE lines; histograms as _bucket{le=...}, _sum, _count.
  std::string render() const;

  struct Family;  // implementation detail (metrics.cc)

 private:
  Family& family(const std::string& name, const std::string& help, int type, const std::vector<double>* bounds);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
  std::map<std::string, Family*> by_name_;
};

// Prometheus number formatting: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
std::string format_metric_value(double v);
// Label-value escaping (\\, \", \n).
std::string escape_label_value(const std::string& v);

}  // namespace moe::serve
