// --trace with real MPI ranks: `mpirun -np 2 moe generate --ep 2 --trace` writes one
// merged Chrome trace (both pids, one step per forward on each, spans nested, expert
// counts equal to the run's own load statistics) that `moe trace summarize` reads and
// charts; `mpirun -np 2 moe serve --ep 2 --trace` exposes per-link bytes on /metrics that
// equal the trace's (rank 0's counters against rank 1's own).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>

#include "serve/metrics_text.h"
#include "serve_process.h"
#include "moe/trace/trace_summary.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::moe_binary;
using testing::run_command;

void expect_nested(const nlohmann::json& events, int pid) {
  std::vector<std::pair<double, double>> spans;
  for (const auto& e : events) {
    if (e["ph"] == "X" && e["pid"] == pid && e["tid"] == 0) {
      spans.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    }
  }
  ASSERT_FALSE(spans.empty());
  std::sort(spans.begin(), spans.end(),
            [](auto& a, auto& b) { return a.first < b.first || (a.first == b.first && a.second > b.second); });
  std::vector<double> open_ends;
  for (const auto& [b, e] : spans) {
    while (!open_ends.empty() && open_ends.back() <= b + 0.002) open_ends.pop_back();
    if (!open_ends.empty()) {
      EXPECT_LE(e, open_ends.back() + 0.002) << "pid " << pid << " span at " << b;
    }
    open_ends.push_back(e);
  }
}

TEST(TraceMpirun, GenerateWritesOneMergedTraceThatSummarizes) {
  const std::string dir = testing::make_temp_dir("trace_mpirun");
  const std::string trace = dir + "/gen.json", stats = dir + "/stats.json", png = dir + "/step.png";
  auto r = run_command("mpirun --allow-run-as-root --oversubscribe -np 2 " + moe_binary() +
                       " generate --ep 2 --prompt ROMEO: --max-tokens 6 --temperature 0 --threads 1 --format json"
                       " --stats-out " + stats + " --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(testing::read_file(trace), nullptr, false);
  ASSERT_TRUE(doc.is_object() && doc["traceEvents"].is_array()) << "not JSON: " << trace;
  EXPECT_EQ(doc["otherData"]["ranks"], 2);
  std::map<int, int> steps;                           // pid -> step spans
  std::map<int, std::vector<int64_t>> layer_tokens;   // layer -> summed expert counts
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "step") ++steps[e["pid"].get<int>()];
    if (e["ph"] == "i" && e["name"] == "experts") {
      EXPECT_EQ(e["pid"], 0);
      auto t = e["args"]["tokens"].get<std::vector<int64_t>>();
      auto& sum = layer_tokens[e["args"]["layer"].get<int>()];
      sum.resize(t.size(), 0);
      for (size_t i = 0; i < t.size(); ++i) sum[i] += t[i];
    }
  }
  // One prefill chunk + 5 decode forwards, on both ranks (rank 1 joins each).
  EXPECT_EQ(steps[0], 6);
  EXPECT_EQ(steps[1], 6);
  expect_nested(doc["traceEvents"], 0);
  expect_nested(doc["traceEvents"], 1);
  const nlohmann::json s = nlohmann::json::parse(testing::read_file(stats));
  ASSERT_EQ(layer_tokens.size(), s["layers"].size());
  for (const auto& l : s["layers"]) {
    EXPECT_EQ(layer_tokens[l["layer"].get<int>()], l["tokens_per_expert"].get<std::vector<int64_t>>()) << l["layer"];
  }

  auto sum = run_command(moe_binary() + " trace summarize " + trace + " --step 2 --png " + png);
  ASSERT_EQ(sum.exit_code, 0) << sum.output;
  for (const char* want : {"2 ranks, 6 steps", "step 2:", "waited on rank", "0 -> 1:", "1 -> 0:", "hot experts",
                           "all 6 steps"}) {
    EXPECT_NE(sum.output.find(want), std::string::npos) << want << "\n" << sum.output;
  }
  const std::string bytes = testing::read_file(png);
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const auto u8 = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])); };
  EXPECT_EQ((u8(16) << 24) | (u8(17) << 16) | (u8(18) << 8) | u8(19), static_cast<uint32_t>(kTraceChartWidth));

  auto bad = run_command(moe_binary() + " trace summarize " + trace + " --step 99");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--step 99"), std::string::npos) << bad.output;
  auto missing = run_command(moe_binary() + " trace summarize " + dir + "/none.json");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find(dir + "/none.json"), std::string::npos) << missing.output;
  auto bad_dir = run_command(moe_binary() + " generate --prompt hi --max-tokens 1 --threads 1 --trace " + dir +
                             "/no/such/dir/t.json");
  EXPECT_NE(bad_dir.exit_code, 0);
  EXPECT_NE(bad_dir.output.find("no/such/dir does not exist"), std::string::npos) << bad_dir.output;
  auto bad_max = run_command(moe_binary() + " generate --prompt hi --trace t.json --trace-max-events 0");
  EXPECT_NE(bad_max.exit_code, 0);
  EXPECT_NE(bad_max.output.find("--trace-max-events must be >= 1"), std::string::npos) << bad_max.output;
}

// The hierarchical exchange (4 ranks as 2 nodes of 2) is traced too: spans, and per-link
// bytes that follow its two stages. Rank 0 sends across nodes only to its gateway in node
// 1 (rank 2, the same local index) and within its node to rank 1 (and keeps rows for
// itself): never to rank 3, which the flat exchange would reach directly. Rank 0's
// counters add up to the bytes its run reports. With --ep-overlap (the pipelined
// micro-batches) the same pattern holds, and the exchanges run on the micro-batches' lanes.
class TraceHierarchical : public ::testing::TestWithParam<std::string> {};

TEST_P(TraceHierarchical, ExchangeBytesFollowItsTwoStages) {
  const std::string dir = testing::make_temp_dir("trace_hier");
  const std::string trace = dir + "/hier.json";
  auto r = run_command("timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 " + moe_binary() +
                       " generate --ep 4 --ranks-per-node 2 --a2a-mode hierarchical --max-tokens 6 --temperature 0"
                       " --threads 1 --format json --prompt " +
                       testing::sh_quote("KING HENRY IV:\nSo shaken as we are, so wan with care,") + " --trace " + trace +
                       " " + GetParam());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(testing::read_file(trace), nullptr, false);
  ASSERT_TRUE(doc.is_object() && doc["traceEvents"].is_array());
  std::map<int, std::map<int, int64_t>> sent;  // pid -> peer -> cumulative bytes (last counter value)
  std::map<std::string, int> rank0_spans;
  int max_exchange_lane = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string name = e["name"];
    if (e["ph"] == "C" && name.rfind("bytes to rank ", 0) == 0) {
      sent[e["pid"].get<int>()][std::atoi(name.c_str() + 14)] = e["args"]["bytes"].get<int64_t>();
    }
    if (e["ph"] == "X" && e["pid"] == 0) ++rank0_spans[name];
    if (e["ph"] == "X" && e["pid"] == 0 && name == "exchange") max_exchange_lane = std::max(max_exchange_lane, e["tid"].get<int>());
  }
  const bool overlap = !GetParam().empty();
  // Lane 1 + micro-batch: blocking exchanges all on lane 1, the pipeline's on 1 and 2.
  EXPECT_EQ(max_exchange_lane, overlap ? 2 : 1);
  EXPECT_GT(rank0_spans["dispatch"], 0);
  EXPECT_GT(rank0_spans["combine"], 0);
  EXPECT_GT(rank0_spans["wait"], 0);
  // Only rank 0 has tokens (the others join each step): its rows go to its gateway in
  // node 1 (rank 2) and to rank 1 of its own node; rank 2 forwards inside node 1 to rank 3;
  // results come back the same way. So rank 0 and rank 3 never exchange directly, nor do
  // ranks 1 and 2, or ranks 1 and 3.
  const auto bytes = [&](int from, int to) { return sent[from].count(to) ? sent[from][to] : int64_t{0}; };
  EXPECT_GT(bytes(0, 2), 0);
  EXPECT_GT(bytes(0, 1), 0);
  EXPECT_GT(bytes(1, 0), 0);
  EXPECT_GT(bytes(2, 0), 0);
  EXPECT_GT(bytes(2, 3), 0);
  EXPECT_GT(bytes(3, 2), 0);
  for (const auto& [a, b] : std::vector<std::pair<int, int>>{{0, 3}, {3, 0}, {1, 2}, {2, 1}, {1, 3}, {3, 1}}) {
    EXPECT_EQ(bytes(a, b), 0) << a << " -> " << b;
  }
  int64_t total = 0;
  for (const auto& [peer, b] : sent[0]) total += b;
  const std::string out = "\n" + r.output;  // the JSON result is a line of its own
  size_t json_at = out.rfind("\n{");
  ASSERT_NE(json_at, std::string::npos) << r.output;
  ++json_at;
  const nlohmann::json j = nlohmann::json::parse(out.substr(json_at, out.find('\n', json_at) - json_at));
  EXPECT_EQ(total, j["ep"]["bytes_sent"].get<int64_t>());
  const double ratio = j["ep"]["comm_overlap_ratio"].get<double>();
  EXPECT_GE(ratio, 0.0);
  EXPECT_LE(ratio, 1.0);
  if (!overlap) {
    EXPECT_EQ(ratio, 0.0);  // blocking exchanges: every one waited on at once
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, TraceHierarchical, ::testing::Values("", "--ep-overlap --ep-micro-batches 2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("Blocking") : std::string("Overlap");
                         });

TEST(TraceMpirun, SuperviseRefusesTrace) {
  auto r = run_command(moe_binary() + " serve --supervise --trace /tmp/never-written.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--trace is not available with --supervise"), std::string::npos) << r.output;
}

TEST(TraceMpirun, ServeMetricsLinkBytesEqualTheTrace) {
  const std::string dir = testing::make_temp_dir("trace_mpirun");
  const std::string trace = dir + "/serve.json";
  testing::ServeProcess server({"--ep", "2", "--threads", "1", "--trace", trace}, /*mpirun_np=*/2);
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_EQ(testing::stream_completion("127.0.0.1", server.port(), "ROMEO:", 8).status, 200);
  httplib::Client cli("127.0.0.1", server.port());
  // A reply can reach the client before the step that produced its last token is in the
  // engine's counters: scrape until the tokens are counted and every step is in, for up to
  // 10 s (the trace, read after the server ends, has all steps).
  std::string body;
  for (int i = 0; i < 200; ++i) {
    auto res = cli.Get("/metrics");
    ASSERT_TRUE(res && res->status == 200);
    body = res->body;
    const auto now = serve::testing::parse_exposition(body);
    if (now.value("vllm:generation_tokens_total") >= 8 &&
        now.value("vllm:iteration_tokens_total_count") == now.value("moe:engine_steps_total")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const serve::testing::Exposition m = serve::testing::parse_exposition(body);
  const double b01 = m.value("moe:ep_link_bytes_total", {{"src", "0"}, {"dst", "1"}});
  const double b10 = m.value("moe:ep_link_bytes_total", {{"src", "1"}, {"dst", "0"}});
  const double b00 = m.value("moe:ep_link_bytes_total", {{"src", "0"}, {"dst", "0"}});
  EXPECT_GT(b01, 0) << body;
  EXPECT_GT(b10, 0);
  EXPECT_GT(b00, 0);
  EXPECT_EQ(m.types.at("moe:ep_link_bytes_total"), "counter");
  const pid_t rank0 = server.rank0_pid();
  ASSERT_GT(rank0, 0);
  ASSERT_EQ(server.terminate(60, rank0), 0) << server.log();
  auto s = summarize_trace(testing::read_file(trace), trace, {});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::map<std::pair<int, int>, int64_t> links;
  for (const TraceLinkBytes& l : s->all.links) links[{l.src, l.dst}] = l.bytes;
  EXPECT_EQ(static_cast<double>(links[{0, 1}]), b01);
  EXPECT_EQ(static_cast<double>(links[{1, 0}]), b10);  // rank 1's own counter vs rank 0's received bytes
  EXPECT_EQ(static_cast<double>(links[{0, 0}]), b00);
}

}  // namespace
}  // namespace moe
