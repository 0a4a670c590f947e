// moe stats show|plot: per-expert load statistics (src/moe/stats/expert_load_stats.h)
// as a table, or as a layer x expert heatmap SVG. Reads moe's own statistics JSON or
// SGLang's {"logical_count": [[...]]} expert-distribution files.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "moe/stats/expert_load_stats.h"
#include "moe/plot/svg_png.h"
#include "moe/stats/heatmap_svg.h"

namespace moe::cli {
namespace {

struct StatsFlags {
  std::string stats;
  std::string out;
  std::string value = "tokens";
  std::string normalize = "none";
  std::string scale = "linear";
  std::string title;
};

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

std::string shape(const ExpertLoadStats& s) {
  return std::to_string(s.num_layers()) + (s.num_layers() == 1 ? " MoE layer x " : " MoE layers x ") +
         std::to_string(s.num_experts()) + (s.num_experts() == 1 ? " expert" : " experts");
}

// Loads --stats; says on stderr which all-zero (dense) layers of an SGLang file were left out.
StatusOr<ExpertLoadStats> load(const std::string& path) {
  if (path.empty()) return invalid_argument("--stats is empty; give a statistics JSON file");
  std::vector<int> skipped;
  auto s = ExpertLoadStats::load_json_file(path, &skipped);
  if (s.ok() && !skipped.empty()) {
    std::fprintf(stderr, "note: %s: skipping %zu all-zero layer%s (dense layers, no MoE block): %s\n", path.c_str(),
                 skipped.size(), skipped.size() == 1 ? "" : "s", join_ints(skipped).c_str());
  }
  return s;
}

int run_plot(const StatsFlags& f) {
  if (f.out.empty()) return fail("--out is empty; give the SVG or PNG file to write");
  auto s = load(f.stats);
  if (!s.ok()) return fail(s.status().message());
  HeatmapOptions o;
  o.value = f.value == "ema" ? HeatmapOptions::Value::kEma : HeatmapOptions::Value::kTokens;
  o.normalize = f.normalize == "layer" ? HeatmapOptions::Normalize::kLayer : HeatmapOptions::Normalize::kNone;
  o.scale = f.scale == "log" ? HeatmapOptions::Scale::kLog : HeatmapOptions::Scale::kLinear;
  o.title = f.title;
  if (o.value == HeatmapOptions::Value::kEma && !s->has_ema()) {
    return fail("--value ema: " + f.stats +
                " has no 'ema' arrays (SGLang files and hand-made ones hold only totals); use --value tokens");
  }
  const bool png = f.out.size() >= 4 && f.out.compare(f.out.size() - 4, 4, ".png") == 0;
  Status st = png ? write_svg_as_png(render_expert_heatmap_svg(s.value(), o), f.out)
                  : write_expert_heatmap_svg(s.value(), o, f.out);
  if (!st.ok()) return fail("--out: " + st.message());
  std::printf("wrote %s (%s)\n", f.out.c_str(), shape(s.value()).c_str());
  return 0;
}

int run_show(const StatsFlags& f) {
  auto loaded = load(f.stats);
  if (!loaded.ok()) return fail(loaded.status().message());
  const ExpertLoadStats& s = loaded.value();
  std::printf("%s: %s (tokens = token-expert assignments; degraded = tokens rerouted from a lost expert)\n",
              f.stats.c_str(), shape(s).c_str());
  std::printf("%6s %8s %14s %9s %8s %14s %10s %10s %10s\n", "layer", "steps", "tokens", "max/mean", "hottest",
              "hottest tokens", "dropped", "rerouted", "degraded");
  std::vector<double> imbalances;
  for (int id : s.layer_ids()) {
    const int hot = s.hottest_expert(id);
    imbalances.push_back(s.imbalance(id));
    std::printf("%6d %8lld %14lld %9.2f %8d %14lld %10lld %10lld %10lld\n", id, static_cast<long long>(s.steps(id)),
                static_cast<long long>(s.total_tokens(id)), s.imbalance(id), hot,
                static_cast<long long>(s.tokens_per_expert(id)[static_cast<size_t>(hot)]),
                static_cast<long long>(s.dropped(id)), static_cast<long long>(s.rerouted(id)),
                static_cast<long long>(s.degraded_tokens(id)));
  }
  const auto worst = std::max_element(imbalances.begin(), imbalances.end());
  std::vector<double> sorted = imbalances;
  std::sort(sorted.begin(), sorted.end());
  const double median = (sorted[(sorted.size() - 1) / 2] + sorted[sorted.size() / 2]) / 2;
  std::printf("max/mean over layers: median %.2f, max %.2f (layer %d)\n", median, *worst,
              s.layer_ids()[static_cast<size_t>(worst - imbalances.begin())]);
  return 0;
}

}  // namespace

RunFn add_stats_command(CLI::App& stats) {
  stats.require_subcommand(1);
  auto f = std::make_shared<StatsFlags>();
  auto* show = stats.add_subcommand("show", "Print a table per MoE layer: steps, tokens, max/mean, hottest expert");
  show->add_option("--stats", f->stats,
                   "Statistics JSON (moe's {\"layers\": [...]} or SGLang's {\"logical_count\": [[...]]})")
      ->required();

  auto* plot = stats.add_subcommand("plot", "Write a layer x expert heatmap of the load as SVG");
  plot->add_option("--stats", f->stats,
                   "Statistics JSON (moe's {\"layers\": [...]} or SGLang's {\"logical_count\": [[...]]})")
      ->required();
  plot->add_option("--out", f->out, "File to write: SVG, or PNG when the name ends in .png")->required();
  plot->add_option("--value", f->value, "Cell value: tokens (run totals) or ema (per-step moving average)")
      ->check(CLI::IsMember({"tokens", "ema"}))
      ->capture_default_str();
  plot->add_option("--normalize", f->normalize,
                   "none (one color scale for all cells) or layer (each row / its mean: 1 = balanced)")
      ->check(CLI::IsMember({"none", "layer"}))
      ->capture_default_str();
  plot->add_option("--scale", f->scale, "Color scale: linear or log (log10; shows cold experts too)")
      ->check(CLI::IsMember({"linear", "log"}))
      ->capture_default_str();
  plot->add_option("--title", f->title, "Title (default: says what is plotted)");

  return [f, show, plot] {
    if (show->parsed()) return run_show(*f);
    if (plot->parsed()) return run_plot(*f);
    return 2;
  };
}

}  // namespace moe::cli
