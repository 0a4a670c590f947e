#include "moe/serve_bench/serving_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace moe::serve_bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const double lo_f = std::floor(rank);
  const size_t lo = static_cast<size_t>(lo_f);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - lo_f;
  return values[lo] + (values[hi] - values[lo]) * frac;
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

double stddev(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const double m = mean(values);
  double ss = 0;
  for (double v : values) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(values.size()));
}

MetricStats summarize_seconds(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  MetricStats s;
  s.count = static_cast<int>(seconds.size());
  s.mean_ms = mean(seconds) * 1000.0;
  s.std_ms = stddev(seconds) * 1000.0;
  s.median_ms = percentile(seconds, 50.0) * 1000.0;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1000.0);
  return s;
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool parse_double(const std::string& s, double* out) {
  std::string t = trim(s);
  if (t.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// "99" for 99.0, "99.9" for 99.9 (vLLM's p_word).
std::string p_word(double p) {
  if (std::floor(p) == p) return std::to_string(static_cast<long long>(p));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", p);
  return buf;
}

}  // namespace

StatusOr<GoodputSlo> parse_goodput(const std::vector<std::string>& pairs) {
  GoodputSlo slo;
  for (const std::string& pair : pairs) {
    for (const std::string& item : split(pair, ' ')) {  // also "ttft:500 tpot:50" in one argument
      if (trim(item).empty()) continue;
      std::vector<std::string> kv = split(trim(item), ':');
      double v = 0;
      if (kv.size() != 2 || !parse_double(kv[1], &v)) {
        return invalid_argument("--goodput: '" + item +
                                "' is not KEY:VALUE (a metric name and a number of milliseconds, e.g. ttft:500)");
      }
      std::string key = trim(kv[0]);
      if (v < 0) return invalid_argument("--goodput: " + key + " must be non-negative, got " + kv[1]);
      if (key == "ttft") {
        slo.ttft_ms = v;
      } else if (key == "tpot") {
        slo.tpot_ms = v;
      } else if (key == "e2el") {
        slo.e2el_ms = v;
      } else {
        return invalid_argument("--goodput: unknown metric '" + key + "' (one of ttft, tpot, e2el)");
      }
    }
  }
  return slo;
}

StatusOr<std::vector<double>> parse_percentiles(const std::string& list) {
  std::vector<double> out;
  for (const std::string& item : split(list, ',')) {
    double p = 0;
    if (!parse_double(item, &p) || p < 0 || p > 100) {
      return invalid_argument("--percentiles: '" + item + "' is not a number in [0, 100]");
    }
    out.push_back(p);
  }
  return out;
}

StatusOr<std::vector<std::string>> parse_percentile_metrics(const std::string& list) {
  std::vector<std::string> out;
  for (const std::string& item : split(list, ',')) {
    std::string m = trim(item);
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") {
      return invalid_argument("--percentile-metrics: unknown metric '" + m + "' (ttft, tpot, itl, e2el)");
    }
    out.push_back(m);
  }
  return out;
}

BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                   const std::vector<double>& percentiles, const GoodputSlo& goodput) {
  BenchmarkMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  int good = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput& o = outputs[i];
    if (!o.success) {
      m.output_lens.push_back(0);
      m.tpots_s.push_back(0);
      ++m.failed;
      if (m.first_error_index < 0) {
        m.first_error_index = static_cast<int>(i);
        m.first_error = o.error;
      }
      continue;
    }
    const int output_len = o.output_tokens >= 0 ? o.output_tokens : o.text_chunks;
    m.output_lens.push_back(output_len);
    m.total_input += o.prompt_len;
    double tpot = 0;
    if (output_len > 1) {
      tpot = (o.latency_s - o.ttft_s) / (output_len - 1);
      tpots.push_back(tpot);
    }
    m.tpots_s.push_back(tpot);
    itls.insert(itls.end(), o.itl_s.begin(), o.itl_s.end());
    ttfts.push_back(o.ttft_s);
    e2els.push_back(o.latency_s);
    ++m.completed;
    if (goodput.any()) {
      bool ok = true;
      if (goodput.ttft_ms && o.ttft_s > *goodput.ttft_ms / 1000.0) ok = false;
      if (goodput.tpot_ms && tpot > *goodput.tpot_ms / 1000.0) ok = false;
      if (goodput.e2el_ms && o.latency_s > *goodput.e2el_ms / 1000.0) ok = false;
      if (ok) ++good;
    }
  }
  for (int len : m.output_lens) m.total_output += len;
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.request_goodput = good / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  }
  m.ttft = summarize_seconds(ttfts, percentiles);
  m.tpot = summarize_seconds(tpots, percentiles);
  m.itl = summarize_seconds(itls, percentiles);
  m.e2el = summarize_seconds(e2els, percentiles);
  return m;
}

namespace {

void line(std::ostringstream& os, const std::string& label, const std::string& value) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-40s %-10s", label.c_str(), value.c_str());
  os << buf << "\n";
}
std::string f2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}
std::string centered(const std::string& title, char fill, size_t width = 50) {
  if (title.size() >= width) return title;
  // Python's str.format '^' puts the extra fill character on the right.
  size_t left = (width - title.size()) / 2;
  size_t right = width - title.size() - left;
  return std::string(left, fill) + title + std::string(right, fill);
}

const MetricStats& stats_of(const BenchmarkMetrics& m, const std::string& name) {
  if (name == "ttft") return m.ttft;
  if (name == "tpot") return m.tpot;
  if (name == "itl") return m.itl;
  return m.e2el;
}

struct MetricNames {
  const char* key;
  const char* label;
  const char* header;
};
constexpr MetricNames kMetricNames[] = {
    {"ttft", "TTFT", "Time to First Token"},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
    {"itl", "ITL", "Inter-token Latency"},
    {"e2el", "E2EL", "End-to-end Latency"},
};

bool selected(const ReportOptions& o, const std::string& key) {
  return std::find(o.percentile_metrics.begin(), o.percentile_metrics.end(), key) != o.percentile_metrics.end();
}

}  // namespace

std::string report_line(const std::string& label, const std::string& value) {
  std::ostringstream os;
  line(os, label, value);
  return os.str();
}

std::string report_title(const std::string& title, char fill) { return centered(title, fill) + "\n"; }

std::string format_report(const BenchmarkMetrics& m, const ReportOptions& options) {
  std::ostringstream os;
  os << centered(" Serving Benchmark Result ", '=') << "\n";
  line(os, "Successful requests:", std::to_string(m.completed));
  line(os, "Failed requests:", std::to_string(m.failed));
  if (options.max_concurrency) line(os, "Maximum request concurrency:", std::to_string(*options.max_concurrency));
  line(os, "Benchmark duration (s):", f2(m.duration_s));
  line(os, "Total input tokens:", std::to_string(m.total_input));
  line(os, "Total generated tokens:", std::to_string(m.total_output));
  line(os, "Request throughput (req/s):", f2(m.request_throughput));
  if (options.goodput) line(os, "Request goodput (req/s):", f2(m.request_goodput));
  line(os, "Output token throughput (tok/s):", f2(m.output_throughput));
  line(os, "Total Token throughput (tok/s):", f2(m.total_token_throughput));
  for (const MetricNames& n : kMetricNames) {
    if (!selected(options, n.key)) continue;
    const MetricStats& s = stats_of(m, n.key);
    os << centered(n.header, '-') << "\n";
    line(os, std::string("Mean ") + n.label + " (ms):", f2(s.mean_ms));
    line(os, std::string("Median ") + n.label + " (ms):", f2(s.median_ms));
    for (const auto& [p, v] : s.percentiles_ms) {
      std::string label = "P";  // built by appending: GCC 12 warns (-Wrestrict) on "P" + string
      label += p_word(p);
      label += " ";
      label += n.label;
      label += " (ms):";
      line(os, label, f2(v));
    }
  }
  os << std::string(50, '=') << "\n";
  return os.str();
}

nlohmann::json metrics_json(const BenchmarkMetrics& m, const std::vector<RequestOutput>& outputs,
                            const ReportOptions& options) {
  nlohmann::json j;
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = options.goodput ? nlohmann::json(m.request_goodput) : nlohmann::json(nullptr);
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  for (const MetricNames& n : kMetricNames) {
    const MetricStats& s = stats_of(m, n.key);
    const std::string k = n.key;
    j["mean_" + k + "_ms"] = s.mean_ms;
    j["median_" + k + "_ms"] = s.median_ms;
    j["std_" + k + "_ms"] = s.std_ms;
    for (const auto& [p, v] : s.percentiles_ms) {
      std::string key = "p";
      key += p_word(p);
      key += "_";
      key += k;
      key += "_ms";
      j[key] = v;
    }
  }
  j["first_error"] = m.first_error_index >= 0 ? nlohmann::json(m.first_error) : nlohmann::json(nullptr);
  nlohmann::json input_lens = nlohmann::json::array(), ttfts = nlohmann::json::array(),
                 itls = nlohmann::json::array(), e2els = nlohmann::json::array(),
                 starts = nlohmann::json::array(), texts = nlohmann::json::array(),
                 errors = nlohmann::json::array(), usage = nlohmann::json::array(),
                 finish = nlohmann::json::array();
  for (const RequestOutput& o : outputs) {
    input_lens.push_back(o.prompt_len);
    ttfts.push_back(o.ttft_s);
    itls.push_back(o.itl_s);
    e2els.push_back(o.latency_s);
    starts.push_back(o.start_s);
    texts.push_back(o.generated_text);
    errors.push_back(o.error);
    usage.push_back(o.usage_reported);
    finish.push_back(o.finish_reason);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = m.output_lens;
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["e2els"] = std::move(e2els);
  j["tpots"] = m.tpots_s;
  j["start_times"] = std::move(starts);
  j["usage_reported"] = std::move(usage);
  j["finish_reasons"] = std::move(finish);
  j["generated_texts"] = std::move(texts);
  j["errors"] = std::move(errors);
  return j;
}

}  // namespace moe::serve_bench
