// The trace of the expert-parallel layer (2 in-process ranks, a hand-made routing):
// the gathered file parses as Chrome trace-event JSON, each rank's spans nest, the
// per-link bytes equal the EP layer's own counters and the hand-computed row counts, and
// the summary reads them back. Also the recorder's event budget and the write errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "moe/comm/inproc_communicator.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/trace/trace_gather.h"
#include "moe/trace/trace_summary.h"
#include "moe/tiny_ep_layer.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::kTinyHidden;
using testing::kTinyTopK;

// Experts 0-3 on rank 0, 4-7 on rank 1. Rank 0's tokens route to (0,1) (0,5) (4,6),
// rank 1's to (1,2) (5,7). Rows (one per token and destination rank):
//   rank 0 -> 0: 2 (t0, t1), -> 1: 2 (t1, t2);  rank 1 -> 0: 1, -> 1: 1.
// Dispatch row: 16 floats + 2 ids + 2 weights = 80 bytes; combine row: 64 bytes, one per
// row received. Per forward:
//   rank 0 sends 0: 2*80 + 2*64 = 288, 1: 2*80 + 1*64 = 224
//   rank 1 sends 0: 1*80 + 2*64 = 208, 1: 1*80 + 1*64 = 144
const std::vector<std::vector<int>> kRouting = {{0, 1, 0, 5, 4, 6}, {1, 2, 5, 7}};
const std::vector<std::vector<int64_t>> kBytesPerForward = {{288, 224}, {208, 144}};

struct RankResult {
  EpTimings timings;
  std::string doc;  // rank 0: the gathered file
};

std::vector<RankResult> run_traced(const EpOptions& options, int forwards) {
  testing::TinyEpLayer tiny(7);
  InProcessGroup group(2, 0, 20);
  std::vector<RankResult> results(2);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank();
    EpContext ctx{&comm, ExpertPlacement::contiguous(testing::kTinyExperts, 2), options};
    ctx.layer_id = 3;
    const std::vector<int>& topk = kRouting[static_cast<size_t>(r)];
    const int n = static_cast<int>(topk.size()) / kTinyTopK;
    std::vector<float> x(static_cast<size_t>(n * kTinyHidden), 0.25f), w(topk.size(), 0.5f), out(x.size() + 1);
    auto ws = make_ep_workspace(tiny.config, ctx, n);
    TraceRecorder trace(r, 1000);
    RankResult& res = results[static_cast<size_t>(r)];
    res.timings.trace = &trace;
    for (int f = 0; f < forwards; ++f) {
      trace.begin_step();
      const double t0 = now_seconds();
      MOE_RETURN_IF_ERROR(ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, tiny.layer, x.data(), n, out.data()),
                                                {topk.data(), w.data(), n, kTinyTopK}, ctx, ws.get(), &res.timings));
      trace.step_span(t0, now_seconds(), n);
    }
    MOE_ASSIGN_OR_RETURN(res.doc, gather_trace_json(&comm, trace));
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.to_string();
  return results;
}

// Checks that each (pid, tid 0) list of complete events nests: every span lies inside
// the enclosing open one (times printed to 1 ns).
void expect_nested(const nlohmann::json& events, int pid) {
  std::vector<std::pair<double, double>> spans;
  for (const auto& e : events) {
    if (e["ph"] == "X" && e["pid"] == pid && e["tid"] == 0) {
      spans.push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    }
  }
  ASSERT_FALSE(spans.empty());
  std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.first < b.first || (a.first == b.first && a.second > b.second); });
  std::vector<double> open_ends;
  for (const auto& [b, e] : spans) {
    while (!open_ends.empty() && open_ends.back() <= b + 0.002) open_ends.pop_back();
    if (!open_ends.empty()) {
      EXPECT_LE(e, open_ends.back() + 0.002) << "pid " << pid << " span at " << b << " overlaps its parent";
    }
    open_ends.push_back(e);
  }
}

void check_trace(const EpOptions& options) {
  const int kForwards = 3;
  const std::vector<RankResult> res = run_traced(options, kForwards);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_TRUE(res[1].doc.empty());
  for (int r = 0; r < 2; ++r) {
    const EpTimings& t = res[static_cast<size_t>(r)].timings;
    ASSERT_EQ(t.bytes_to_rank.size(), 2u);
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(t.bytes_to_rank[static_cast<size_t>(d)], kForwards * kBytesPerForward[static_cast<size_t>(r)][static_cast<size_t>(d)])
          << r << " -> " << d;
      // What rank d received from r is what r sent to d.
      EXPECT_EQ(res[static_cast<size_t>(d)].timings.bytes_from_rank[static_cast<size_t>(r)],
                t.bytes_to_rank[static_cast<size_t>(d)]);
    }
    EXPECT_EQ(t.bytes_to_rank[0] + t.bytes_to_rank[1], t.bytes_sent);
  }
  const nlohmann::json doc = nlohmann::json::parse(res[0].doc);
  ASSERT_TRUE(doc["traceEvents"].is_array());
  EXPECT_EQ(doc["otherData"]["ranks"], 2);
  const nlohmann::json& events = doc["traceEvents"];
  std::map<std::pair<int, std::string>, int> count;  // (pid, name) -> complete events
  std::map<std::pair<int, int>, int64_t> last_bytes;  // (pid, peer) -> cumulative
  for (const auto& e : events) {
    if (e["ph"] == "X") {
      ++count[{e["pid"].get<int>(), e["name"].get<std::string>()}];
      if (e["name"] != "step") {
        EXPECT_EQ(e["args"]["layer"], 3);
      }
    }
    if (e["ph"] == "C") {
      const std::string n = e["name"];
      last_bytes[{e["pid"].get<int>(), std::stoi(n.substr(14))}] = e["args"]["bytes"].get<int64_t>();
    }
  }
  const int micro_batches = options.overlap ? 2 : 1;
  for (int pid = 0; pid < 2; ++pid) {
    SCOPED_TRACE("pid " + std::to_string(pid));
    expect_nested(events, pid);
    EXPECT_EQ((count[{pid, "step"}]), kForwards);
    EXPECT_EQ((count[{pid, "dispatch"}]), kForwards * micro_batches);
    EXPECT_EQ((count[{pid, "expert_compute"}]), kForwards * micro_batches);
    // Per micro-batch: the counts, dispatch and combine waits, and two exchange spans.
    EXPECT_EQ((count[{pid, "wait"}]), kForwards * micro_batches * 3);
    EXPECT_EQ((count[{pid, "exchange"}]), kForwards * micro_batches * 2);
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ((last_bytes[{pid, d}]), res[static_cast<size_t>(pid)].timings.bytes_to_rank[static_cast<size_t>(d)]);
    }
  }
  // The summary reads the same links back, per step and in all.
  auto s = summarize_trace(res[0].doc, "ep", {1, 5});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->steps, kForwards);
  ASSERT_EQ(s->selected.links.size(), 4u);
  for (const TraceLinkBytes& l : s->selected.links) {
    EXPECT_EQ(l.bytes, kBytesPerForward[static_cast<size_t>(l.src)][static_cast<size_t>(l.dst)]) << l.src << "->" << l.dst;
  }
  for (const TraceLinkBytes& l : s->all.links) {
    EXPECT_EQ(l.bytes, kForwards * kBytesPerForward[static_cast<size_t>(l.src)][static_cast<size_t>(l.dst)]);
  }
  EXPECT_EQ(s->selected.ranks[0].tokens, 3);
  EXPECT_EQ(s->selected.ranks[1].tokens, 2);
  // Every exchange of the step is attributed: 3 waits per micro-batch.
  int64_t exchanges = 0;
  for (const TraceWaitEdge& e : s->selected.waits) exchanges += e.count;
  EXPECT_EQ(exchanges, 3 * micro_batches);
}

TEST(EpTrace, FlatExchange) { check_trace({}); }

TEST(EpTrace, OverlappedMicroBatches) {
  EpOptions o;
  o.overlap = true;
  check_trace(o);
}

TEST(EpTrace, UntracedRunStillCountsLinks) {
  testing::TinyEpLayer tiny(7);
  InProcessGroup group(2, 0, 20);
  std::vector<EpTimings> timings(2);
  Status st = run_ranks(group, [&](Communicator& comm) -> Status {
    const int r = comm.rank();
    EpContext ctx{&comm, ExpertPlacement::contiguous(testing::kTinyExperts, 2), {}};
    const std::vector<int>& topk = kRouting[static_cast<size_t>(r)];
    const int n = static_cast<int>(topk.size()) / kTinyTopK;
    std::vector<float> x(static_cast<size_t>(n * kTinyHidden), 0.25f), w(topk.size(), 0.5f), out(x.size() + 1);
    auto ws = make_ep_workspace(tiny.config, ctx, n);
    return ep_moe_forward_routed(MoeLayerArgs::f32(tiny.config, tiny.layer, x.data(), n, out.data()),
                                 {topk.data(), w.data(), n, kTinyTopK}, ctx, ws.get(), &timings[static_cast<size_t>(r)]);
  });
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(timings[0].bytes_to_rank, (std::vector<int64_t>{288, 224}));
  EXPECT_EQ(timings[1].bytes_to_rank, (std::vector<int64_t>{208, 144}));
}

TEST(TraceRecorder, DropsPastItsCapacityAndCounts) {
  TraceRecorder rec(0, 2);
  rec.begin_step();
  rec.span(TraceName::kAttention, 0, 1.0, 2.0);
  rec.span(TraceName::kMoe, 0, 2.0, 3.0);
  rec.span(TraceName::kWait, 0, 2.5, 2.6);
  const int64_t counts[3] = {1, 2, 3};
  rec.experts(0, counts, 3, 2.0);
  EXPECT_EQ(rec.events().size(), 2u);
  EXPECT_EQ(rec.dropped_events(), 2);
  auto doc = gather_trace_json(nullptr, rec);
  ASSERT_TRUE(doc.ok());
  const nlohmann::json j = nlohmann::json::parse(doc.value());
  EXPECT_EQ(j["otherData"]["dropped_events"], nlohmann::json::array({2}));
  // ts relative to the first event; dur in microseconds.
  int spans = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++spans;
    if (e["name"] == "moe") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1e6);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 1e6);
      EXPECT_EQ(e["args"]["step"], 0);
    }
  }
  EXPECT_EQ(spans, 2);
}

TEST(TraceRecorder, WriteErrorNamesTheFile) {
  TraceRecorder rec(0, 4);
  rec.begin_step();
  rec.step_span(1.0, 2.0, 5);
  Status st = write_trace_file(nullptr, rec, "/nonexistent-dir/x/trace.json");
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("/nonexistent-dir/x/trace.json"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace moe
