// moe bench chaos's figures: the workload mix, the classification of what a request got
// (completed / errored / lost), the comparison with the fault-free outputs, recovery
// time, the /metrics fault counters, and the totals. Hand-computed cases.
#include <gtest/gtest.h>

#include <set>

#include "fake_openai_server.h"
#include "moe/serve_bench/chaos_report.h"
#include "moe/serve_bench/chaos_workload.h"

namespace moe::serve_bench {
namespace {

TEST(ChaosWorkload, EightConsecutiveRequestsCoverEveryCombination) {
  const auto w = make_chaos_workload(10, 7, 100);
  ASSERT_EQ(w.size(), 10u);
  std::set<std::tuple<bool, bool, bool>> combos;
  for (int i = 0; i < 8; ++i) combos.insert({w[i].chat, w[i].stream, w[i].greedy});
  EXPECT_EQ(combos.size(), 8u);
  EXPECT_EQ(w[5].seed, 105);
  EXPECT_EQ(w[3].max_tokens, 7);
  EXPECT_EQ(w[1].endpoint(), "/v1/chat/completions");
  EXPECT_EQ(w[0].endpoint(), "/v1/completions");
}

TEST(ChaosWorkload, BodyCarriesSeedOnlyWhenSeeded) {
  const auto w = make_chaos_workload(8, 5, 0);
  const auto greedy = chaos_request_body(w[0], "m");
  EXPECT_EQ(greedy["temperature"], 0.0);
  EXPECT_FALSE(greedy.contains("seed"));
  EXPECT_EQ(greedy["prompt"], w[0].prompt);
  EXPECT_EQ(greedy["stream"], false);
  EXPECT_EQ(greedy["ignore_eos"], true);
  const auto seeded_chat_stream = chaos_request_body(w[7], "m");
  EXPECT_EQ(seeded_chat_stream["temperature"], 0.8);
  EXPECT_EQ(seeded_chat_stream["seed"], 7);
  EXPECT_EQ(seeded_chat_stream["stream"], true);
  EXPECT_EQ(seeded_chat_stream["messages"][0]["content"], w[7].prompt);
}

RawExchange streamed(std::vector<std::string> events, bool transport_ok = true) {
  RawExchange r;
  r.stream = true;
  r.connected = true;
  r.transport_ok = transport_ok;
  if (!transport_ok) r.transport_error = "Read";
  r.status = 200;
  for (size_t i = 0; i < events.size(); ++i) r.event_times_s.push_back(1.0 + static_cast<double>(i));
  r.events = std::move(events);
  return r;
}

TEST(ChaosClassify, StreamWithDoneIsCompletedWithTokenTimes) {
  const auto r = classify_exchange(streamed({R"({"choices":[{"text":"a"}]})", R"({"choices":[{"text":"b"}]})",
                                             R"({"choices":[{"text":"","finish_reason":"length"}]})", "[DONE]"}));
  EXPECT_EQ(r.outcome, Outcome::kCompleted);
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(r.token_times_s, (std::vector<double>{1.0, 2.0}));
}

TEST(ChaosClassify, StreamCutWithoutDoneIsLost) {
  const auto r = classify_exchange(streamed({R"({"choices":[{"text":"a"}]})"}, false));
  EXPECT_EQ(r.outcome, Outcome::kLost);
  EXPECT_EQ(r.text, "a");
  // An orderly end of the body without [DONE] is lost too.
  EXPECT_EQ(classify_exchange(streamed({R"({"choices":[{"text":"a"}]})"})).outcome, Outcome::kLost);
}

TEST(ChaosClassify, SseErrorEventIsErrored) {
  const auto r = classify_exchange(
      streamed({R"({"choices":[{"text":"a"}]})", R"({"error":{"message":"generation failed"}})", "[DONE]"}));
  EXPECT_EQ(r.outcome, Outcome::kErrored);
  EXPECT_NE(r.detail.find("generation failed"), std::string::npos);
}

TEST(ChaosClassify, NonStreamed) {
  RawExchange r;
  r.connected = true;
  r.transport_ok = true;
  r.status = 200;
  r.end_s = 2.5;
  r.body = R"({"choices":[{"text":"hello","finish_reason":"length"}]})";
  auto c = classify_exchange(r);
  EXPECT_EQ(c.outcome, Outcome::kCompleted);
  EXPECT_EQ(c.text, "hello");
  EXPECT_EQ(c.token_times_s, (std::vector<double>{2.5}));
  r.chat = true;
  r.body = R"({"choices":[{"message":{"role":"assistant","content":"hi"}}]})";
  c = classify_exchange(r);
  EXPECT_EQ(c.outcome, Outcome::kCompleted);
  EXPECT_EQ(c.text, "hi");
  // 200 with an empty body (the issue's silent failure): lost.
  r.body.clear();
  EXPECT_EQ(classify_exchange(r).outcome, Outcome::kLost);
  // 200 then a cut body (curl exit 18): lost.
  r.body = R"({"choices":[{"mess)";
  r.transport_ok = false;
  r.transport_error = "Read";
  EXPECT_EQ(classify_exchange(r).outcome, Outcome::kLost);
  // A proper 5xx error: errored.
  r.status = 503;
  r.transport_ok = true;
  r.body = R"({"error":{"message":"engine failed"}})";
  EXPECT_EQ(classify_exchange(r).outcome, Outcome::kErrored);
}

TEST(ChaosClassify, RefusedConnectionIsLostAndRefused) {
  RawExchange r;
  r.transport_error = "Connection";
  const auto c = classify_exchange(r);
  EXPECT_EQ(c.outcome, Outcome::kLost);
  EXPECT_TRUE(c.refused);
  r.transport_error = "Read";
  EXPECT_FALSE(classify_exchange(r).refused);
}

TEST(ChaosClient, StreamedRequestAgainstAFakeServer) {
  ChaosRequest req = make_chaos_workload(4, 3, 0)[2];  // completions, streamed, greedy
  ASSERT_TRUE(req.stream);
  std::string gone_url;
  {
    moe::testing::FakeOpenAiServer server({.ttft_ms = 5, .itl_ms = 1});
    gone_url = server.url();
    ChaosProgress progress;
    const auto r = send_chaos_request(server.url(), req, "fake-model", 10, std::chrono::steady_clock::now(), &progress);
    EXPECT_EQ(r.outcome, Outcome::kCompleted) << r.detail;
    EXPECT_EQ(r.text, "t0 t1 t2 ");
    EXPECT_EQ(r.token_times_s.size(), 3u);
    EXPECT_GT(progress.last_byte_ns.load(), 0);
    EXPECT_EQ(progress.delivered_tokens.load(), 4);  // 3 text chunks and [DONE]
    // A non-streamed request does not count (and an event stream is not the JSON body
    // it expects: no completion, lost).
    req.stream = false;
    const auto whole = send_chaos_request(server.url(), req, "fake-model", 10, std::chrono::steady_clock::now(),
                                          &progress);
    EXPECT_EQ(whole.outcome, Outcome::kLost);
    EXPECT_EQ(progress.delivered_tokens.load(), 4);
  }
  // Nothing listens on the port once the server is gone: lost, refused.
  const auto gone = send_chaos_request(gone_url, req, "fake-model", 10, std::chrono::steady_clock::now(), nullptr);
  EXPECT_EQ(gone.outcome, Outcome::kLost);
  EXPECT_TRUE(gone.refused) << gone.detail;
  // A proper error status: errored.
  moe::testing::FakeOpenAiServer failing({.fail_status = 503});
  const auto e = send_chaos_request(failing.url(), req, "fake-model", 10, std::chrono::steady_clock::now(), nullptr);
  EXPECT_EQ(e.outcome, Outcome::kErrored);
  EXPECT_EQ(e.http_status, 503);
}

TEST(ChaosReport, CountsCompareWithTheReferencePerSamplingKind) {
  const auto w = make_chaos_workload(8, 4, 0);  // 0-3 greedy, 4-7 seeded
  std::vector<std::string> reference = {"a", "b", "c", "d", "e", "f", "g", "h"};
  std::vector<ChaosResult> results(8);
  for (int i = 0; i < 8; ++i) {
    results[i].outcome = Outcome::kCompleted;
    results[i].text = reference[i];
  }
  results[1].text = "B";                  // greedy, differs
  results[2].outcome = Outcome::kLost;    // greedy, lost
  results[2].refused = true;
  results[5].outcome = Outcome::kErrored; // seeded, errored
  results[6].text = "G";                  // seeded, differs
  const ChaosCounts c = count_results(w, results, reference);
  EXPECT_EQ(c.requests, 8);
  EXPECT_EQ(c.completed, 6);
  EXPECT_EQ(c.lost, 1);
  EXPECT_EQ(c.refused, 1);
  EXPECT_EQ(c.errored, 1);
  EXPECT_EQ(c.greedy_completed, 3);
  EXPECT_EQ(c.greedy_equal, 2);
  EXPECT_EQ(c.seeded_completed, 3);
  EXPECT_EQ(c.seeded_equal, 2);
}

TEST(ChaosReport, RecoveryIsTheEndOfTheLongestSilenceAfterTheFault) {
  // Tokens every 0.1 s, fault at 1.05, one in flight at 1.06, nothing until 4.05.
  std::vector<double> t = {0.9, 1.0, 1.06, 4.05, 4.15, 4.25};
  auto r = recovery_from_tokens(t, 1.05, 0.25);
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(*r, 3.0, 1e-9);
  // No silence worth the name: 0.
  r = recovery_from_tokens({1.1, 1.2, 1.3}, 1.0, 0.25);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, 0.0);
  // The silence starts at the fault itself.
  r = recovery_from_tokens({0.5, 3.0}, 1.0, 0.25);
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(*r, 2.0, 1e-9);
  // Nothing after the fault: never recovered.
  EXPECT_FALSE(recovery_from_tokens({0.5, 0.9}, 1.0, 0.25).has_value());
}

TEST(ChaosReport, RecoveryCountsCompletedRequestsAndNeedsTheLastOneServed) {
  auto result = [](Outcome o, std::vector<double> tokens, double end) {
    ChaosResult r;
    r.outcome = o;
    r.token_times_s = std::move(tokens);
    r.end_s = end;
    return r;
  };
  // Fault at 1.0; a cut request's tokens at 1.01 do not count; the pause ends at 4.0.
  std::vector<ChaosResult> results = {result(Outcome::kCompleted, {0.5, 0.9}, 0.9),
                                      result(Outcome::kLost, {1.01}, 1.02),
                                      result(Outcome::kCompleted, {0.95, 4.0, 4.1}, 4.1)};
  auto r = recovery_from_results(results, 1.0, 0.25);
  ASSERT_TRUE(r.has_value());
  EXPECT_NEAR(*r, 3.0, 1e-9);
  // Buffered tokens flushed after the pause, but the last request to finish failed: the
  // server did not recover.
  results.push_back(result(Outcome::kErrored, {}, 9.0));
  EXPECT_FALSE(recovery_from_results(results, 1.0, 0.25).has_value());
  EXPECT_FALSE(recovery_from_results({}, 1.0, 0.25).has_value());
}

TEST(ChaosReport, FaultMetricsSumLabelsAndSkipOthers) {
  const std::string text =
      "# HELP moe:worker_failures_total Worker group failures.\n"
      "# TYPE moe:worker_failures_total counter\n"
      "moe:worker_failures_total 2\n"
      "moe:replayed_requests_total 5\n"
      "moe:degraded_tokens_total{layer=\"0\"} 3\n"
      "moe:degraded_tokens_total{layer=\"1\"} 4.5\n"
      "moe:recovery_seconds_bucket{le=\"1\"} 1\n"
      "moe:recovery_seconds_bucket{le=\"+Inf\"} 2\n"
      "moe:recovery_seconds_sum 3.5\n"
      "moe:recovery_seconds_count 2\n"
      "moe:failovers_total 1\n"
      "moe:lost_experts 0\n"
      "moe:generation_tokens_total 100\n";
  const auto m = parse_fault_metrics(text);
  EXPECT_EQ(m.size(), 7u);
  EXPECT_EQ(m.at("moe:failovers_total"), 1);
  EXPECT_EQ(m.at("moe:lost_experts"), 0);
  EXPECT_EQ(m.at("moe:recovery_seconds_sum"), 3.5);
  EXPECT_EQ(m.at("moe:worker_failures_total"), 2);
  EXPECT_EQ(m.at("moe:replayed_requests_total"), 5);
  EXPECT_EQ(m.at("moe:degraded_tokens_total"), 7.5);
  EXPECT_EQ(m.at("moe:recovery_seconds_count"), 2);
  EXPECT_EQ(m.count("moe:generation_tokens_total"), 0u);
}

TEST(ChaosReport, SummarySeparatesFrontEndKillsAndTakesRecoveryPercentiles) {
  const auto w = make_chaos_workload(2, 4, 0);
  const std::vector<std::string> reference = {"x", "y"};
  auto trial = [&](bool front_end, std::optional<double> recovery, bool hang, int lost) {
    ChaosTrial t;
    t.fault = "kill";
    t.fault_at_s = 1;
    t.target = front_end ? "front end" : "rank 0";
    t.front_end = front_end;
    t.recovery_s = recovery;
    t.hang = hang;
    t.results.resize(2);
    for (int i = 0; i < 2; ++i) {
      t.results[i].outcome = i < lost ? Outcome::kLost : Outcome::kCompleted;
      t.results[i].text = reference[i];
    }
    return t;
  };
  std::vector<ChaosTrial> trials = {trial(false, 1.0, false, 0), trial(false, 3.0, false, 1),
                                    trial(false, 2.0, true, 0), trial(true, std::nullopt, false, 2)};
  trials[0].fault_metrics = {{"moe:recoveries_total", 1}};
  trials[1].fault_metrics = {{"moe:recoveries_total", 2}, {"moe:replayed_requests_total", 4}};
  trials[2].fault_metrics = {{"moe:failovers_total", 1}, {"moe:degraded_tokens_total", 17}};
  trials.push_back(ChaosTrial{});
  trials.back().setup_error = "did not start";
  const ChaosSummary s = summarize(trials, w, reference);
  EXPECT_EQ(s.trials, 5);
  EXPECT_EQ(s.setup_errors, 1);
  EXPECT_EQ(s.front_end_trials, 1);
  EXPECT_EQ(s.rank_faults.requests, 6);
  EXPECT_EQ(s.rank_faults.lost, 1);
  EXPECT_EQ(s.rank_faults.greedy_equal, 5);
  EXPECT_EQ(s.front_end_kills.lost, 2);
  EXPECT_EQ(s.hangs, 1);
  EXPECT_EQ(s.recovered, 3);
  EXPECT_DOUBLE_EQ(s.recovery_p50_s, 2.0);
  EXPECT_DOUBLE_EQ(s.recovery_max_s, 3.0);
  EXPECT_EQ(s.fault_metrics, (std::map<std::string, double>{{"moe:degraded_tokens_total", 17},
                                                             {"moe:failovers_total", 1},
                                                             {"moe:recoveries_total", 3},
                                                             {"moe:replayed_requests_total", 4}}));
  const auto j = chaos_json(trials, w, reference);
  EXPECT_EQ(j["totals"]["rank_faults"]["lost"], 1);
  EXPECT_EQ(j["trials"][3]["front_end"], true);
  EXPECT_TRUE(j["trials"][3]["recovery_s"].is_null());
  const std::string table = render_chaos_table(trials, w, reference);
  EXPECT_NE(table.find("setup failed: did not start"), std::string::npos);
  EXPECT_NE(table.find("hangs: 1"), std::string::npos);
  EXPECT_NE(table.find("p50 2.00 s, max 3.00 s"), std::string::npos);
  EXPECT_NE(table.find("moe:recoveries_total 3 moe:replayed_requests_total 4"), std::string::npos) << table;
  // Per trial: how it came back and its degraded tokens.
  EXPECT_NE(table.find(" restart       -"), std::string::npos) << table;
  EXPECT_NE(table.find(" failover     17"), std::string::npos) << table;
}

}  // namespace
}  // namespace moe::serve_bench
