#include "moe/trace/trace_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

namespace moe {

namespace {

using nlohmann::json;

struct WaitRec {
  int rank, step, layer;
  double ts, ms;
};
struct StepSpan {
  double ts, end;
  int step;
};

// Everything read from the file, keyed by step.
struct Parsed {
  int ranks = 0;
  std::map<std::pair<int, int>, TraceRankTimes> times;  // (step, rank)
  std::map<std::pair<int, int>, double> counts_wait;     // (step, rank): waits nested in dispatch
  std::vector<WaitRec> waits;
  std::vector<std::vector<StepSpan>> step_spans;          // [rank]
  std::map<int, std::map<std::pair<int, int>, int64_t>> link_bytes;  // step -> (src, dst) -> bytes
  std::map<int, std::map<int, std::vector<int64_t>>> experts;        // step -> layer -> tokens
  std::vector<int64_t> dropped;
};

int get_int(const json& args, const char* key, int fallback) {
  auto it = args.find(key);
  return it != args.end() && it->is_number() ? it->get<int>() : fallback;
}

Status parse_events(const std::string& text, const std::string& name, Parsed* p);

Status parse(const std::string& text, const std::string& name, Parsed* p) {
  try {
    return parse_events(text, name, p);
  } catch (const json::exception& e) {  // a field of the wrong type
    return invalid_argument(name + ": malformed trace event (" + std::string(e.what()) + ")");
  }
}

Status parse_events(const std::string& text, const std::string& name, Parsed* p) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return invalid_argument(name + ": not JSON (expected the trace file of --trace)");
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return invalid_argument(name + ": no traceEvents array (not a Chrome trace-event file)");
  }
  struct Bytes {
    int pid, peer;
    double ts;
    int64_t cumulative;
  };
  std::vector<Bytes> bytes;
  for (const json& e : doc["traceEvents"]) {
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    const std::string n = e.value("name", "");
    const int pid = e.value("pid", 0);
    if (pid < 0 || pid > 1 << 20) return invalid_argument(name + ": an event has pid " + std::to_string(pid));
    p->ranks = std::max(p->ranks, pid + 1);
    const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
    const double ts = e.value("ts", 0.0);
    if (ph == "X") {
      const int step = get_int(args, "step", -1);
      if (step < 0) continue;
      const double ms = e.value("dur", 0.0) / 1e3;
      TraceRankTimes& t = p->times[{step, pid}];
      t.rank = pid;
      if (n == "step") {
        t.step_ms += ms;
        t.tokens += args.value("tokens", int64_t{0});
        if (p->step_spans.size() <= static_cast<size_t>(pid)) p->step_spans.resize(static_cast<size_t>(pid) + 1);
        p->step_spans[static_cast<size_t>(pid)].push_back({ts, ts + ms * 1e3, step});
      } else if (n == "attention") {
        t.attention_ms += ms;
      } else if (n == "router") {
        t.router_ms += ms;
      } else if (n == "dispatch") {
        t.dispatch_ms += ms;
      } else if (n == "expert_compute") {
        t.expert_ms += ms;
      } else if (n == "combine") {
        t.combine_ms += ms;
      } else if (n == "wait") {
        t.wait_ms += ms;
        if (args.value("exchange", "") == "counts") p->counts_wait[{step, pid}] += ms;
        p->waits.push_back({pid, step, get_int(args, "layer", -1), ts, ms});
      }
    } else if (ph == "C" && n.rfind("bytes to rank ", 0) == 0) {
      const int peer = std::atoi(n.c_str() + 14);
      bytes.push_back({pid, peer, ts, args.value("bytes", int64_t{0})});
    } else if (ph == "i" && n == "experts") {
      const int step = get_int(args, "step", -1), layer = get_int(args, "layer", -1);
      if (step < 0 || !args.contains("tokens") || !args["tokens"].is_array()) continue;
      p->experts[step][layer] = args["tokens"].get<std::vector<int64_t>>();
    }
  }
  if (p->step_spans.empty()) {
    return invalid_argument(name + ": no step spans (\"step\" events with args.step): not a trace written by --trace");
  }
  // Dispatch time excludes the counts exchange's wait nested in it.
  for (auto& [key, ms] : p->counts_wait) p->times[key].dispatch_ms -= ms;
  // Per-link bytes: counter deltas, attributed to the step span of the same rank that
  // contains them.
  for (auto& spans : p->step_spans) std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.ts < b.ts; });
  std::sort(bytes.begin(), bytes.end(), [](const Bytes& a, const Bytes& b) { return a.ts < b.ts; });
  std::map<std::pair<int, int>, int64_t> last;
  for (const Bytes& b : bytes) {
    int64_t& prev = last[{b.pid, b.peer}];
    const int64_t delta = b.cumulative - prev;
    prev = b.cumulative;
    if (static_cast<size_t>(b.pid) >= p->step_spans.size()) continue;
    const auto& spans = p->step_spans[static_cast<size_t>(b.pid)];
    auto it = std::upper_bound(spans.begin(), spans.end(), b.ts, [](double t, const StepSpan& s) { return t < s.ts; });
    if (it == spans.begin()) continue;
    --it;
    if (b.ts <= it->end) p->link_bytes[it->step][{b.pid, b.peer}] += delta;
  }
  if (doc.contains("otherData") && doc["otherData"].is_object() && doc["otherData"].contains("dropped_events")) {
    const json& d = doc["otherData"]["dropped_events"];
    if (d.is_array()) p->dropped = d.get<std::vector<int64_t>>();
  }
  return ok_status();
}

// The summary of one step (or of all: step -1).
TraceStepSummary summarize_steps(const Parsed& p, int step) {
  TraceStepSummary s;
  s.step = step;
  auto in = [step](int st) { return step < 0 || st == step; };
  s.ranks.resize(static_cast<size_t>(p.ranks));
  for (int r = 0; r < p.ranks; ++r) s.ranks[static_cast<size_t>(r)].rank = r;
  std::map<int, std::vector<double>> step_ms;  // step -> per rank
  for (const auto& [key, t] : p.times) {
    if (!in(key.first)) continue;
    TraceRankTimes& a = s.ranks[static_cast<size_t>(key.second)];
    a.step_ms += t.step_ms;
    a.attention_ms += t.attention_ms;
    a.router_ms += t.router_ms;
    a.dispatch_ms += t.dispatch_ms;
    a.expert_ms += t.expert_ms;
    a.combine_ms += t.combine_ms;
    a.wait_ms += t.wait_ms;
    a.tokens += t.tokens;
    auto& v = step_ms[key.first];
    v.resize(static_cast<size_t>(p.ranks), 0.0);
    v[static_cast<size_t>(key.second)] = t.step_ms;
  }
  // Duration: the slowest rank of each step, summed; the slowest rank overall.
  std::vector<double> slow_sum(static_cast<size_t>(p.ranks), 0.0);
  for (const auto& [st, v] : step_ms) {
    const auto it = std::max_element(v.begin(), v.end());
    s.duration_ms += *it;
    slow_sum[static_cast<size_t>(it - v.begin())] += *it;
  }
  s.slowest_rank = static_cast<int>(std::max_element(slow_sum.begin(), slow_sum.end()) - slow_sum.begin());
  // Waits: group the k-th wait of (step, layer) across ranks.
  std::map<std::tuple<int, int, int>, std::vector<std::pair<int, double>>> groups;  // (step, layer, k) -> (rank, ms)
  {
    std::vector<WaitRec> w;
    for (const WaitRec& x : p.waits) {
      if (in(x.step)) w.push_back(x);
    }
    std::sort(w.begin(), w.end(), [](const WaitRec& a, const WaitRec& b) {
      return std::tie(a.step, a.layer, a.rank, a.ts) < std::tie(b.step, b.layer, b.rank, b.ts);
    });
    std::map<std::tuple<int, int, int>, int> k;
    for (const WaitRec& x : w) groups[{x.step, x.layer, k[{x.step, x.layer, x.rank}]++}].push_back({x.rank, x.ms});
  }
  std::map<std::pair<int, int>, TraceWaitEdge> edges;
  for (const auto& [key, g] : groups) {
    if (static_cast<int>(g.size()) != p.ranks || p.ranks < 2) continue;  // an exchange missing a rank (cut trace)
    const auto last = std::min_element(g.begin(), g.end(), [](auto& a, auto& b) { return a.second < b.second; });
    for (const auto& [r, ms] : g) {
      if (r == last->first) continue;
      TraceWaitEdge& e = edges[{r, last->first}];
      e.waiter = r;
      e.waited_on = last->first;
      e.ms += ms;
      ++e.count;
    }
  }
  for (const auto& [key, e] : edges) s.waits.push_back(e);
  std::sort(s.waits.begin(), s.waits.end(), [](auto& a, auto& b) { return a.ms > b.ms; });
  std::map<std::pair<int, int>, int64_t> links;
  for (const auto& [st, m] : p.link_bytes) {
    if (!in(st)) continue;
    for (const auto& [key, b] : m) links[key] += b;
  }
  for (const auto& [key, b] : links) s.links.push_back({key.first, key.second, b});
  std::map<int, std::vector<int64_t>> layer_tokens;
  for (const auto& [st, layers] : p.experts) {
    if (!in(st)) continue;
    for (const auto& [layer, tokens] : layers) {
      auto& sum = layer_tokens[layer];
      if (sum.size() < tokens.size()) sum.resize(tokens.size(), 0);
      for (size_t e = 0; e < tokens.size(); ++e) sum[e] += tokens[e];
    }
  }
  for (const auto& [layer, tokens] : layer_tokens) {
    if (tokens.empty()) continue;
    const auto it = std::max_element(tokens.begin(), tokens.end());
    int64_t total = 0;
    for (int64_t t : tokens) total += t;
    s.hot_experts.push_back({layer, static_cast<int>(it - tokens.begin()), *it,
                             total > 0 ? static_cast<double>(*it) / static_cast<double>(total) : 0.0});
  }
  std::stable_sort(s.hot_experts.begin(), s.hot_experts.end(), [](auto& a, auto& b) { return a.tokens > b.tokens; });
  return s;
}

void appendf(std::string* out, const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  *out += buf;
}

std::string human_bytes(int64_t b) {
  char buf[64];
  if (b >= 1000000) std::snprintf(buf, sizeof(buf), "%.2f MB", static_cast<double>(b) / 1e6);
  else if (b >= 1000) std::snprintf(buf, sizeof(buf), "%.1f kB", static_cast<double>(b) / 1e3);
  else std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(b));
  return buf;
}

void format_step(const TraceStepSummary& s, const std::string& title, std::string* out) {
  appendf(out, "\n%s: %.3f ms (slowest rank %d)\n", title.c_str(), s.duration_ms, s.slowest_rank);
  appendf(out, "  %4s %8s %10s %10s %8s %9s %9s %9s %9s   (ms)\n", "rank", "tokens", "step", "attention", "router",
          "dispatch", "experts", "combine", "wait");
  for (const TraceRankTimes& t : s.ranks) {
    appendf(out, "  %4d %8lld %10.3f %10.3f %8.3f %9.3f %9.3f %9.3f %9.3f\n", t.rank, static_cast<long long>(t.tokens),
            t.step_ms, t.attention_ms, t.router_ms, t.dispatch_ms, t.expert_ms, t.combine_ms, t.wait_ms);
  }
  *out += "  who waited on whom (in the all-to-all exchanges):\n";
  if (s.waits.empty()) *out += "    (no waits recorded)\n";
  for (const TraceWaitEdge& e : s.waits) {
    appendf(out, "    rank %d waited on rank %d: %.3f ms over %lld exchanges\n", e.waiter, e.waited_on, e.ms,
            static_cast<long long>(e.count));
  }
  *out += "  bytes per link (src -> dst; src == dst: rows kept locally):\n";
  if (s.links.empty()) *out += "    (none recorded)\n";
  for (const TraceLinkBytes& l : s.links) {
    appendf(out, "    %d -> %d: %s (%lld bytes)\n", l.src, l.dst, human_bytes(l.bytes).c_str(),
            static_cast<long long>(l.bytes));
  }
  *out += "  hot experts (hottest of each layer):\n";
  if (s.hot_experts.empty()) *out += "    (no expert counts recorded)\n";
  for (const TraceHotExpert& h : s.hot_experts) {
    appendf(out, "    layer %d expert %d: %lld tokens (%.0f%% of the layer's)\n", h.layer, h.expert,
            static_cast<long long>(h.tokens), h.share * 100.0);
  }
}

}  // namespace

StatusOr<TraceSummary> summarize_trace(const std::string& json_text, const std::string& name,
                                       const TraceSummaryOptions& options) {
  if (options.top < 1) return invalid_argument("--top must be >= 1 (got " + std::to_string(options.top) + ")");
  Parsed p;
  MOE_RETURN_IF_ERROR(parse(json_text, name, &p));
  TraceSummary s;
  s.ranks = p.ranks;
  s.dropped_events = p.dropped;
  std::map<int, double> slowest;  // step -> slowest rank's ms
  for (const auto& [key, t] : p.times) slowest[key.first] = std::max(slowest[key.first], t.step_ms);
  int max_step = -1;
  for (const auto& [st, ms] : slowest) {
    s.slowest_steps.push_back({st, ms});
    max_step = std::max(max_step, st);
  }
  s.steps = static_cast<int>(slowest.size());
  std::stable_sort(s.slowest_steps.begin(), s.slowest_steps.end(), [](auto& a, auto& b) { return a.second > b.second; });
  if (s.slowest_steps.size() > static_cast<size_t>(options.top)) s.slowest_steps.resize(static_cast<size_t>(options.top));
  s.all = summarize_steps(p, -1);
  if (options.step >= 0) {
    if (slowest.count(options.step) == 0) {
      return invalid_argument("--step " + std::to_string(options.step) + ": " + name + " has no such step (steps 0.." +
                              std::to_string(max_step) + ")");
    }
    s.selected = summarize_steps(p, options.step);
  }
  return s;
}

std::string format_trace_summary(const TraceSummary& s) {
  std::string out;
  appendf(&out, "%d ranks, %d steps", s.ranks, s.steps);
  int64_t dropped = 0;
  for (int64_t d : s.dropped_events) dropped += d;
  if (dropped > 0) appendf(&out, " (%lld events dropped: --trace-max-events was too small)", static_cast<long long>(dropped));
  out += "\nslowest steps:";
  for (const auto& [st, ms] : s.slowest_steps) appendf(&out, " %d (%.3f ms)", st, ms);
  out += "\n";
  if (s.selected.step >= 0) format_step(s.selected, "step " + std::to_string(s.selected.step), &out);
  format_step(s.all, "all " + std::to_string(s.steps) + " steps", &out);
  return out;
}

namespace {
constexpr double kBarX = 140, kBarMaxWidth = 700, kBarTop = 60, kBarPitch = 40, kBarHeight = 26;

double segment_ms(const TraceRankTimes& t, int segment) {
  switch (segment) {
    case 0: return t.attention_ms;
    case 1: return t.router_ms;
    case 2: return std::max(0.0, t.dispatch_ms);
    case 3: return t.expert_ms;
    case 4: return t.combine_ms;
    default: return t.wait_ms;
  }
}

double bar_total(const TraceRankTimes& t) {
  double total = 0;
  for (int i = 0; i < 6; ++i) total += segment_ms(t, i);
  return total;
}
}  // namespace

TraceChartBox trace_chart_bar(const TraceRankTimes& times, int rank, int segment, double max_ms) {
  const double scale = max_ms > 0 ? kBarMaxWidth / max_ms : 0;
  double x = kBarX;
  for (int i = 0; i < segment; ++i) x += segment_ms(times, i) * scale;
  return {x, kBarTop + rank * kBarPitch, segment_ms(times, segment) * scale, kBarHeight};
}

std::string render_trace_summary_svg(const TraceSummary& summary) {
  const TraceStepSummary& s = summary.selected.step >= 0 ? summary.selected : summary.all;
  const int R = static_cast<int>(s.ranks.size());
  const size_t shown_waits = std::min<size_t>(s.waits.size(), 8);
  const double legend_y = kBarTop + R * kBarPitch + 10;
  const int height = static_cast<int>(legend_y + 40 + 20 * static_cast<double>(shown_waits) + 10);
  double max_ms = 0;
  for (const TraceRankTimes& t : s.ranks) max_ms = std::max(max_ms, bar_total(t));
  std::string out;
  appendf(&out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n",
          kTraceChartWidth, height);
  appendf(&out, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", kTraceChartWidth, height);
  const std::string title = s.step >= 0 ? "Step " + std::to_string(s.step) : "All " + std::to_string(summary.steps) + " steps";
  appendf(&out, "<text x=\"20\" y=\"30\" font-size=\"18\">%s: time per rank by span (%.3f ms, slowest rank %d)</text>\n",
          title.c_str(), s.duration_ms, s.slowest_rank);
  for (const TraceRankTimes& t : s.ranks) {
    const TraceChartBox b0 = trace_chart_bar(t, t.rank, 0, max_ms);
    appendf(&out, "<text x=\"20\" y=\"%.1f\" font-size=\"14\">rank %d</text>\n", b0.y + 18, t.rank);
    for (int i = 0; i < 6; ++i) {
      const TraceChartBox b = trace_chart_bar(t, t.rank, i, max_ms);
      if (b.width <= 0) continue;
      appendf(&out, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n", b.x, b.y, b.width,
              b.height, kTraceColors[i]);
    }
    appendf(&out, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%.2f ms</text>\n",
            kBarX + bar_total(t) * (max_ms > 0 ? kBarMaxWidth / max_ms : 0) + 4, b0.y + 18, bar_total(t));
  }
  const char* names[6] = {"attention", "router", "dispatch", "expert compute", "combine", "wait"};
  for (int i = 0; i < 6; ++i) {
    const double x = 20 + i * 140;
    appendf(&out, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", x, legend_y, kTraceColors[i]);
    appendf(&out, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"13\">%s</text>\n", x + 20, legend_y + 12, names[i]);
  }
  for (size_t i = 0; i < shown_waits; ++i) {
    const TraceWaitEdge& e = s.waits[i];
    appendf(&out, "<text x=\"20\" y=\"%.0f\" font-size=\"13\">rank %d waited on rank %d: %.3f ms over %lld exchanges</text>\n",
            legend_y + 40 + 20 * static_cast<double>(i), e.waiter, e.waited_on, e.ms, static_cast<long long>(e.count));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace moe
