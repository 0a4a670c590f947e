#include "moe/serve/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "moe/core/check.h"

namespace moe::serve {
namespace {

enum Type { kCounter = 0, kGauge = 1, kHistogram = 2 };

void atomic_add(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

std::string escape_help(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string render_labels(const Labels& labels, const std::string& extra_name = "", const std::string& extra_value = "") {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += (first ? "" : ",") + k + "=\"" + escape_label_value(v) + "\"";
    first = false;
  }
  if (!extra_name.empty()) out += (first ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  return out + "}";
}

}  // namespace

struct MetricsRegistry::Family {
  std::string name, help;
  int type = kCounter;
  std::vector<double> bounds;
  // Series by sorted labels. std::map nodes are stable, so references stay valid.
  std::map<Labels, std::unique_ptr<Counter>> counters;
  std::map<Labels, std::unique_ptr<Gauge>> gauges;
  std::map<Labels, std::unique_ptr<Histogram>> histograms;
};

void Counter::inc(double v) { atomic_add(value_, v); }
void Counter::set(double total) { value_.store(total, std::memory_order_relaxed); }
void Gauge::add(double v) { atomic_add(value_, v); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  MOE_CHECK(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()));
}

void Histogram::observe(double v) {
  // The first bucket whose bound is >= v (Prometheus buckets are inclusive: le).
  const size_t b = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[b];
  sum_ += v;
}

void Histogram::set(const std::vector<uint64_t>& counts, double sum) {
  MOE_CHECK(counts.size() == upper_bounds_.size() + 1);
  std::lock_guard<std::mutex> lock(mu_);
  counts_ = counts;
  sum_ = sum;
}

Histogram::Data Histogram::data() const {
  Data d;
  d.upper_bounds = upper_bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    d.cumulative_counts.push_back(running);
  }
  d.count = running;
  d.sum = sum_;
  return d;
}

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help, int type,
                                                 const std::vector<double>* bounds) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    MOE_CHECK(it->second->type == type);
    MOE_CHECK(!bounds || *bounds == it->second->bounds);
    return *it->second;
  }
  auto f = std::make_unique<Family>();
  f->name = name;
  f->help = help;
  f->type = type;
  if (bounds) f->bounds = *bounds;
  Family* raw = f.get();
  families_.push_back(std::move(f));
  by_name_[name] = raw;
  return *raw;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Labels key = labels;
  std::sort(key.begin(), key.end());
  auto& slot = family(name, help, kCounter, nullptr).counters[key];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Labels key = labels;
  std::sort(key.begin(), key.end());
  auto& slot = family(name, help, kGauge, nullptr).gauges[key];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      const std::vector<double>& upper_bounds, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Labels key = labels;
  std::sort(key.begin(), key.end());
  auto& slot = family(name, help, kHistogram, &upper_bounds).histograms[key];
  if (!slot) slot = std::make_unique<Histogram>(upper_bounds);
  return *slot;
}

std::string MetricsRegistry::render() const {
  static const char* kTypeNames[] = {"counter", "gauge", "histogram"};
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& f : families_) {
    out += "# HELP " + f->name + " " + escape_help(f->help) + "\n";
    out += "# TYPE " + f->name + " " + kTypeNames[f->type] + "\n";
    for (const auto& [labels, c] : f->counters) {
      out += f->name + render_labels(labels) + " " + format_metric_value(c->value()) + "\n";
    }
    for (const auto& [labels, g] : f->gauges) {
      out += f->name + render_labels(labels) + " " + format_metric_value(g->value()) + "\n";
    }
    for (const auto& [labels, h] : f->histograms) {
      const Histogram::Data d = h->data();
      for (size_t b = 0; b <= d.upper_bounds.size(); ++b) {
        const std::string le = b < d.upper_bounds.size() ? format_metric_value(d.upper_bounds[b]) : "+Inf";
        out += f->name + "_bucket" + render_labels(labels, "le", le) + " " +
               std::to_string(d.cumulative_counts[b]) + "\n";
      }
      out += f->name + "_sum" + render_labels(labels) + " " + format_metric_value(d.sum) + "\n";
      out += f->name + "_count" + render_labels(labels) + " " + std::to_string(d.count) + "\n";
    }
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace moe::serve
