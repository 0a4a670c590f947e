// PhaseTimer on a ManualClock: phases in the order first marked, repeated names adding
// up, the total, and the milliseconds' format of the start-up line.
#include "moe/core/phase_timer.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(PhaseTimerTest, SummaryListsPhasesInOrderWithTheTotal) {
  ManualClock clock(100.0);
  PhaseTimer t(clock);
  clock.advance(0.0004);
  t.mark("config");
  clock.advance(0.123);
  t.mark("weight scan");
  clock.advance(0.0021);
  t.mark("rank agreement");
  clock.advance(0.4564);
  t.mark("huge-page copy");
  clock.advance(0.010);
  t.mark("rank agreement");  // adds to the first one, which keeps its place
  EXPECT_NEAR(t.seconds("rank agreement"), 0.0121, 1e-9);
  EXPECT_EQ(t.seconds("never"), 0);
  EXPECT_NEAR(t.total_seconds(), 0.5919, 1e-9);
  EXPECT_EQ(t.summary(), "config 0.4 ms, weight scan 123 ms, rank agreement 12 ms, huge-page copy 456 ms, total 592 ms");
}

TEST(PhaseTimerTest, NoPhaseYet) {
  ManualClock clock;
  PhaseTimer t(clock);
  clock.advance(1);
  EXPECT_EQ(t.summary(), "total 0.0 ms");  // up to the last mark: none
}

TEST(PhaseTimerTest, FormatMs) {
  EXPECT_EQ(PhaseTimer::format_ms(0), "0.0 ms");
  EXPECT_EQ(PhaseTimer::format_ms(0.00949), "9.5 ms");
  EXPECT_EQ(PhaseTimer::format_ms(0.0104), "10 ms");
  EXPECT_EQ(PhaseTimer::format_ms(3.5), "3500 ms");
}

}  // namespace
}  // namespace moe
