#include "moe/serve/rate_limiter.h"

#include <gtest/gtest.h>

namespace moe::serve {
namespace {

struct FakeClock {
  double now = 100.0;
  RateLimiter::Clock fn() {
    return [this] { return now; };
  }
};

TEST(RateLimiter, OffAllowsEverything) {
  RateLimiter rl({});
  EXPECT_FALSE(rl.enabled());
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(rl.try_acquire("k", 1 << 20).allowed);
}

TEST(RateLimiter, RequestsPerSecondBurstAndRefill) {
  FakeClock clock;
  RateLimiter rl({.requests_per_second = 2}, clock.fn());
  EXPECT_TRUE(rl.try_acquire("a", 0).allowed);
  EXPECT_TRUE(rl.try_acquire("a", 0).allowed);  // burst = 2
  auto d = rl.try_acquire("a", 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_seconds, 0.5, 1e-9);
  EXPECT_TRUE(rl.try_acquire("b", 0).allowed);  // keys are independent
  clock.now += 0.25;
  EXPECT_FALSE(rl.try_acquire("a", 0).allowed);
  clock.now += 0.25;
  EXPECT_TRUE(rl.try_acquire("a", 0).allowed);
  EXPECT_FALSE(rl.try_acquire("a", 0).allowed);
  clock.now += 100;  // refills to the burst, no further
  EXPECT_TRUE(rl.try_acquire("a", 0).allowed);
  EXPECT_TRUE(rl.try_acquire("a", 0).allowed);
  EXPECT_FALSE(rl.try_acquire("a", 0).allowed);
}

TEST(RateLimiter, FractionalRateHasBurstOfOne) {
  FakeClock clock;
  RateLimiter rl({.requests_per_second = 0.1}, clock.fn());
  EXPECT_TRUE(rl.try_acquire("a", 0).allowed);
  auto d = rl.try_acquire("a", 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_seconds, 10.0, 1e-9);
}

TEST(RateLimiter, TokensPerMinute) {
  FakeClock clock;
  RateLimiter rl({.tokens_per_minute = 600}, clock.fn());  // 10 tokens/s
  EXPECT_TRUE(rl.try_acquire("a", 500).allowed);
  auto d = rl.try_acquire("a", 200);  // 100 left, 100 short
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_seconds, 10.0, 1e-9);
  EXPECT_TRUE(rl.try_acquire("a", 100).allowed);  // a refused request is not charged
  clock.now += 20;
  EXPECT_TRUE(rl.try_acquire("a", 200).allowed);
}

TEST(RateLimiter, CostAboveCapacityWaitsForFullBucketThenOwes) {
  FakeClock clock;
  RateLimiter rl({.tokens_per_minute = 60}, clock.fn());  // 1 token/s, capacity 60
  EXPECT_TRUE(rl.try_acquire("a", 90).allowed);          // full bucket: passes, 30 in debt
  auto d = rl.try_acquire("a", 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_seconds, 31.0, 1e-9);
  clock.now += 31;
  EXPECT_TRUE(rl.try_acquire("a", 1).allowed);
}

TEST(RateLimiter, BothLimitsRetryAfterIsTheLonger) {
  FakeClock clock;
  RateLimiter rl({.requests_per_second = 1, .tokens_per_minute = 60}, clock.fn());
  EXPECT_TRUE(rl.try_acquire("a", 60).allowed);
  auto d = rl.try_acquire("a", 30);
  EXPECT_FALSE(d.allowed);
  EXPECT_NEAR(d.retry_after_seconds, 30.0, 1e-9);
}

std::string key(const char* prefix, int i) {
  std::string k = prefix;
  k += std::to_string(i);
  return k;
}

TEST(RateLimiter, ForgetsIdleKeys) {
  FakeClock clock;
  RateLimiter rl({.requests_per_second = 1}, clock.fn());
  for (int i = 0; i < 20000; ++i) EXPECT_TRUE(rl.try_acquire(key("k", i), 0).allowed);
  clock.now += 5;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(rl.try_acquire(key("new", i), 0).allowed);
  EXPECT_TRUE(rl.try_acquire("k0", 0).allowed);
  EXPECT_FALSE(rl.try_acquire("k0", 0).allowed);
}

}  // namespace
}  // namespace moe::serve
