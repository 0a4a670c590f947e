// Dataset loading: ShareGPT sampling/filtering as vLLM, trace replay with clamping,
// bad files; the real shared files and the shipped tokenizer when present.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/model/tokenizer.h"
#include "moe/serve_bench/dataset.h"
#include "test_util.h"

namespace sb = moe::serve_bench;
using moe::StatusCode;

namespace {

std::string fixture(const std::string& name) { return moe::testing::source_dir() + "/tests/serve_bench/data/" + name; }
std::string shared_prompts(const std::string& name) {
  return moe::testing::shared_data_dir() + "/prompts/" + name;
}

sb::DatasetOptions opts(int n) {
  sb::DatasetOptions o;
  o.num_prompts = n;
  o.seed = 0;
  return o;
}

std::map<int, sb::SampleRequest> by_source(const sb::Dataset& ds) {
  std::map<int, sb::SampleRequest> m;
  for (const auto& r : ds.requests) m[r.source_index] = r;
  return m;
}

}  // namespace

TEST(ServeBenchDataset, EstimateTokens) {
  EXPECT_EQ(sb::estimate_tokens(""), 1);  // BOS only
  EXPECT_EQ(sb::estimate_tokens("abc"), 3);  // ceil(3 / 2.25) + 1
  EXPECT_EQ(sb::estimate_tokens("abcdefghi"), 5);  // 9 / 2.25 = 4 exactly
  EXPECT_EQ(sb::estimate_tokens("abcdefghij", 5.0), 3);
}

TEST(ServeBenchDataset, SyntheticPromptHasOneWordPerToken) {
  EXPECT_EQ(sb::synthetic_prompt(4, 0), "the and to");
  EXPECT_EQ(sb::synthetic_prompt(2, 1), "and");
  EXPECT_EQ(sb::synthetic_prompt(1, 0), "the");  // never empty
  EXPECT_NE(sb::synthetic_prompt(50, 0), sb::synthetic_prompt(50, 1));
  const std::string p = sb::synthetic_prompt(300, 7);
  EXPECT_EQ(std::count(p.begin(), p.end(), ' '), 298);
}

TEST(ServeBenchDataset, ShareGptFiltersLikeVllm) {
  // c0: 15 + 14; c1: 18 + 128 (no gpt turn); c2 prompt 2 tokens (< 4); c3 prompt 556 (> 512);
  // c4 output 3 (< 4); c5 no conversations; c6: 19 + 60.
  auto ds = sb::load_dataset(fixture("sharegpt_small.json"), sb::DatasetFormat::kAuto, opts(3));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_FALSE(ds->has_arrivals);
  ASSERT_EQ(ds->requests.size(), 3u);
  auto m = by_source(*ds);
  ASSERT_EQ(m.size(), 3u);
  ASSERT_TRUE(m.count(0) && m.count(1) && m.count(6));
  EXPECT_EQ(m[0].prompt, "Hello there, how are you today?");
  EXPECT_EQ(m[0].prompt_len, 15);
  EXPECT_EQ(m[0].output_len, 14);
  EXPECT_EQ(m[1].prompt_len, 18);
  EXPECT_EQ(m[1].output_len, 128);
  EXPECT_EQ(m[6].prompt_len, 19);
  EXPECT_EQ(m[6].output_len, 60);
  EXPECT_LT(m[6].arrival_s, 0);
  EXPECT_CONTAINS(ds->summary, "7 conversations (1 without a human turn)");
  EXPECT_CONTAINS(ds->summary, "2 too short and 1 longer than 512");
  EXPECT_CONTAINS(ds->summary, "1 of them without a gpt turn: output length 128");
}

TEST(ServeBenchDataset, ShareGptRepeatsWhenShortAndIsSeeded) {
  auto ds = sb::load_dataset(fixture("sharegpt_small.json"), sb::DatasetFormat::kShareGpt, opts(7));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  ASSERT_EQ(ds->requests.size(), 7u);
  EXPECT_EQ(ds->requests[3].source_index, ds->requests[0].source_index);
  EXPECT_EQ(ds->requests[6].source_index, ds->requests[0].source_index);
  EXPECT_CONTAINS(ds->summary, "repeated to 7 requests");

  auto again = sb::load_dataset(fixture("sharegpt_small.json"), sb::DatasetFormat::kShareGpt, opts(3));
  auto same = sb::load_dataset(fixture("sharegpt_small.json"), sb::DatasetFormat::kShareGpt, opts(3));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again->requests[i].source_index, same->requests[i].source_index);
  std::set<std::vector<int>> orders;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    auto o = opts(3);
    o.seed = seed;
    auto d = sb::load_dataset(fixture("sharegpt_small.json"), sb::DatasetFormat::kShareGpt, o);
    std::vector<int> order;
    for (auto& r : d->requests) order.push_back(r.source_index);
    orders.insert(order);
  }
  EXPECT_GT(orders.size(), 1u);  // the seed shuffles
}

TEST(ServeBenchDataset, ShareGptFixedOutputLenAndSmallContext) {
  auto o = opts(10);
  o.fixed_output_len = 20;  // c4 is no longer too short (output is not checked)
  auto ds = sb::load_dataset(fixture("sharegpt_small.json"), sb::DatasetFormat::kShareGpt, o);
  ASSERT_TRUE(ds.ok());
  auto m = by_source(*ds);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_TRUE(m.count(4));
  for (auto& r : ds->requests) EXPECT_EQ(r.output_len, 20);

  auto small = opts(10);
  small.max_model_len = 40;  // c1 (18 + 10) fits, c6 (19 + 60) does not
  small.default_output_len = 10;
  auto s = sb::load_dataset(fixture("sharegpt_small.json"), sb::DatasetFormat::kShareGpt, small);
  ASSERT_TRUE(s.ok());
  auto sm = by_source(*s);
  EXPECT_EQ(sm.size(), 2u);
  EXPECT_TRUE(sm.count(0) && sm.count(1));
  for (auto& r : s->requests) EXPECT_LE(r.prompt_len + r.output_len, 40);
}

TEST(ServeBenchDataset, ShareGptCustomCounter) {
  auto o = opts(1);
  o.count_tokens = [](std::string_view t) { return static_cast<int>(std::count(t.begin(), t.end(), ' ')) + 2; };
  auto ds = sb::parse_sharegpt(R"([{"conversations":[{"from":"human","value":"a b c d"},
                                   {"from":"gpt","value":"w x y z q"}]}])",
                               "inline", o);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ(ds->requests[0].prompt_len, 5);
  EXPECT_EQ(ds->requests[0].output_len, 5);  // count - 1 (no BOS in generated text)
}

TEST(ServeBenchDataset, ShareGptBadFiles) {
  auto o = opts(1);
  EXPECT_EQ(sb::parse_sharegpt("{oops", "f.json", o).status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(sb::parse_sharegpt("{oops", "f.json", o).status().message(), "f.json: not valid JSON");
  EXPECT_CONTAINS(sb::parse_sharegpt(R"({"a":1})", "f.json", o).status().message(), "JSON array");
  EXPECT_CONTAINS(sb::parse_sharegpt(R"([{"conversations":[{"from":"gpt","value":"x"}]}])", "f.json", o)
                      .status()
                      .message(),
                  "no conversation with a human turn");
  auto tiny = sb::parse_sharegpt(R"([{"conversations":[{"from":"human","value":"x"}]}])", "f.json", o);
  EXPECT_EQ(tiny.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(tiny.status().message(), "no usable conversation (1 too short");
  auto zero = opts(0);
  EXPECT_CONTAINS(sb::parse_sharegpt("[]", "f.json", zero).status().message(), "--num-prompts must be >= 1");
  auto big_out = opts(1);
  big_out.fixed_output_len = 512;
  EXPECT_CONTAINS(sb::parse_sharegpt("[]", "f.json", big_out).status().message(), "--sharegpt-output-len");
}

TEST(ServeBenchDataset, TraceReplayAndClamp) {
  // rows: (10.0, 100, 20) (10.5, 600, 300) (12.0, 50, 5) (13.0, 30, 400); context 512
  auto ds = sb::load_dataset(fixture("trace_small.csv"), sb::DatasetFormat::kAuto, opts(4));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_TRUE(ds->has_arrivals);
  ASSERT_EQ(ds->requests.size(), 4u);
  const auto& r = ds->requests;
  EXPECT_DOUBLE_EQ(r[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(r[1].arrival_s, 0.5);
  EXPECT_DOUBLE_EQ(r[2].arrival_s, 2.0);
  EXPECT_DOUBLE_EQ(r[3].arrival_s, 3.0);
  EXPECT_EQ(r[0].prompt_len, 100);
  EXPECT_EQ(r[0].output_len, 20);
  EXPECT_FALSE(r[0].clamped);
  EXPECT_EQ(r[1].output_len, 256);  // 300 -> context / 2
  EXPECT_EQ(r[1].prompt_len, 256);  // 600 -> 512 - 256
  EXPECT_TRUE(r[1].clamped);
  EXPECT_EQ(r[3].output_len, 256);
  EXPECT_EQ(r[3].prompt_len, 30);
  EXPECT_TRUE(r[3].clamped);
  EXPECT_EQ(std::count(r[0].prompt.begin(), r[0].prompt.end(), ' '), 98);  // 99 words + BOS
  for (const auto& q : r) EXPECT_LE(q.prompt_len + q.output_len, 512);
  EXPECT_CONTAINS(ds->summary, "2 clamped");

  auto scaled = opts(2);
  scaled.trace_time_scale = 2.0;
  scaled.trace_token_scale = 0.5;
  auto s = sb::load_dataset(fixture("trace_small.csv"), sb::DatasetFormat::kTrace, scaled);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->requests[1].arrival_s, 0.25);
  EXPECT_EQ(s->requests[1].prompt_len, 300);
  EXPECT_EQ(s->requests[1].output_len, 150);
  EXPECT_FALSE(s->requests[1].clamped);
}

TEST(ServeBenchDataset, TraceColumnsByName) {
  auto ds = sb::parse_trace_csv("num_decode_tokens,extra,arrived_at,num_prefill_tokens\r\n7,x,1.5,9\r\n3,y,2.0,4\r\n",
                                "t.csv", opts(2));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ(ds->requests[0].output_len, 7);
  EXPECT_EQ(ds->requests[0].prompt_len, 9);
  EXPECT_DOUBLE_EQ(ds->requests[1].arrival_s, 0.5);
}

TEST(ServeBenchDataset, TraceBadFiles) {
  auto o = opts(1);
  EXPECT_CONTAINS(sb::parse_trace_csv("", "t.csv", o).status().message(), "empty file");
  EXPECT_CONTAINS(sb::parse_trace_csv("a,b,c\n1,2,3\n", "t.csv", o).status().message(), "needs the columns arrived_at");
  EXPECT_CONTAINS(
      sb::parse_trace_csv("arrived_at,num_prefill_tokens,num_decode_tokens\n0,abc,3\n", "t.csv", o).status().message(),
      "t.csv:2: expected numbers");
  EXPECT_CONTAINS(
      sb::parse_trace_csv("arrived_at,num_prefill_tokens,num_decode_tokens\n0,0,3\n", "t.csv", o).status().message(),
      ">= 1");
  auto two = opts(2);
  EXPECT_CONTAINS(sb::parse_trace_csv("arrived_at,num_prefill_tokens,num_decode_tokens\n5,1,1\n4,1,1\n", "t.csv", two)
                      .status()
                      .message(),
                  "t.csv:3: arrived_at is not sorted");
  auto many = opts(10);
  EXPECT_CONTAINS(sb::load_dataset(fixture("trace_small.csv"), sb::DatasetFormat::kTrace, many).status().message(),
                  "has 4 requests, fewer than --num-prompts 10");
  auto bad_scale = opts(1);
  bad_scale.trace_time_scale = 0;
  EXPECT_CONTAINS(sb::parse_trace_csv("x", "t.csv", bad_scale).status().message(), "--trace-time-scale");
}

TEST(ServeBenchDataset, LoadDatasetErrors) {
  auto missing = sb::load_dataset("/nonexistent/x.json", sb::DatasetFormat::kAuto, opts(1));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), "cannot open '/nonexistent/x.json'");
  auto unknown = sb::load_dataset(fixture("trace_small.csv") + ".txt", sb::DatasetFormat::kAuto, opts(1));
  EXPECT_CONTAINS(unknown.status().message(), "--dataset-format");
  // the format flag overrides the extension: a CSV read as ShareGPT is not JSON
  auto wrong = sb::load_dataset(fixture("trace_small.csv"), sb::DatasetFormat::kShareGpt, opts(1));
  EXPECT_CONTAINS(wrong.status().message(), "not valid JSON");
  EXPECT_EQ(sb::parse_dataset_format("trace").value(), sb::DatasetFormat::kTrace);
  EXPECT_FALSE(sb::parse_dataset_format("csv").ok());
}

// --- The real files and the shipped tokenizer (skipped when absent) -----------------

TEST(ServeBenchDataset, ShippedTokenizerCountsSyntheticPromptsExactly) {
  auto tok = moe::Tokenizer::load(moe::testing::tiny_model_dir());
  if (!tok.ok()) GTEST_SKIP() << "SKIPPED: the shipped tokenizer did not load: " << tok.status().message();
  for (int n : {2, 3, 17, 100, 511}) {
    for (uint64_t v : {0u, 1u, 49u, 12345u}) {
      EXPECT_EQ(static_cast<int>((*tok)->encode(sb::synthetic_prompt(n, v)).size()), n) << n << " variant " << v;
    }
  }
}

TEST(ServeBenchDataset, RealShareGptWithEstimateAndTokenizer) {
  const std::string path = shared_prompts("sharegpt_v3_filtered_500.json");
  MOE_SKIP_IF_MISSING(path);
  auto ds = sb::load_dataset(path, sb::DatasetFormat::kAuto, opts(200));
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  ASSERT_EQ(ds->requests.size(), 200u);
  std::set<int> distinct;
  for (const auto& r : ds->requests) {
    EXPECT_GE(r.prompt_len, 4);
    EXPECT_EQ(r.output_len, 128);  // prompts only in this file
    EXPECT_LE(r.prompt_len + r.output_len, 512);
    distinct.insert(r.source_index);
  }
  EXPECT_EQ(distinct.size(), 200u);

  auto tok = moe::Tokenizer::load(moe::testing::tiny_model_dir());
  if (!tok.ok()) GTEST_SKIP() << "SKIPPED: the shipped tokenizer did not load: " << tok.status().message();
  const moe::Tokenizer* t = tok->get();
  auto exact = opts(200);
  exact.count_tokens = [t](std::string_view s) { return static_cast<int>(t->encode(std::string(s)).size()); };
  auto ex = sb::load_dataset(path, sb::DatasetFormat::kAuto, exact);
  ASSERT_TRUE(ex.ok());
  for (const auto& r : ex->requests) {
    EXPECT_EQ(r.prompt_len, static_cast<int>(t->encode(r.prompt).size()));
    EXPECT_LE(r.prompt_len + r.output_len, 512);
  }

  // The calibration of the estimate: over all 500 prompts, within 3% of the tokenizer.
  nlohmann::json all = nlohmann::json::parse(moe::testing::read_file(path));
  long long est = 0, real = 0;
  for (const auto& c : all) {
    const std::string p = c["conversations"][0]["value"];
    est += sb::estimate_tokens(p) - 1;
    real += static_cast<long long>(t->encode(p).size()) - 1;
  }
  EXPECT_NEAR(static_cast<double>(est) / static_cast<double>(real), 1.0, 0.03) << est << " vs " << real;
}

TEST(ServeBenchDataset, RealSplitwiseTrace) {
  const std::string path = shared_prompts("vidur_splitwise_conv.csv");
  MOE_SKIP_IF_MISSING(path);
  auto o = opts(1000);
  o.trace_time_scale = 10;
  auto ds = sb::load_dataset(path, sb::DatasetFormat::kAuto, o);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  ASSERT_EQ(ds->requests.size(), 1000u);
  EXPECT_EQ(ds->requests[0].arrival_s, 0.0);
  for (size_t i = 1; i < ds->requests.size(); ++i) EXPECT_GE(ds->requests[i].arrival_s, ds->requests[i - 1].arrival_s);
  for (const auto& r : ds->requests) {
    EXPECT_LE(r.prompt_len + r.output_len, 512);
    EXPECT_GE(r.output_len, 1);
    EXPECT_LE(r.output_len, 256);
  }
  // the file's 1000th row, by hand: arrival relative to the first row, / 10
  std::ifstream in(path);
  std::string line;
  for (int i = 0; i <= 1000; ++i) std::getline(in, line);
  const double t1000 = std::stod(line.substr(0, line.find(',')));
  EXPECT_NEAR(ds->requests.back().arrival_s, t1000 / 10.0, 1e-9);  // the trace starts at 0.0
}
