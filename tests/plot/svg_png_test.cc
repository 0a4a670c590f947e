// PNG charts (src/moe/plot/svg_png.h): the trace summary's chart and the expert-load
// heatmap rendered by librsvg, then decoded by libpng (independent of cairo's writer):
// the size, the colour of pixels inside known bars, the background; and the errors.
#include <gtest/gtest.h>
#include <png.h>

#include <string>
#include <vector>

#include "moe/plot/svg_png.h"
#include "moe/stats/expert_load_stats.h"
#include "moe/stats/heatmap_svg.h"
#include "moe/trace/trace_summary.h"
#include "test_util.h"

namespace moe {
namespace {

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Rgb at(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

Image decode_png(const std::string& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  Image out;
  if (!png_image_begin_read_from_file(&img, path.c_str())) {
    ADD_FAILURE() << path << ": " << img.message;
    return out;
  }
  img.format = PNG_FORMAT_RGB;
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  out.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.rgb.data(), 0, nullptr)) ADD_FAILURE() << path << ": " << img.message;
  return out;
}

Rgb hex(const char* h) {
  return {static_cast<uint8_t>(std::stoi(std::string(h + 1, 2), nullptr, 16)),
          static_cast<uint8_t>(std::stoi(std::string(h + 3, 2), nullptr, 16)),
          static_cast<uint8_t>(std::stoi(std::string(h + 5, 2), nullptr, 16))};
}

TEST(SvgPng, TraceChartBarsHaveTheirColours) {
  TraceSummary s;
  s.ranks = 2;
  s.steps = 1;
  s.all.ranks = {{.rank = 0, .step_ms = 10, .attention_ms = 2, .router_ms = 0.5, .dispatch_ms = 0.5, .expert_ms = 3,
                  .combine_ms = 0.4, .wait_ms = 1.5},
                 {.rank = 1, .step_ms = 9.5, .attention_ms = 1, .router_ms = 0.1, .dispatch_ms = 0.3, .expert_ms = 2,
                  .combine_ms = 0.2, .wait_ms = 5.05}};
  s.all.waits = {{1, 0, 5.0, 2}};
  const std::string path = testing::make_temp_dir("svg_png") + "/trace.png";
  ASSERT_TRUE(write_svg_as_png(render_trace_summary_svg(s), path).ok());
  const Image img = decode_png(path);
  ASSERT_EQ(img.width, kTraceChartWidth);
  ASSERT_GT(img.height, 100);
  const double max_ms = 1 + 0.1 + 0.3 + 2 + 0.2 + 5.05;  // rank 1's bar is the longest
  for (int r = 0; r < 2; ++r) {
    for (int seg : {0, 3, 5}) {  // attention, expert compute, wait
      const TraceChartBox b = trace_chart_bar(s.all.ranks[static_cast<size_t>(r)], r, seg, max_ms);
      ASSERT_GT(b.width, 4);
      const Rgb px = img.at(static_cast<int>(b.x + b.width / 2), static_cast<int>(b.y + b.height / 2));
      EXPECT_EQ(px, hex(kTraceColors[seg])) << "rank " << r << " segment " << seg;
    }
  }
  EXPECT_EQ(img.at(img.width - 3, 3), (Rgb{255, 255, 255}));  // background
}

TEST(SvgPng, HeatmapPngHasTheSvgSize) {
  auto created = ExpertLoadStats::create({0, 1}, 4);
  ASSERT_TRUE(created.ok());
  ExpertLoadStats& stats = created.value();
  const int64_t a[4] = {5, 0, 1, 2}, b[4] = {0, 0, 9, 1};
  stats.record_step(0, a, 0, 0);
  stats.record_step(1, b, 0, 0);
  const std::string svg = render_expert_heatmap_svg(stats, {});
  const std::string path = testing::make_temp_dir("svg_png") + "/heatmap.png";
  ASSERT_TRUE(write_svg_as_png(svg, path).ok());
  const Image img = decode_png(path);
  const size_t w = svg.find("width=\""), h = svg.find("height=\"");
  ASSERT_NE(w, std::string::npos);
  EXPECT_EQ(img.width, std::stoi(svg.substr(w + 7)));
  EXPECT_EQ(img.height, std::stoi(svg.substr(h + 8)));
}

TEST(SvgPng, Errors) {
  const std::string dir = testing::make_temp_dir("svg_png");
  Status bad = write_svg_as_png("<svg this is not xml", dir + "/bad.png");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find(dir + "/bad.png"), std::string::npos) << bad.message();
  Status no_size = write_svg_as_png("<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>", dir + "/nosize.png");
  EXPECT_EQ(no_size.code(), StatusCode::kInvalidArgument) << no_size.message();
  Status unwritable = write_svg_as_png(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"><rect width=\"10\" height=\"10\"/></svg>",
      "/nonexistent-dir/chart.png");
  EXPECT_EQ(unwritable.code(), StatusCode::kInternal);
  EXPECT_NE(unwritable.message().find("/nonexistent-dir/chart.png"), std::string::npos);
}

}  // namespace
}  // namespace moe
