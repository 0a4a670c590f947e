// `moe trace summarize`: reads a trace file of `--trace` (trace_gather.h) and answers
// "why was step N slow": per rank, where the step's time went (attention, router,
// dispatch, expert compute, combine, waits); which rank waited on which, for how long;
// the bytes per rank pair; the hot experts and their token counts; the slowest steps.
//
// Wait attribution (needs no clock alignment between ranks): the k-th wait of a layer
// in a step is the same exchange on every rank (every rank issues the same sequence).
// The rank that waited least arrived last: it is the one the others waited on, and each
// other rank r is charged its own wait time to the pair (r waited on that rank). The
// last-arriving rank's own wait (the transfer itself) is charged to nobody.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

// Milliseconds one rank spent in one step (or summed over steps), by span. dispatch
// excludes the counts exchange's wait nested in it (counted in wait).
struct TraceRankTimes {
  int rank = 0;
  double step_ms = 0, attention_ms = 0, router_ms = 0, dispatch_ms = 0, expert_ms = 0, combine_ms = 0, wait_ms = 0;
  int64_t tokens = 0;  // tokens this rank brought to the step(s)
};
struct TraceWaitEdge {
  int waiter = 0, waited_on = 0;
  double ms = 0;
  int64_t count = 0;  // exchanges
};
struct TraceLinkBytes {
  int src = 0, dst = 0;
  int64_t bytes = 0;
};
struct TraceHotExpert {
  int layer = 0, expert = 0;
  int64_t tokens = 0;
  double share = 0;  // of the layer's token-expert assignments in the same step(s)
};
// One step, or all of them together (step = -1).
struct TraceStepSummary {
  int step = -1;
  double duration_ms = 0;  // the slowest rank's step span (summed over steps for all)
  int slowest_rank = 0;
  std::vector<TraceRankTimes> ranks;        // by rank
  std::vector<TraceWaitEdge> waits;         // descending ms
  std::vector<TraceLinkBytes> links;        // by (src, dst); src == dst: rows a rank kept
  std::vector<TraceHotExpert> hot_experts;  // the hottest expert of each layer, descending tokens
};
struct TraceSummary {
  int ranks = 0;
  int steps = 0;
  std::vector<int64_t> dropped_events;     // per rank (otherData)
  std::vector<std::pair<int, double>> slowest_steps;  // (step, ms), slowest first, up to `top`
  TraceStepSummary all;                    // every step together
  TraceStepSummary selected;               // the --step one (step = -1 when none asked)
};

struct TraceSummaryOptions {
  int step = -1;  // summarize this step as well (-1: none)
  int top = 5;    // slowest steps listed (>= 1)
};

// `json_text`: a trace file's contents; `name` names it in errors. InvalidArgument for a
// file that is not JSON, not a trace-event object, has no step spans (not written by
// --trace), or lacks the asked step (the message gives the range).
StatusOr<TraceSummary> summarize_trace(const std::string& json_text, const std::string& name,
                                       const TraceSummaryOptions& options);
// The text report.
std::string format_trace_summary(const TraceSummary& summary);

// A chart of one step's summary (`selected` if asked, else `all`): one horizontal
// stacked bar per rank of its time by span, in kTraceColors order, with a legend and
// the waits by pair below. Standalone SVG; geometry in trace_chart_bar() for tests.
std::string render_trace_summary_svg(const TraceSummary& summary);
// Colors of the bars' segments: attention, router, dispatch, expert compute, combine, wait.
inline constexpr const char* kTraceColors[6] = {"#4e79a7", "#f28e2b", "#76b7b2", "#59a14f", "#edc948", "#e15759"};
// The bar of `rank` in the chart: pixel box of segment `segment` (0..5, kTraceColors
// order) for the values in `times` scaled to the chart's longest bar `max_ms`.
struct TraceChartBox {
  double x = 0, y = 0, width = 0, height = 0;
};
TraceChartBox trace_chart_bar(const TraceRankTimes& times, int rank, int segment, double max_ms);
inline constexpr int kTraceChartWidth = 900;

}  // namespace moe
