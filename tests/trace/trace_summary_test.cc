// moe trace summarize's analysis (src/moe/trace/trace_summary.h) on a hand-made trace of
// 2 ranks and 2 steps whose answers are computed by hand in the comments: time per rank
// by span, who waited on whom, bytes per link, hot experts, slowest steps; and its errors.
#include <gtest/gtest.h>

#include <string>

#include "moe/trace/trace_summary.h"

namespace moe {
namespace {

std::string span(const char* name, int pid, double ts, double dur, int step, int layer = -1, const char* ex = nullptr,
                 int tokens = -1) {
  std::string a = "{\"step\":" + std::to_string(step);
  if (layer >= 0) a += ",\"layer\":" + std::to_string(layer);
  if (ex) a += std::string(",\"exchange\":\"") + ex + "\"";
  if (tokens >= 0) a += ",\"tokens\":" + std::to_string(tokens);
  a += "}";
  return "{\"ph\":\"X\",\"name\":\"" + std::string(name) + "\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":0,\"ts\":" + std::to_string(ts) + ",\"dur\":" + std::to_string(dur) + ",\"args\":" + a + "}";
}
std::string bytes(int pid, int peer, double ts, long cumulative) {
  return "{\"ph\":\"C\",\"name\":\"bytes to rank " + std::to_string(peer) + "\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":0,\"ts\":" + std::to_string(ts) + ",\"args\":{\"bytes\":" + std::to_string(cumulative) + "}}";
}
std::string experts(int step, int layer, const std::string& tokens) {
  return "{\"ph\":\"i\",\"s\":\"p\",\"name\":\"experts\",\"pid\":0,\"tid\":0,\"ts\":1,\"args\":{\"step\":" +
         std::to_string(step) + ",\"layer\":" + std::to_string(layer) + ",\"tokens\":" + tokens + "}}";
}

// Times in microseconds.
std::string hand_trace() {
  const std::vector<std::string> ev = {
      // rank 0, step 0 (10 ms, 4 tokens)
      span("step", 0, 0, 10000, 0, -1, nullptr, 4),
      span("attention", 0, 100, 2000, 0, 0),
      span("moe", 0, 2200, 7000, 0, 0),
      span("router", 0, 2300, 500, 0, 0),
      span("dispatch", 0, 2900, 1500, 0, 0),
      span("wait", 0, 3000, 1000, 0, 0, "counts"),
      span("wait", 0, 4500, 200, 0, 0, "dispatch"),
      span("expert_compute", 0, 4800, 3000, 0, 0),
      span("wait", 0, 7900, 300, 0, 0, "combine"),
      span("combine", 0, 8300, 400, 0, 0),
      bytes(0, 1, 3500, 800), bytes(0, 0, 3500, 160), bytes(0, 1, 7850, 1440),
      experts(0, 0, "[3,1,0,4]"),
      // rank 0, step 1 (2 ms, 1 token)
      span("step", 0, 20000, 2000, 1, -1, nullptr, 1),
      span("wait", 0, 20500, 100, 1, -1, "dispatch"),
      bytes(0, 1, 20600, 1600),
      experts(1, 0, "[0,0,1,1]"),
      // rank 1, step 0 (9.5 ms, no tokens)
      span("step", 1, 0, 9500, 0, -1, nullptr, 0),
      span("moe", 1, 100, 9300, 0, 0),
      span("router", 1, 150, 100, 0, 0),
      span("dispatch", 1, 300, 4300, 0, 0),
      span("wait", 1, 350, 4000, 0, 0, "counts"),
      span("wait", 1, 4700, 50, 0, 0, "dispatch"),
      span("expert_compute", 1, 4800, 2000, 0, 0),
      span("wait", 1, 6900, 1000, 0, 0, "combine"),
      span("combine", 1, 8000, 200, 0, 0),
      bytes(1, 0, 4600, 400),
      // rank 1, step 1 (2.5 ms)
      span("step", 1, 20000, 2500, 1, -1, nullptr, 0),
      span("wait", 1, 20100, 1500, 1, -1, "dispatch"),
      bytes(1, 0, 20200, 480),
  };
  std::string s = "{\"traceEvents\":[";
  for (size_t i = 0; i < ev.size(); ++i) s += (i ? "," : "") + ev[i];
  return s + "],\"otherData\":{\"format\":\"moe-trace\",\"version\":1,\"ranks\":2,\"dropped_events\":[0,3]}}";
}

TEST(TraceSummary, HandComputedStep) {
  auto s = summarize_trace(hand_trace(), "hand.json", {0, 5});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->ranks, 2);
  EXPECT_EQ(s->steps, 2);
  EXPECT_EQ(s->dropped_events, (std::vector<int64_t>{0, 3}));
  ASSERT_EQ(s->slowest_steps.size(), 2u);
  EXPECT_EQ(s->slowest_steps[0].first, 0);
  EXPECT_DOUBLE_EQ(s->slowest_steps[0].second, 10.0);
  EXPECT_EQ(s->slowest_steps[1].first, 1);
  EXPECT_DOUBLE_EQ(s->slowest_steps[1].second, 2.5);

  const TraceStepSummary& st = s->selected;
  EXPECT_EQ(st.step, 0);
  EXPECT_DOUBLE_EQ(st.duration_ms, 10.0);
  EXPECT_EQ(st.slowest_rank, 0);
  ASSERT_EQ(st.ranks.size(), 2u);
  const TraceRankTimes& r0 = st.ranks[0];
  EXPECT_EQ(r0.tokens, 4);
  EXPECT_NEAR(r0.step_ms, 10.0, 1e-9);
  EXPECT_NEAR(r0.attention_ms, 2.0, 1e-9);
  EXPECT_NEAR(r0.router_ms, 0.5, 1e-9);
  EXPECT_NEAR(r0.dispatch_ms, 0.5, 1e-9);  // 1.5 - the 1.0 counts wait inside it
  EXPECT_NEAR(r0.expert_ms, 3.0, 1e-9);
  EXPECT_NEAR(r0.combine_ms, 0.4, 1e-9);
  EXPECT_NEAR(r0.wait_ms, 1.5, 1e-9);      // 1.0 + 0.2 + 0.3
  const TraceRankTimes& r1 = st.ranks[1];
  EXPECT_NEAR(r1.dispatch_ms, 0.3, 1e-9);  // 4.3 - 4.0
  EXPECT_NEAR(r1.wait_ms, 5.05, 1e-9);     // 4.0 + 0.05 + 1.0
  // counts: r0 waited 1.0, r1 4.0 -> r1 waited on r0 (4.0); dispatch: 0.2 vs 0.05 ->
  // r0 waited on r1 (0.2); combine: 0.3 vs 1.0 -> r1 waited on r0 (1.0).
  ASSERT_EQ(st.waits.size(), 2u);
  EXPECT_EQ(st.waits[0].waiter, 1);
  EXPECT_EQ(st.waits[0].waited_on, 0);
  EXPECT_NEAR(st.waits[0].ms, 5.0, 1e-9);
  EXPECT_EQ(st.waits[0].count, 2);
  EXPECT_EQ(st.waits[1].waiter, 0);
  EXPECT_EQ(st.waits[1].waited_on, 1);
  EXPECT_NEAR(st.waits[1].ms, 0.2, 1e-9);
  EXPECT_EQ(st.waits[1].count, 1);
  // Links of step 0: 0->0 160, 0->1 800 + 640, 1->0 400 (the step-1 counters excluded).
  ASSERT_EQ(st.links.size(), 3u);
  EXPECT_EQ(st.links[0].src, 0);
  EXPECT_EQ(st.links[0].dst, 0);
  EXPECT_EQ(st.links[0].bytes, 160);
  EXPECT_EQ(st.links[1].dst, 1);
  EXPECT_EQ(st.links[1].bytes, 1440);
  EXPECT_EQ(st.links[2].src, 1);
  EXPECT_EQ(st.links[2].bytes, 400);
  ASSERT_EQ(st.hot_experts.size(), 1u);
  EXPECT_EQ(st.hot_experts[0].layer, 0);
  EXPECT_EQ(st.hot_experts[0].expert, 3);
  EXPECT_EQ(st.hot_experts[0].tokens, 4);
  EXPECT_DOUBLE_EQ(st.hot_experts[0].share, 0.5);  // 4 of 8
}

TEST(TraceSummary, HandComputedAllSteps) {
  auto s = summarize_trace(hand_trace(), "hand.json", {});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->selected.step, -1);
  const TraceStepSummary& a = s->all;
  EXPECT_DOUBLE_EQ(a.duration_ms, 12.5);  // 10 (rank 0) + 2.5 (rank 1)
  EXPECT_EQ(a.slowest_rank, 0);
  // Step 1 adds r1 waited on r0 for 1.5 ms (0.1 vs 1.5).
  ASSERT_EQ(a.waits.size(), 2u);
  EXPECT_NEAR(a.waits[0].ms, 6.5, 1e-9);
  EXPECT_EQ(a.waits[0].count, 3);
  ASSERT_EQ(a.links.size(), 3u);
  EXPECT_EQ(a.links[1].bytes, 1600);  // 0 -> 1: the last cumulative value
  EXPECT_EQ(a.links[2].bytes, 480);
  ASSERT_EQ(a.hot_experts.size(), 1u);
  EXPECT_EQ(a.hot_experts[0].expert, 3);
  EXPECT_EQ(a.hot_experts[0].tokens, 5);   // [3,1,1,5]
  EXPECT_DOUBLE_EQ(a.hot_experts[0].share, 0.5);
  const std::string text = format_trace_summary(s.value());
  EXPECT_NE(text.find("rank 1 waited on rank 0: 6.500 ms over 3 exchanges"), std::string::npos) << text;
  EXPECT_NE(text.find("0 -> 1: 1.6 kB (1600 bytes)"), std::string::npos) << text;
  EXPECT_NE(text.find("layer 0 expert 3: 5 tokens (50% of the layer's)"), std::string::npos) << text;
  EXPECT_NE(text.find("3 events dropped"), std::string::npos) << text;
}

TEST(TraceSummary, TopLimitsTheSlowestSteps) {
  auto s = summarize_trace(hand_trace(), "hand.json", {-1, 1});
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->slowest_steps.size(), 1u);
  EXPECT_EQ(s->slowest_steps[0].first, 0);
}

void expect_error(const std::string& text, const TraceSummaryOptions& o, const std::string& needle) {
  auto s = summarize_trace(text, "t.json", o);
  ASSERT_FALSE(s.ok()) << needle;
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
}

TEST(TraceSummary, Errors) {
  expect_error("{not json", {}, "t.json: not JSON");
  expect_error("{\"traceEvents\": 3}", {}, "no traceEvents array");
  expect_error("[1, 2]", {}, "no traceEvents array");
  expect_error("{\"traceEvents\": []}", {}, "no step spans");
  expect_error(hand_trace(), {7, 5}, "--step 7: t.json has no such step (steps 0..1)");
  expect_error(hand_trace(), {-1, 0}, "--top must be >= 1");
  expect_error("{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"step\",\"pid\":-4}]}", {}, "pid -4");
}

}  // namespace
}  // namespace moe
