// moe trace summarize FILE: "why was step N slow" from a `--trace` file
// (src/moe/trace/trace_summary.h): time per rank by span, who waited on whom, bytes per
// link, hot experts, the slowest steps; --png draws the per-rank breakdown.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "moe/plot/svg_png.h"
#include "moe/trace/trace_summary.h"

namespace moe::cli {
namespace {

struct TraceFlags {
  std::string file;
  int step = -1;
  int top = 5;
  std::string png;
};

int run_summarize(const TraceFlags& f) {
  std::ifstream in(f.file, std::ios::binary);
  if (!in) return fail("cannot read the trace file " + f.file);
  std::stringstream text;
  text << in.rdbuf();
  if (f.step < -1) return fail("--step must be >= 0 (got " + std::to_string(f.step) + ")");
  auto s = summarize_trace(text.str(), f.file, TraceSummaryOptions{f.step, f.top});
  if (!s.ok()) return fail(s.status().message());
  std::printf("%s: %s", f.file.c_str(), format_trace_summary(s.value()).c_str());
  if (!f.png.empty()) {
    Status st = write_svg_as_png(render_trace_summary_svg(s.value()), f.png);
    if (!st.ok()) return fail("--png: " + st.message());
    std::printf("wrote %s\n", f.png.c_str());
  }
  return 0;
}

}  // namespace

RunFn add_trace_command(CLI::App& trace) {
  auto f = std::make_shared<TraceFlags>();
  trace.require_subcommand(1);
  auto* summarize = trace.add_subcommand(
      "summarize", "Why was a step slow: time per rank by span, who waited on whom, bytes per link, hot experts");
  summarize->add_option("file", f->file, "Trace file written by --trace (generate, serve, bench generate)")->required();
  summarize->add_option("--step", f->step, "Also break down this step (steps count from 0 on every rank)");
  summarize->add_option("--top", f->top, "How many of the slowest steps to list")->capture_default_str();
  summarize->add_option("--png", f->png, "Write a PNG chart of the step (or of all steps): time per rank by span");
  return [f] { return run_summarize(*f); };
}

}  // namespace moe::cli
