#include "moe/stats/heatmap_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "moe/core/atomic_file.h"
#include "moe/core/text_format.h"

namespace moe {
namespace {

// Viridis (matplotlib) at t = 0, 1/8, ..., 1.
constexpr Rgb kViridis[] = {
    {0x44, 0x01, 0x54}, {0x47, 0x2d, 0x7b}, {0x3b, 0x52, 0x8b}, {0x2c, 0x72, 0x8e}, {0x21, 0x91, 0x8c},
    {0x28, 0xae, 0x80}, {0x5e, 0xc9, 0x62}, {0xad, 0xdc, 0x30}, {0xfd, 0xe7, 0x25},
};
constexpr int kAnchors = sizeof(kViridis) / sizeof(kViridis[0]);

// Compact legend numbers: 0.52, 12.5, 1234, 147k, 3.27M.
std::string format_value(double v, bool normalized) {
  if (normalized) return format_double(v >= 100 ? "%.0f" : "%.2f", v);
  const double a = std::fabs(v);
  if (a < 1e4) return format_double(v == std::floor(v) ? "%.0f" : "%.3g", v);
  if (a < 1e6) return format_double("%.3gk", v / 1e3);
  if (a < 1e9) return format_double("%.3gM", v / 1e6);
  return format_double("%.3gG", v / 1e9);
}

std::string num(double v) {  // coordinates: at most one decimal
  return v == std::floor(v) ? format_double("%.0f", v) : format_double("%.1f", v);
}

std::string text_el(double x, double y, const std::string& anchor, int size, const std::string& body,
                    const std::string& extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\" font-size=\"" +
         std::to_string(size) + "\"" + extra + ">" + xml_escape(body) + "</text>\n";
}

}  // namespace

Rgb viridis_color(double t) {
  if (!(t > 0.0)) return kViridis[0];  // also NaN
  if (t >= 1.0) return kViridis[kAnchors - 1];
  const double x = t * (kAnchors - 1);
  const int i = std::min(static_cast<int>(x), kAnchors - 2);
  const double f = x - i;
  auto mix = [f](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (static_cast<double>(b) - a) * f));
  };
  const Rgb& a = kViridis[i];
  const Rgb& b = kViridis[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

std::string rgb_hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        const bool control = static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r';
        out += control ? '?' : ch;
    }
  }
  return out;
}

std::string render_expert_heatmap_svg(const ExpertLoadStats& stats, const HeatmapOptions& options) {
  using Opt = HeatmapOptions;
  const int L = stats.num_layers();
  const int E = stats.num_experts();
  const bool normalized = options.normalize == Opt::Normalize::kLayer;
  const bool log_scale = options.scale == Opt::Scale::kLog;

  // The plotted values, row-major [L][E], and each row's max/mean.
  std::vector<double> v(static_cast<size_t>(L) * E);
  std::vector<double> row_imbalance(static_cast<size_t>(L), 0.0);  // 0 = all-zero row
  for (int r = 0; r < L; ++r) {
    const int id = stats.layer_ids()[static_cast<size_t>(r)];
    double* row = &v[static_cast<size_t>(r) * E];
    double sum = 0, mx = 0;
    for (int e = 0; e < E; ++e) {
      row[e] = options.value == Opt::Value::kEma
                   ? stats.ema(id)[static_cast<size_t>(e)]
                   : static_cast<double>(stats.tokens_per_expert(id)[static_cast<size_t>(e)]);
      sum += row[e];
      mx = std::max(mx, row[e]);
    }
    const double mean = sum / E;
    if (mean > 0) {
      row_imbalance[static_cast<size_t>(r)] = mx / mean;
      if (normalized) {
        for (int e = 0; e < E; ++e) row[e] /= mean;
      }
    }
  }

  // Color scale: [lo, hi] over the plotted values (positive ones on a log scale).
  double lo = INFINITY, hi = -INFINITY;
  for (double x : v) {
    if (log_scale && !(x > 0)) continue;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  const bool any = lo <= hi;
  if (!any) lo = hi = 0;  // log scale with no positive value
  auto to_t = [&](double x) {
    if (!any || hi == lo) return 0.5;
    if (log_scale) {
      if (!(x > 0)) return 0.0;
      return (std::log10(x) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    }
    return (x - lo) / (hi - lo);
  };

  // Geometry (pixels). Integer cell sizes keep neighbouring cells seamless.
  const int cw = std::clamp(1024 / E, 3, 48);
  const int ch = std::clamp(640 / L, 9, 40);
  const int label_font = std::clamp(ch - 2, 7, 12);
  const int grid_w = cw * E;
  const int grid_h = ch * L;
  const int left = 72, top = 64;
  const int imb_w = 64;                        // the max/mean column
  const int cb_x = left + grid_w + imb_w + 8;  // color bar
  const int cb_w = 16;
  const int cb_h = std::max(grid_h, 120);
  const int legend_w = 110;
  std::string title = options.title;
  if (title.empty()) {
    title = normalized ? "Expert load relative to the layer mean"
                       : (options.value == Opt::Value::kEma ? "Expert load: EMA of tokens per step, per expert"
                                                            : "Expert load: tokens per expert");
  }
  std::string subtitle = std::to_string(L) + (L == 1 ? " MoE layer" : " MoE layers") + " \xC3\x97 " +
                         std::to_string(E) + (E == 1 ? " expert" : " experts") + "; " +
                         (options.value == Opt::Value::kEma ? "EMA of tokens per step" : "tokens summed over the run");
  if (normalized) subtitle += ", each layer divided by its mean (1 = balanced)";
  if (log_scale) subtitle += ", log color scale";
  // Room for the title (16 px bold) and subtitle (11 px) at a generous width per byte.
  const int text_w = std::max(static_cast<int>(title.size()) * 10, static_cast<int>(subtitle.size()) * 6);
  const int width = std::max(cb_x + cb_w + legend_w, left + text_w + 16);
  const int height = top + std::max(grid_h, cb_h) + 56;

  std::string s;
  s.reserve(static_cast<size_t>(L) * E * 64 + 8192);
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " + std::to_string(height) +
       "\" font-family=\"sans-serif\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += text_el(left, 26, "start", 16, title, " font-weight=\"bold\"");
  s += text_el(left, 44, "start", 11, subtitle, " fill=\"#444\"");

  // Cells: the only rects with a "#rrggbb" fill.
  s += "<g shape-rendering=\"crispEdges\">\n";
  for (int r = 0; r < L; ++r) {
    s += "<g transform=\"translate(0 " + std::to_string(top + r * ch) + ")\">";
    const std::string wh = "\" width=\"" + std::to_string(cw) + "\" height=\"" + std::to_string(ch) + "\" fill=\"";
    for (int e = 0; e < E; ++e) {
      s += "<rect x=\"" + std::to_string(left + e * cw) + wh +
           rgb_hex(viridis_color(to_t(v[static_cast<size_t>(r) * E + e]))) + "\"/>";
    }
    s += "</g>\n";
  }
  s += "</g>\n";

  // Row labels (layer ids) and the imbalance column.
  s += "<g fill=\"#222\">\n";
  s += text_el(left + grid_w + imb_w / 2.0, top - 6, "middle", 10, "max/mean");
  for (int r = 0; r < L; ++r) {
    const double y = top + r * ch + ch / 2.0 + label_font * 0.35;
    s += text_el(left - 4, y, "end", label_font, std::to_string(stats.layer_ids()[static_cast<size_t>(r)]));
    const double imb = row_imbalance[static_cast<size_t>(r)];
    s += text_el(left + grid_w + imb_w / 2.0, y, "middle", label_font, imb > 0 ? format_double("%.2f", imb) : "-");
  }
  s += text_el(18, top + grid_h / 2.0, "middle", 12, "MoE layer",
               " transform=\"rotate(-90 18 " + num(top + grid_h / 2.0) + ")\"");

  // Expert labels, thinned to a power-of-two step so that labels are >= 28 px apart.
  int step = 1;
  while (step * cw < 28 && step < E) step *= 2;
  for (int e = 0; e < E; e += step) {
    const double x = left + e * cw + cw / 2.0;
    s += "<line x1=\"" + num(x) + "\" y1=\"" + std::to_string(top + grid_h) + "\" x2=\"" + num(x) + "\" y2=\"" +
         std::to_string(top + grid_h + 4) + "\" stroke=\"#222\"/>\n";
    s += text_el(x, top + grid_h + 15, "middle", 10, std::to_string(e));
  }
  s += text_el(left + grid_w / 2.0, top + grid_h + 34, "middle", 12,
               step > 1 ? "expert (every " + std::to_string(step) + "th labelled)" : "expert");
  s += "</g>\n";

  // Color bar: the colormap's anchors as a gradient, max at the top.
  s += "<defs><linearGradient id=\"cmap\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int i = 0; i < kAnchors; ++i) {
    s += "<stop offset=\"" + format_double("%.3f", static_cast<double>(i) / (kAnchors - 1)) + "\" stop-color=\"" +
         rgb_hex(kViridis[i]) + "\"/>";
  }
  s += "</linearGradient></defs>\n";
  s += "<rect x=\"" + std::to_string(cb_x) + "\" y=\"" + std::to_string(top) + "\" width=\"" + std::to_string(cb_w) +
       "\" height=\"" + std::to_string(cb_h) + "\" fill=\"url(#cmap)\" stroke=\"#222\" stroke-width=\"0.5\"/>\n";
  auto tick = [&](double t, const std::string& label) {
    const double y = top + cb_h * (1.0 - t);
    s += "<line x1=\"" + std::to_string(cb_x + cb_w) + "\" y1=\"" + num(y) + "\" x2=\"" +
         std::to_string(cb_x + cb_w + 4) + "\" y2=\"" + num(y) + "\" stroke=\"#222\"/>\n";
    s += text_el(cb_x + cb_w + 6, y + 3.5, "start", 10, label);
  };
  if (!any || hi == lo) {
    tick(0.5, format_value(hi, normalized));
  } else {
    tick(1.0, format_value(hi, normalized) + " (max)");
    tick(0.0, format_value(lo, normalized) + (log_scale ? " (min > 0)" : " (min)"));
    // The balanced level, when it is inside the range and not crowding the ends.
    if (normalized && lo < 1.0 && hi > 1.0) {
      const double t1 = to_t(1.0);
      if (t1 * cb_h > 14 && (1 - t1) * cb_h > 14) tick(t1, "1 (balanced)");
    }
  }
  std::string legend =
      normalized ? "load / layer mean" : (options.value == Opt::Value::kEma ? "tokens per step (EMA)" : "tokens");
  if (log_scale) legend += " (log scale)";
  const double lx = cb_x + cb_w + legend_w - 12;
  const double ly = top + cb_h / 2.0;
  s += text_el(lx, ly, "middle", 11, legend, " transform=\"rotate(-90 " + num(lx) + " " + num(ly) + ")\"");
  s += "</svg>\n";
  return s;
}

Status write_expert_heatmap_svg(const ExpertLoadStats& stats, const HeatmapOptions& options, const std::string& path) {
  return write_file_atomically(path, render_expert_heatmap_svg(stats, options));
}

}  // namespace moe
