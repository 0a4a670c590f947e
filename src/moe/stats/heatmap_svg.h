// A layer x expert heatmap of ExpertLoadStats as a standalone SVG (no library): one
// row per MoE layer (ascending), one column per expert, cells colored with a viridis
// colormap (dark purple = low, yellow = high), layer and expert labels (thinned when
// there are many), a title, a color bar with the scale's min and max, and each row's
// max/mean imbalance at the right.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moe/stats/expert_load_stats.h"
#include "moe/status.h"

namespace moe {

struct HeatmapOptions {
  enum class Value { kTokens, kEma };      // run totals, or the per-step EMA
  enum class Normalize { kNone, kLayer };  // one scale for all cells, or each row / its mean
  enum class Scale { kLinear, kLog };      // how values map to colors

  Value value = Value::kTokens;
  // kLayer divides each row by its mean, so 1.0 = a perfectly balanced expert (the
  // legend says "load / layer mean"); an all-zero row stays zero.
  Normalize normalize = Normalize::kNone;
  // kLog colors by log10(value); zeros (which have no logarithm) get the color of the
  // smallest positive value, which is the legend's minimum.
  Scale scale = Scale::kLinear;
  std::string title;  // empty: says what is plotted ("Expert load: tokens per expert", ...)
};

// The SVG document. Colors span the plotted values' min (colormap start) to max
// (colormap end); when all values are equal every cell gets the middle color. The
// imbalance column is max/mean of each plotted row ("-" for an all-zero row).
std::string render_expert_heatmap_svg(const ExpertLoadStats& stats, const HeatmapOptions& options);
// render_expert_heatmap_svg() written to `path` atomically (write_file_atomically: on
// failure the old file is untouched); Internal naming the path on failure.
Status write_expert_heatmap_svg(const ExpertLoadStats& stats, const HeatmapOptions& options, const std::string& path);

// Helpers, exposed for tests.
struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};
// Viridis at t in [0, 1] (clamped; NaN -> 0), interpolated between 9 anchor colors:
// viridis_color(0) = #440154, viridis_color(1) = #fde725.
Rgb viridis_color(double t);
std::string rgb_hex(Rgb c);  // "#rrggbb"
// Text for SVG content and attribute values: & < > " ' escaped, other control
// characters (not allowed in XML 1.0) replaced by '?'.
std::string xml_escape(std::string_view text);

}  // namespace moe
