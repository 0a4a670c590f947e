// Arrival schedule: vLLM's Poisson / gamma gaps with a fixed seed.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "contains_util.h"
#include "moe/serve_bench/schedule.h"

namespace sb = moe::serve_bench;

namespace {

struct GapStats {
  double mean = 0, cv = 0;
};

GapStats gap_stats(const std::vector<double>& t) {
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
  double m = 0;
  for (double g : gaps) m += g;
  m /= static_cast<double>(gaps.size());
  double v = 0;
  for (double g : gaps) v += (g - m) * (g - m);
  v /= static_cast<double>(gaps.size());
  return {m, std::sqrt(v) / m};
}

}  // namespace

TEST(ServeBenchSchedule, PoissonGapsHaveTheRequestedMean) {
  auto t = sb::request_arrivals(20001, 10.0, 1.0, 42);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 20001u);
  EXPECT_EQ((*t)[0], 0.0);  // the first request goes at once
  for (size_t i = 1; i < t->size(); ++i) ASSERT_GE((*t)[i], (*t)[i - 1]);
  GapStats s = gap_stats(*t);
  // 20000 exponential gaps: the mean's standard error is 0.7%; allow 3%.
  EXPECT_NEAR(s.mean, 0.1, 0.003);
  EXPECT_NEAR(s.cv, 1.0, 0.03);  // exponential: std = mean
}

TEST(ServeBenchSchedule, GammaBurstiness) {
  for (double b : {0.5, 4.0}) {
    auto t = sb::request_arrivals(20001, 5.0, b, 7);
    ASSERT_TRUE(t.ok());
    GapStats s = gap_stats(*t);
    EXPECT_NEAR(s.mean, 0.2, 0.2 * 0.04) << "burstiness " << b;
    EXPECT_NEAR(s.cv, 1.0 / std::sqrt(b), 0.05) << "burstiness " << b;  // gamma: cv = 1/sqrt(shape)
  }
}

TEST(ServeBenchSchedule, SeededAndInfinite) {
  auto a = sb::request_arrivals(100, 3.0, 1.0, 1);
  auto b = sb::request_arrivals(100, 3.0, 1.0, 1);
  auto c = sb::request_arrivals(100, 3.0, 1.0, 2);
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  auto inf = sb::request_arrivals(5, std::numeric_limits<double>::infinity(), 1.0, 0);
  EXPECT_EQ(*inf, std::vector<double>(5, 0.0));
  EXPECT_TRUE(sb::request_arrivals(0, 1.0, 1.0, 0)->empty());
}

TEST(ServeBenchSchedule, BadArguments) {
  EXPECT_CONTAINS(sb::request_arrivals(3, 0.0, 1.0, 0).status().message(), "--request-rate");
  EXPECT_CONTAINS(sb::request_arrivals(3, -1.0, 1.0, 0).status().message(), "--request-rate");
  EXPECT_CONTAINS(sb::request_arrivals(3, 1.0, 0.0, 0).status().message(), "--burstiness");
  EXPECT_TRUE(std::isinf(sb::parse_request_rate("inf").value()));
  EXPECT_DOUBLE_EQ(sb::parse_request_rate("2.5").value(), 2.5);
  EXPECT_CONTAINS(sb::parse_request_rate("fast").status().message(), "'fast'");
  EXPECT_FALSE(sb::parse_request_rate("0").ok());
  EXPECT_FALSE(sb::parse_request_rate("-3").ok());
  EXPECT_FALSE(sb::parse_request_rate("").ok());
  EXPECT_FALSE(sb::parse_request_rate("nan").ok());
}
