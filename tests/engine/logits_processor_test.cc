// Logits processing against an independent reference: /usr/bin/python3 + torch
// (tests/engine/logits_processor_ref.py, vLLM v1's formulas) on fixed logits: the
// processed logits (logit_bias, repetition / frequency / presence penalties), the
// logprobs (log_softmax of the raw logits, top-k descending), and the tokens the
// sampler draws after temperature + min_p + top_k + top_p (the kept set and their
// frequencies). Plus hand-computed cases and the replay contract.
#include "moe/engine/logits_processor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;

struct Case {
  std::vector<float> logits;
  std::vector<int> prompt, output;  // output: tokens generated so far (penalty state)
  SamplingParams sp;
};

json case_json(const Case& c) {
  return {{"logits", c.logits},
          {"prompt", c.prompt},
          {"output", c.output},
          {"bias", c.sp.logit_bias},
          {"repetition", c.sp.repetition_penalty},
          {"frequency", c.sp.frequency_penalty},
          {"presence", c.sp.presence_penalty},
          {"temperature", c.sp.temperature},
          {"min_p", c.sp.min_p},
          {"top_k", c.sp.top_k},
          {"top_p", c.sp.top_p}};
}

// Runs the torch reference on the cases; one JSON object per case.
json run_reference(const std::vector<Case>& cases) {
  json in = {{"cases", json::array()}};
  for (const Case& c : cases) in["cases"].push_back(case_json(c));
  const std::string dir = testing::make_temp_dir("logits_ref");
  testing::write_file(dir + "/in.json", in.dump());
  const auto r = testing::run_command("/usr/bin/python3 " + testing::source_dir() +
                                      "/tests/engine/logits_processor_ref.py < " + dir + "/in.json > " + dir +
                                      "/out.json");
  const std::string text = testing::read_file(dir + "/out.json");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 0) << "the torch reference failed (needs /usr/bin/python3 with torch): " << r.output;
  json out = json::parse(text, nullptr, false);
  EXPECT_TRUE(out.is_array() && out.size() == cases.size()) << r.output << text;
  return out.is_array() ? out : json::array();
}

// The reference for `cases`, with every case the suite asks about computed in one
// Python run (torch's import dominates): cases are keyed by their JSON.
json reference(const std::vector<Case>& cases);

std::vector<float> wavy(int n, double a, double b) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(a * std::sin(b * i + 0.3) + 0.1 * i);
  return v;
}

std::vector<Case> penalty_cases() {
  std::vector<Case> cases;
  Case c;
  c.logits = wavy(16, 3.0, 1.3);
  c.prompt = {0, 3, 3, 7, 12};
  c.output = {3, 5, 5, 5, 9, 14};
  c.sp.repetition_penalty = 1.7f;  // positive and negative logits, prompt-only and output-only tokens
  c.sp.frequency_penalty = 0.4f;
  c.sp.presence_penalty = -0.6f;
  c.sp.logit_bias = {{5, 2.5f}, {11, -100.0f}, {2, 1.0f}};
  cases.push_back(c);
  c.sp = {};  // each alone
  c.sp.repetition_penalty = 0.5f;  // < 1 favours repeats
  cases.push_back(c);
  c.sp = {};
  c.sp.frequency_penalty = -2.0f;
  cases.push_back(c);
  c.sp = {};
  c.sp.presence_penalty = 2.0f;
  cases.push_back(c);
  c.sp = {};
  c.sp.logit_bias = {{0, 100.0f}};
  cases.push_back(c);
  return cases;
}

std::vector<Case> sampler_cases();
std::vector<Case> logprob_cases();

json reference(const std::vector<Case>& cases) {
  static const std::map<std::string, json> by_case = [] {
    std::vector<Case> all = penalty_cases();
    for (auto* more : {&sampler_cases, &logprob_cases}) {
      const std::vector<Case> m = more();
      all.insert(all.end(), m.begin(), m.end());
    }
    const json ref = run_reference(all);
    std::map<std::string, json> out;
    for (size_t i = 0; i < all.size() && i < ref.size(); ++i) out[case_json(all[i]).dump()] = ref[i];
    return out;
  }();
  json out = json::array();
  for (const Case& c : cases) {
    auto it = by_case.find(case_json(c).dump());
    EXPECT_NE(it, by_case.end()) << "a case missing from the suite's reference run";
    if (it != by_case.end()) out.push_back(it->second);
  }
  return out;
}

TEST(LogitsProcessorTest, BiasAndPenaltiesMatchTorchReference) {
  const std::vector<Case> cases = penalty_cases();
  const json ref = reference(cases);
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    LogitsProcessor p(cases[i].sp, cases[i].prompt);
    for (int t : cases[i].output) p.accept(t);
    std::vector<float> got = cases[i].logits;
    p.apply(got.data());
    const auto want = ref[i]["processed"].get<std::vector<double>>();
    ASSERT_EQ(want.size(), got.size());
    for (size_t t = 0; t < got.size(); ++t) EXPECT_NEAR(got[t], want[t], 1e-5) << "case " << i << " token " << t;
  }
}

TEST(LogitsProcessorTest, HandComputedRepetitionDividesPositiveMultipliesNegative) {
  SamplingParams sp;
  sp.repetition_penalty = 2.0f;
  LogitsProcessor p(sp, {0});
  p.accept(1);
  float logits[3] = {4.0f, -3.0f, 5.0f};
  p.apply(logits);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);   // prompt token, positive: divided
  EXPECT_FLOAT_EQ(logits[1], -6.0f);  // output token, negative: multiplied
  EXPECT_FLOAT_EQ(logits[2], 5.0f);   // untouched
  LogitsProcessor off(SamplingParams{}, {0, 1});
  EXPECT_FALSE(off.active());
}

std::vector<Case> logprob_cases() { return {Case{.logits = wavy(40, 4.0, 0.9), .prompt = {0}, .output = {}, .sp = {}}}; }

TEST(LogitsProcessorTest, LogprobsMatchTorchLogSoftmax) {
  const std::vector<float> logits = wavy(40, 4.0, 0.9);
  const json ref = reference(logprob_cases());
  ASSERT_EQ(ref.size(), 1u);
  const auto want = ref[0]["logprobs"].get<std::vector<double>>();
  for (int token : {0, 7, 39}) {
    const TokenLogprob lp = token_logprob(logits.data(), 40, token, 5);
    EXPECT_EQ(lp.token_id, token);
    EXPECT_NEAR(lp.logprob, want[static_cast<size_t>(token)], 1e-5);
    ASSERT_EQ(lp.top.size(), 5u);
    std::vector<int> order(40);
    for (int i = 0; i < 40; ++i) order[static_cast<size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return want[static_cast<size_t>(a)] > want[static_cast<size_t>(b)]; });
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(lp.top[k].first, order[k]) << k;
      EXPECT_NEAR(lp.top[k].second, want[static_cast<size_t>(order[k])], 1e-5);
    }
  }
  EXPECT_TRUE(token_logprob(logits.data(), 40, 3, 0).top.empty());
  // Ties: the lower id first.
  const float tie[4] = {1.0f, 2.0f, 2.0f, 0.0f};
  const TokenLogprob t = token_logprob(tie, 4, 0, 3);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 2);
  EXPECT_EQ(t.top[2].first, 0);
}

TEST(LogitsProcessorTest, PromptLogprobsRowsPredictTheNextPromptToken) {
  const int vocab = 6;
  std::vector<float> rows;  // 3 rows, positions 2..4 of a 5-token prompt
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> w = wavy(vocab, 1.0 + r, 0.7);
    rows.insert(rows.end(), w.begin(), w.end());
  }
  const std::vector<int> prompt = {1, 4, 2, 5, 0};
  std::vector<TokenLogprob> out;
  add_prompt_logprobs(rows.data(), vocab, prompt, /*start=*/2, /*n=*/3, 2, &out);
  ASSERT_EQ(out.size(), 2u);  // position 4's row predicts past the prompt: ignored
  EXPECT_EQ(out[0].token_id, 5);
  EXPECT_NEAR(out[0].logprob, token_logprob(rows.data(), vocab, 5, 0).logprob, 1e-6);
  EXPECT_EQ(out[1].token_id, 0);
  EXPECT_NEAR(out[1].logprob, token_logprob(rows.data() + vocab, vocab, 0, 0).logprob, 1e-6);
  EXPECT_EQ(out[1].top.size(), 2u);
  out.clear();
  add_prompt_logprobs(rows.data(), vocab, prompt, 0, 1, 0, &out);
  ASSERT_EQ(out.size(), 2u);  // the first token (nothing predicts it) and prompt[1]
  EXPECT_EQ(out[0].token_id, 1);
  EXPECT_EQ(out[0].logprob, 0.0f);
  EXPECT_TRUE(out[0].top.empty());
  EXPECT_EQ(out[1].token_id, 4);
}

// The sampler draws only the tokens the reference keeps, each about as often as its
// renormalised probability.
std::vector<Case> sampler_cases() {
  std::vector<Case> cases;
  Case c;
  c.logits = {2.0f, 1.6f, 0.3f, 1.1f, -0.5f, 0.9f, 1.8f, -2.0f, 0.1f, 1.35f};
  c.prompt = {0};
  for (auto [t, min_p, k, p] : std::vector<std::tuple<float, float, int, float>>{
           {1.0f, 0.3f, 0, 1.0f}, {0.7f, 0.1f, 5, 1.0f}, {1.3f, 0.05f, 0, 0.8f}, {1.0f, 0.2f, 4, 0.9f}}) {
    c.sp.temperature = t;
    c.sp.min_p = min_p;
    c.sp.top_k = k;
    c.sp.top_p = p;
    c.sp.presence_penalty = 0.5f;  // on the processed logits
    c.output = {0, 6};
    cases.push_back(c);
  }
  return cases;
}

TEST(LogitsProcessorTest, TemperatureMinPTopKTopPKeepTheReferenceSet) {
  const std::vector<Case> cases = sampler_cases();
  const json ref = reference(cases);
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto kept = ref[i]["kept"].get<std::vector<int>>();
    const auto probs = ref[i]["probs"].get<std::vector<double>>();
    std::map<int, int> seen;
    const int draws = 6000;
    for (int d = 0; d < draws; ++d) {  // one draw per seed, after the same penalty state
      RequestSampler s(cases[i].sp, 1000 * i + static_cast<uint64_t>(d), cases[i].prompt);
      for (int t : cases[i].output) s.replay(t);
      std::vector<float> l = cases[i].logits;
      ++seen[s.sample(l.data(), static_cast<int>(l.size()))];
    }
    for (const auto& [tok, n] : seen) {
      EXPECT_NE(std::find(kept.begin(), kept.end(), tok), kept.end()) << "case " << i << " drew dropped token " << tok;
    }
    for (size_t k = 0; k < kept.size(); ++k) {
      EXPECT_NEAR(static_cast<double>(seen[kept[k]]) / draws, probs[k], 0.025) << "case " << i << " token " << kept[k];
    }
  }
}

TEST(LogitsProcessorTest, MinPOneAtTemperatureOneIsGreedy) {
  const std::vector<float> logits = wavy(50, 2.0, 1.1);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 1.0f;
  RequestSampler s(sp, 5, {0});
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l = logits;
    ASSERT_EQ(s.sample(l.data(), 50), argmax(logits.data(), 50));
  }
}

// Greedy sees the bias and penalties; logprobs stay those of the raw logits.
TEST(LogitsProcessorTest, GreedyAfterBiasLogprobsOfRawLogits) {
  const std::vector<float> raw = {3.0f, 1.0f, 0.5f, -1.0f};
  SamplingParams sp;
  sp.temperature = 0;
  sp.logit_bias = {{3, 10.0f}};
  RequestSampler s(sp, 1, {0}, /*logprobs=*/2);
  std::vector<float> l = raw;
  TokenLogprob lp;
  EXPECT_EQ(s.sample(l.data(), 4, &lp), 3);
  EXPECT_EQ(lp.token_id, 3);
  EXPECT_NEAR(lp.logprob, token_logprob(raw.data(), 4, 3, 0).logprob, 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 0);  // of the raw logits
  EXPECT_EQ(lp.top[1].first, 1);
}

// replay() advances exactly as sample(): same random stream and penalty counts.
TEST(LogitsProcessorTest, ReplayContinuesAsTheUninterruptedRun) {
  const std::vector<float> logits = wavy(30, 1.5, 0.8);
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.frequency_penalty = 0.7f;
  sp.repetition_penalty = 1.3f;
  RequestSampler a(sp, 77, {1, 2});
  std::vector<int> full;
  for (int i = 0; i < 20; ++i) {
    std::vector<float> l = logits;
    full.push_back(a.sample(l.data(), 30));
  }
  RequestSampler b(sp, 77, {1, 2});
  for (int i = 0; i < 8; ++i) b.replay(full[static_cast<size_t>(i)]);
  for (int i = 8; i < 20; ++i) {
    std::vector<float> l = logits;
    EXPECT_EQ(b.sample(l.data(), 30), full[static_cast<size_t>(i)]) << i;
  }
}

}  // namespace
}  // namespace moe
