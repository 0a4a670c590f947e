// The adaptive top-k / adaptive_requeue counters on /metrics (server_metrics.h): the
// snapshot's totals rendered as Prometheus counters.
#include <gtest/gtest.h>

#include "moe/serve/server_metrics.h"
#include "serve/metrics_text.h"

namespace moe::serve {
namespace {

TEST(AdaptiveKMetricsTest, SnapshotTotalsAreCounters) {
  ServerMetrics m;
  ServiceSnapshot s;
  s.adaptive_k_tokens = 17;
  s.adaptive_k_shed = 23;
  s.requeued = 5;
  const testing::Exposition e = testing::parse_exposition(m.render(s));
  EXPECT_EQ(e.value("moe:adaptive_k_tokens_total", {}), 17);
  EXPECT_EQ(e.value("moe:adaptive_k_shed_total", {}), 23);
  EXPECT_EQ(e.value("moe:requeued_assignments_total", {}), 5);
  EXPECT_EQ(e.types.at("moe:adaptive_k_shed_total"), "counter");
  EXPECT_EQ(e.types.at("moe:requeued_assignments_total"), "counter");
}

}  // namespace
}  // namespace moe::serve
