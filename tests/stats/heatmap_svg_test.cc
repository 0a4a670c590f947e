// The layer x expert heatmap SVG: well-formed XML (a tiny checker below), one colored
// cell per layer and expert, colormap ends at the min and max cells, normalisation,
// EMA and log scale, thinned expert labels, per-row imbalance, escaped text, and the
// file writer's error.
#include "moe/stats/heatmap_svg.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "contains_util.h"
#include "safetensors_util.h"

namespace moe {
namespace {

using Opt = HeatmapOptions;

// "" when `s` is well-formed XML as far as this SVG writer's output goes (prolog,
// nested elements, double-quoted attributes, the five named entities and &#...;),
// else what is wrong and where.
std::string xml_problem(const std::string& s) {
  auto entity_ok = [&](size_t i) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"}) {
      if (s.compare(i, std::char_traits<char>::length(e), e) == 0) return true;
    }
    if (s.compare(i, 2, "&#") == 0) {
      size_t semi = s.find(';', i);
      return semi != std::string::npos && semi - i <= 8;
    }
    return false;
  };
  std::vector<std::string> stack;
  bool root_seen = false;
  size_t i = 0;
  if (s.compare(0, 5, "<?xml") == 0) {
    i = s.find("?>");
    if (i == std::string::npos) return "unterminated prolog";
    i += 2;
  }
  while (i < s.size()) {
    const char c = s[i];
    if (c == '&') {
      if (!entity_ok(i)) return "bad entity at " + std::to_string(i) + ": " + s.substr(i, 12);
      ++i;
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
      return "control character at " + std::to_string(i);
    }
    if (c != '<') {
      if (stack.empty() && c != '\n' && c != ' ') return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    const bool closing = i + 1 < s.size() && s[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    const size_t name_start = j;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '-' || s[j] == ':')) ++j;
    const std::string name = s.substr(name_start, j - name_start);
    if (name.empty()) return "empty tag name at " + std::to_string(i);
    if (closing) {
      if (j >= s.size() || s[j] != '>') return "bad closing tag at " + std::to_string(i);
      if (stack.empty() || stack.back() != name) return "mismatched </" + name + "> at " + std::to_string(i);
      stack.pop_back();
      i = j + 1;
      continue;
    }
    // Attributes: name="value" separated by spaces, then > or />.
    bool self_closing = false;
    for (;;) {
      while (j < s.size() && s[j] == ' ') ++j;
      if (j >= s.size()) return "unterminated <" + name + ">";
      if (s[j] == '>') break;
      if (s.compare(j, 2, "/>") == 0) {
        self_closing = true;
        ++j;
        break;
      }
      const size_t an = j;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '-' || s[j] == ':')) ++j;
      if (j == an || s.compare(j, 2, "=\"") != 0) return "bad attribute in <" + name + "> at " + std::to_string(j);
      j += 2;
      for (; j < s.size() && s[j] != '"'; ++j) {
        if (s[j] == '<') return "'<' in an attribute of <" + name + ">";
        if (s[j] == '&' && !entity_ok(j)) return "bad entity in an attribute of <" + name + ">";
      }
      if (j >= s.size()) return "unterminated attribute in <" + name + ">";
      ++j;
    }
    if (stack.empty()) {
      if (root_seen) return "second root element <" + name + ">";
      if (name != "svg") return "root is <" + name + ">, not <svg>";
      root_seen = true;
    }
    if (!self_closing) stack.push_back(name);
    i = j + 1;
  }
  if (!root_seen) return "no root element";
  if (!stack.empty()) return "unclosed <" + stack.back() + ">";
  return "";
}

// The fills of the heatmap cells, in document order (row-major): the cells are the only
// <rect>s with a "#rrggbb" fill.
std::vector<std::string> cell_fills(const std::string& svg) {
  std::vector<std::string> out;
  for (size_t i = svg.find("<rect"); i != std::string::npos; i = svg.find("<rect", i + 1)) {
    const size_t end = svg.find('>', i);
    const std::string tag = svg.substr(i, end - i);
    const size_t f = tag.find(" fill=\"#");
    if (f != std::string::npos) out.push_back(tag.substr(f + 7, 7));
  }
  return out;
}

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t i = s.find(needle); i != std::string::npos; i = s.find(needle, i + 1)) ++n;
  return n;
}

ExpertLoadStats stats_from_rows(const std::vector<std::vector<int64_t>>& rows, std::vector<int> ids = {},
                                double decay = 0.9) {
  if (ids.empty()) {
    for (size_t i = 0; i < rows.size(); ++i) ids.push_back(static_cast<int>(i));
  }
  auto s = ExpertLoadStats::create(ids, static_cast<int>(rows[0].size()), decay);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  for (size_t i = 0; i < rows.size(); ++i) s->record_step(ids[i], rows[i].data(), 0, 0);
  return std::move(s).value();
}

const std::string kStart = "#440154";
const std::string kMid = "#21918c";
const std::string kEnd = "#fde725";

TEST(ViridisTest, EndsAnchorsAndClamping) {
  EXPECT_EQ(rgb_hex(viridis_color(0.0)), kStart);
  EXPECT_EQ(rgb_hex(viridis_color(1.0)), kEnd);
  EXPECT_EQ(rgb_hex(viridis_color(0.5)), kMid);
  EXPECT_EQ(rgb_hex(viridis_color(-3.0)), kStart);
  EXPECT_EQ(rgb_hex(viridis_color(7.0)), kEnd);
  EXPECT_EQ(rgb_hex(viridis_color(std::nan(""))), kStart);
  // Halfway between the first two anchors #440154 and #472d7b: (0x44+0x47)/2 = 69.5 -> 70 ...
  EXPECT_EQ(rgb_hex(viridis_color(1.0 / 16)), "#461768");
  // Monotone in lightness-ish: green rises over the whole range.
  int last_g = -1;
  for (int i = 0; i <= 64; ++i) {
    const int g = viridis_color(i / 64.0).g;
    EXPECT_GE(g, last_g) << i;
    last_g = g;
  }
}

TEST(XmlEscapeTest, EscapesMarkupAndControlCharacters) {
  EXPECT_EQ(xml_escape("a<b>&\"c\" 'd'"), "a&lt;b&gt;&amp;&quot;c&quot; &apos;d&apos;");
  EXPECT_EQ(xml_escape(std::string("x\x01y\x1fz", 5)), "x?y?z");
  EXPECT_EQ(xml_escape("tab\tok \xC3\x97"), "tab\tok \xC3\x97");  // UTF-8 passes through
}

TEST(HeatmapSvgTest, OneLayerTwoExperts) {
  ExpertLoadStats s = stats_from_rows({{3, 9}}, {1});
  const std::string svg = render_expert_heatmap_svg(s, {});
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(cell_fills(svg), (std::vector<std::string>{kStart, kEnd}));
  EXPECT_CONTAINS(svg, ">1.50</text>");  // max/mean of the row
  EXPECT_CONTAINS(svg, ">max/mean</text>");
  EXPECT_CONTAINS(svg, ">9 (max)</text>");
  EXPECT_CONTAINS(svg, ">3 (min)</text>");
  EXPECT_CONTAINS(svg, "text-anchor=\"end\" font-size=\"12\">1</text>");  // the layer id
  EXPECT_CONTAINS(svg, "Expert load: tokens per expert");
  EXPECT_CONTAINS(svg, "1 MoE layer \xC3\x97 2 experts");
}

TEST(HeatmapSvgTest, MinAndMaxCellsGetTheColormapEnds) {
  std::vector<std::vector<int64_t>> rows = {
      {5, 7, 100, 3, 9, 12, 40, 8}, {6, 6, 6, 2, 6, 6, 6, 6}, {1, 1, 1, 1, 1, 1, 1, 450}};
  ExpertLoadStats s = stats_from_rows(rows, {4, 7, 9});
  const std::string svg = render_expert_heatmap_svg(s, {});
  EXPECT_EQ(xml_problem(svg), "");
  std::vector<std::string> fills = cell_fills(svg);
  ASSERT_EQ(fills.size(), 3u * 8u);
  // One scale for all cells, [1, 450]: the seven 1s of the last row get the start color.
  EXPECT_EQ(fills[2 * 8 + 0], kStart);
  EXPECT_EQ(fills[2 * 8 + 7], kEnd);
  EXPECT_EQ(std::count(fills.begin(), fills.end(), kEnd), 1);
  EXPECT_EQ(std::count(fills.begin(), fills.end(), kStart), 7);
  EXPECT_NE(fills[0 * 8 + 2], kStart);  // 100 is above the minimum
  for (const char* label : {">4</text>", ">7</text>", ">9</text>"}) EXPECT_CONTAINS(svg, label);
}

TEST(HeatmapSvgTest, PerRowImbalanceAndZeroRows) {
  auto z = ExpertLoadStats::create({0, 1, 2}, 2);
  ASSERT_TRUE(z.ok());
  const int64_t a[2] = {1, 3}, b[2] = {2, 2};
  z->record_step(0, a, 0, 0);
  z->record_step(1, b, 0, 0);  // layer 2: no tokens
  for (Opt::Normalize n : {Opt::Normalize::kNone, Opt::Normalize::kLayer}) {
    Opt o;
    o.normalize = n;
    const std::string svg = render_expert_heatmap_svg(z.value(), o);
    EXPECT_EQ(xml_problem(svg), "");
    EXPECT_CONTAINS(svg, ">1.50</text>");
    EXPECT_CONTAINS(svg, ">1.00</text>");
    EXPECT_CONTAINS(svg, ">-</text>");  // the all-zero row
    EXPECT_EQ(cell_fills(svg).size(), 6u);
  }
}

TEST(HeatmapSvgTest, PerLayerNormalisationMakesRowsComparable) {
  ExpertLoadStats s = stats_from_rows({{1, 3}, {10, 30}, {40, 40}});
  Opt o;
  o.normalize = Opt::Normalize::kLayer;
  const std::string svg = render_expert_heatmap_svg(s, o);
  EXPECT_EQ(xml_problem(svg), "");
  std::vector<std::string> f = cell_fills(svg);
  ASSERT_EQ(f.size(), 6u);
  // Rows divided by their means: {0.5, 1.5}, {0.5, 1.5}, {1, 1}; scale [0.5, 1.5].
  EXPECT_EQ(f[0], kStart);
  EXPECT_EQ(f[1], kEnd);
  EXPECT_EQ(f[2], kStart);
  EXPECT_EQ(f[3], kEnd);
  EXPECT_EQ(f[4], kMid);
  EXPECT_EQ(f[5], kMid);
  EXPECT_CONTAINS(svg, "load / layer mean");
  EXPECT_CONTAINS(svg, ">1.50 (max)</text>");
  EXPECT_CONTAINS(svg, ">0.50 (min)</text>");
  EXPECT_CONTAINS(svg, ">1 (balanced)</text>");
  // Without normalisation the big rows dominate the scale.
  f = cell_fills(render_expert_heatmap_svg(s, {}));
  EXPECT_EQ(f[0], kStart);
  EXPECT_NE(f[1], kEnd);
  EXPECT_EQ(f[4], kEnd);
}

TEST(HeatmapSvgTest, AllEqualValuesGetTheMiddleColor) {
  ExpertLoadStats s = stats_from_rows({{5, 5, 5}});
  std::vector<std::string> f = cell_fills(render_expert_heatmap_svg(s, {}));
  EXPECT_EQ(f, (std::vector<std::string>{kMid, kMid, kMid}));
  // All zero: no tokens anywhere, on both scales.
  auto z = ExpertLoadStats::create({0}, 2);
  ASSERT_TRUE(z.ok());
  for (Opt::Scale sc : {Opt::Scale::kLinear, Opt::Scale::kLog}) {
    Opt o;
    o.scale = sc;
    const std::string svg = render_expert_heatmap_svg(z.value(), o);
    EXPECT_EQ(xml_problem(svg), "");
    EXPECT_EQ(cell_fills(svg), (std::vector<std::string>{kMid, kMid}));
  }
}

TEST(HeatmapSvgTest, EmaValues) {
  // decay 0: ema = the last step {0, 2}, totals = {10, 2}.
  auto s = ExpertLoadStats::create({0}, 2, 0.0);
  ASSERT_TRUE(s.ok());
  const int64_t a[2] = {10, 0}, b[2] = {0, 2};
  s->record_step(0, a, 0, 0);
  s->record_step(0, b, 0, 0);
  EXPECT_EQ(cell_fills(render_expert_heatmap_svg(s.value(), {})), (std::vector<std::string>{kEnd, kStart}));
  Opt o;
  o.value = Opt::Value::kEma;
  const std::string svg = render_expert_heatmap_svg(s.value(), o);
  EXPECT_EQ(cell_fills(svg), (std::vector<std::string>{kStart, kEnd}));
  EXPECT_CONTAINS(svg, "tokens per step (EMA)");
  EXPECT_CONTAINS(svg, ">2.00</text>");  // imbalance of the plotted (EMA) row
}

TEST(HeatmapSvgTest, LogScale) {
  ExpertLoadStats s = stats_from_rows({{0, 1, 10, 100}});
  Opt o;
  o.scale = Opt::Scale::kLog;
  const std::string svg = render_expert_heatmap_svg(s, o);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(cell_fills(svg), (std::vector<std::string>{kStart, kStart, kMid, kEnd}));
  EXPECT_CONTAINS(svg, "tokens (log scale)");
  EXPECT_CONTAINS(svg, ">1 (min &gt; 0)</text>");
  EXPECT_CONTAINS(svg, ">100 (max)</text>");
}

TEST(HeatmapSvgTest, DeepSeekV3Shape) {
  // 61 model layers, the first 3 dense (absent), 256 experts, one hot expert per layer.
  std::vector<int> ids;
  std::vector<std::vector<int64_t>> rows;
  for (int l = 3; l < 61; ++l) {
    ids.push_back(l);
    std::vector<int64_t> r(256);
    for (int e = 0; e < 256; ++e) r[static_cast<size_t>(e)] = 1000 + (l * 131 + e * 17) % 977;
    r[static_cast<size_t>(l)] = 20000;
    rows.push_back(r);
  }
  rows[10][7] = 50000;  // the global max: layer 13, expert 7
  rows[20][100] = 3;    // the global min: layer 23, expert 100
  ExpertLoadStats s = stats_from_rows(rows, ids);
  for (Opt::Normalize n : {Opt::Normalize::kNone, Opt::Normalize::kLayer}) {
    for (Opt::Scale sc : {Opt::Scale::kLinear, Opt::Scale::kLog}) {
      Opt o;
      o.normalize = n;
      o.scale = sc;
      const std::string svg = render_expert_heatmap_svg(s, o);
      EXPECT_EQ(xml_problem(svg), "");
      const std::vector<std::string> f = cell_fills(svg);
      ASSERT_EQ(f.size(), 58u * 256u);
      if (n == Opt::Normalize::kNone) {
        EXPECT_EQ(f[10 * 256 + 7], kEnd);
        EXPECT_EQ(f[20 * 256 + 100], kStart);
      }
      // Every layer id labelled; expert labels every 8th (4 px cells).
      for (int l : ids) EXPECT_CONTAINS(svg, "text-anchor=\"end\" font-size=\"9\">" + std::to_string(l) + "</text>");
      EXPECT_CONTAINS(svg, "font-size=\"10\">248</text>");
      EXPECT_EQ(count(svg, "font-size=\"10\">7</text>"), 0u);
      EXPECT_EQ(count(svg, "<line "), 32u + 2u + (n == Opt::Normalize::kLayer ? 1u : 0u));  // expert + legend ticks
      EXPECT_CONTAINS(svg, "expert (every 8th labelled)");
      EXPECT_CONTAINS(svg, "58 MoE layers \xC3\x97 256 experts");
    }
  }
}

TEST(HeatmapSvgTest, TitleIsEscaped) {
  ExpertLoadStats s = stats_from_rows({{1, 2}});
  Opt o;
  o.title = "<script>alert('x')</script> & \"q\" \x01";
  const std::string svg = render_expert_heatmap_svg(s, o);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_CONTAINS(svg, "&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt; &amp; &quot;q&quot; ?");
  EXPECT_EQ(svg.find("<script"), std::string::npos);
}

TEST(HeatmapSvgTest, WriterNamesThePathOnFailure) {
  moe::testing::ScopedTempDir dir("heatmap");
  ExpertLoadStats s = stats_from_rows({{1, 2}});
  ASSERT_TRUE(write_expert_heatmap_svg(s, {}, dir.file("h.svg")).ok());
  EXPECT_EQ(moe::testing::read_file(dir.file("h.svg")), render_expert_heatmap_svg(s, {}));
  const std::string bad = dir.file("missing/dir/h.svg");
  Status st = write_expert_heatmap_svg(s, {}, bad);
  EXPECT_FALSE(st.ok());
  EXPECT_CONTAINS(st.message(), bad);
}

TEST(XmlCheckerTest, CatchesBrokenDocuments) {
  EXPECT_EQ(xml_problem("<svg><g></g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(xml_problem("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(xml_problem("<svg a=\"x<y\"/>"), "");
  EXPECT_NE(xml_problem("<svg/><svg/>"), "");
}

}  // namespace
}  // namespace moe
