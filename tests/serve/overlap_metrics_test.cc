// The expert-parallel overlap on /metrics: moe:comm_overlap_ratio (gauge) and
// the two time counters it comes from, rendered from a ServiceSnapshot with
// hand-chosen values, and zero before any exchange.
#include <gtest/gtest.h>

#include "moe/serve/server_metrics.h"
#include "serve/metrics_text.h"

namespace moe::serve {
namespace {

TEST(OverlapMetricsTest, RatioAndTimesAreExposedWithTheirTypes) {
  ServerMetrics metrics;
  ServiceSnapshot s;
  testing::Exposition m = testing::parse_exposition(metrics.render(s));
  EXPECT_EQ(m.types.at("moe:comm_overlap_ratio"), "gauge");
  EXPECT_EQ(m.types.at("moe:ep_comm_wait_seconds_total"), "counter");
  EXPECT_EQ(m.types.at("moe:ep_exchange_seconds_total"), "counter");
  EXPECT_EQ(m.value("moe:comm_overlap_ratio"), 0.0);
  s.ep_comm_wait_seconds = 0.5;
  s.ep_exchange_seconds = 4.0;
  s.comm_overlap_ratio = 0.875;  // 1 - 0.5 / 4
  m = testing::parse_exposition(metrics.render(s));
  EXPECT_EQ(m.value("moe:comm_overlap_ratio"), 0.875);
  EXPECT_EQ(m.value("moe:ep_comm_wait_seconds_total"), 0.5);
  EXPECT_EQ(m.value("moe:ep_exchange_seconds_total"), 4.0);
}

}  // namespace
}  // namespace moe::serve
