// The strategy planner on a tiny hand-checkable model: memory per device by the documented
// formula, exact communication sums of a step, each infeasibility reason, the no-fit
// message, rate mode; and on real configs (DeepSeek-V3 does not fit 8 x H100 80 GB but
// fits 8 x H200 141 GB, as deployments report).
#include "moe/planner/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "moe/model/config.h"
#include "test_util.h"

namespace moe::planner {
namespace {

// Mixtral-shaped: hidden 64, 2 layers, 4 heads of 16, `kv` KV heads, 4 experts top-2 of
// width `inter`, vocab 100.
ModelConfig tiny(int kv = 2, int inter = 128) {
  const std::string j = R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": )" +
                        std::to_string(inter) + R"(, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": )" + std::to_string(kv) + R"(, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 100, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";
  auto c = parse_model_config(j, "tiny.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

HardwareProfile profile(double capacity = 1e9) {
  HardwareProfile p;
  p.name = "test";
  p.devices_per_node = 2;
  p.device.peak_flops_bf16 = 1e12;
  p.device.memory_bandwidth = 1e11;
  p.device.memory_capacity = capacity;
  for (auto& ab : p.intra_node.primitive) ab = {1e-6, 1e-9};
  for (auto& ab : p.inter_node.primitive) ab = {1e-5, 1e-8};
  return p;
}

Workload batch(int64_t b, int64_t in = 10, int64_t out = 6) {
  Workload w;
  w.batch = b;
  w.input_len = in;
  w.output_len = out;
  return w;
}

const StrategyResult* find(const std::vector<StrategyResult>& v, const std::string& label) {
  for (const auto& r : v) {
    if (r.strategy.label() == label) return &r;
  }
  return nullptr;
}

TEST(PlanTest, MemoryPerDeviceByHand) {
  // TP2 on one node of 2, batch 3, input 10, output 6 (docs/planner.md, "Memory"):
  //  weights: layers 2 x (attention 12288 / 2 x 2 B + norms 128 x 2 B) = 25088
  //           + MoE 2 x (4 experts x 3*64*128/2 x 2 B + router 4*64 x 2 B) = 197632
  //           + embedding and lm_head 2 x 100*64/2 x 2 B + final norm 128 = 12928  -> 235648
  //  KV: 3 seqs x 16 tokens x 2 layers x (2*2*16 / 2) values x 2 B = 6144
  //  buffers: 30 prefill tokens: 30*64*2*8 + 4*30*2*64*2 + 30*2*2*64*2 + logits 3*100*4 = 78000
  StrategyResult r = evaluate_strategy(tiny(), profile(), {1, 2}, batch(3), {2, 1, 2, 1, false});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_DOUBLE_EQ(r.memory.weights, 235648);
  EXPECT_DOUBLE_EQ(r.memory.kv_cache, 6144);
  EXPECT_DOUBLE_EQ(r.memory.buffers, 78000);
  EXPECT_DOUBLE_EQ(r.memory.total(), 235648 + 6144 + 78000);
}

TEST(PlanTest, PureEpDecodeCommunicationByHand) {
  // DP attention x EP2 on one node of 2, batch 4: each device decodes 2 tokens and sends
  // 2 tokens x top-2 x 64 x 2 B = 512 B per all-to-all: 1 us + 1/2 x 512 B x 1 ns = 1.256 us,
  // dispatch + combine; before them the row counts, one int64 per peer: 1 us + 1/2 x 16 B x
  // 1 ns = 1.008 us; 2 layers -> 2 x (2 x 1.256 + 1.008) = 7.04 us; no TP group, so no
  // all-reduce.
  StrategyResult r = evaluate_strategy(tiny(), profile(), {1, 2}, batch(4), {1, 2, 1, 2, false});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NEAR(r.decode.intra_comm_s, 7.04e-6, 1e-15);
  EXPECT_EQ(r.decode.inter_comm_s, 0.0);
  EXPECT_NEAR(r.decode.comm_s, 7.04e-6, 1e-15);
  EXPECT_NEAR(r.decode.total_s, r.decode.compute_s() + r.decode.comm_s, 1e-15);
  EXPECT_DOUBLE_EQ(r.tpot_s, r.decode.total_s);
  // Throughput = batch x output / (TTFT + output x TPOT).
  EXPECT_NEAR(r.throughput, 4.0 * 6 / (r.ttft_s + 6 * r.tpot_s), 1e-9);
}

TEST(PlanTest, DriverOnlyAttentionSendsEveryTokenFromTheDriver) {
  // As this engine runs EP today: the driver holds all 4 sequences and dispatches
  // 4 x 2 x 64 x 2 B = 1024 B: 1 us + 1/2 x 1024 ns = 1.512 us, x 2 x 2 layers = 6.048 us,
  // plus the row counts (1.008 us a layer, as above): 8.064 us;
  // its KV cache holds all 4 sequences (16 tokens, 2 layers, 64 values, 2 B) = 16384 B.
  Workload w = batch(4);
  w.driver_only_attention = true;
  StrategyResult r = evaluate_strategy(tiny(), profile(), {1, 2}, w, {1, 2, 1, 2, false});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NEAR(r.decode.intra_comm_s, 8.064e-6, 1e-15);
  EXPECT_DOUBLE_EQ(r.memory.kv_cache, 4.0 * 16 * 2 * 64 * 2);
  // Two overlapped micro-batches exchange their counts separately: one more 1.008 us a layer.
  w.overlap_compute = true;
  r = evaluate_strategy(tiny(), profile(), {1, 2}, w, {1, 2, 1, 2, false});
  EXPECT_NEAR(r.decode.intra_comm_s, 8.064e-6 + 2 * 1.008e-6, 1e-15);
}

TEST(PlanTest, SharedCoresSpeedUpPhasesWhereOnlySomeRanksCompute) {
  // Shared cores (docs/planner.md): 2 ranks share them, a rank alone is 1.5x faster in
  // compute and 1.25x in memory. Driver-only attention (1 of 2 ranks busy): attention and
  // lm_head divided by min(speedup, 2 / 1); the experts (both ranks busy) unchanged.
  // DP attention with 4 sequences (both replicas busy): nothing changes.
  HardwareProfile shared = profile();
  shared.device.shared_ranks = 2;
  shared.device.solo_compute_speedup = 1.5;
  shared.device.solo_memory_speedup = 1.25;
  Workload w = batch(4);
  w.driver_only_attention = true;
  const Strategy ep2{1, 2, 1, 2, false};
  const StrategyResult base = evaluate_strategy(tiny(), profile(), {1, 2}, w, ep2);
  const StrategyResult fast = evaluate_strategy(tiny(), shared, {1, 2}, w, ep2);
  // Decode attention and lm_head are memory-bound here (1.25x).
  EXPECT_NEAR(fast.decode.attention_s, base.decode.attention_s / 1.25, 1e-15);
  EXPECT_NEAR(fast.decode.head_s, base.decode.head_s / 1.25, 1e-15);
  for (auto [b, f] : {std::pair{base.decode, fast.decode}, std::pair{base.prefill, fast.prefill}}) {
    EXPECT_LT(f.attention_s, b.attention_s / 1.2);
    EXPECT_DOUBLE_EQ(f.moe_s, b.moe_s);
    EXPECT_DOUBLE_EQ(f.comm_s, b.comm_s);
  }
  w.driver_only_attention = false;
  const StrategyResult dp_base = evaluate_strategy(tiny(), profile(), {1, 2}, w, ep2);
  const StrategyResult dp_shared = evaluate_strategy(tiny(), shared, {1, 2}, w, ep2);
  EXPECT_DOUBLE_EQ(dp_shared.decode.total_s, dp_base.decode.total_s);
  // One sequence under DP: only one replica has work, so it speeds up like driver-only.
  const StrategyResult one = evaluate_strategy(tiny(), shared, {1, 2}, batch(1), ep2);
  const StrategyResult one_base = evaluate_strategy(tiny(), profile(), {1, 2}, batch(1), ep2);
  EXPECT_NEAR(one.decode.attention_s, one_base.decode.attention_s / 1.25, 1e-15);
}

TEST(PlanTest, SharedCoresSpeedUpIsCappedAtSharedRanksOverBusyRanks) {
  // The validation's layouts (4 ranks on shared cores, solo speedup 3.5 in both compute
  // and memory, so the bound does not matter), driver-only attention, batch 1. The
  // attention and lm_head times are the dedicated-device ones divided by
  // min(3.5, S / a) with S = 4 (docs/planner.md "Shared cores"):
  //   EP 4 (a = 1, the driver alone): min(3.5, 4) = 3.5
  //   TP 2 x EP 2 (a = 2, the driver's TP group): min(3.5, 2) = 2
  //   TP 4 (a = 4, every rank): min(3.5, 1) -> 1, unchanged
  // The experts run on every rank (a = S): unchanged in all three.
  HardwareProfile shared = profile();
  shared.device.shared_ranks = 4;
  shared.device.solo_compute_speedup = 3.5;
  shared.device.solo_memory_speedup = 3.5;
  Workload w = batch(1);
  w.driver_only_attention = true;
  struct Case {
    Strategy s;
    Cluster cl;
    double divisor;
  };
  for (const Case& c : {Case{{1, 4, 1, 4, false}, {2, 2}, 3.5}, Case{{2, 2, 2, 2, false}, {2, 2}, 2.0},
                        Case{{4, 1, 4, 1, false}, {1, 4}, 1.0}}) {
    const StrategyResult base = evaluate_strategy(tiny(4), profile(), c.cl, w, c.s);
    const StrategyResult fast = evaluate_strategy(tiny(4), shared, c.cl, w, c.s);
    ASSERT_TRUE(base.feasible && fast.feasible) << c.s.label() << ": " << base.reason << fast.reason;
    for (auto [b, f] : {std::pair{base.decode, fast.decode}, std::pair{base.prefill, fast.prefill}}) {
      EXPECT_NEAR(f.attention_s, b.attention_s / c.divisor, 1e-12 * b.attention_s) << c.s.label();
      EXPECT_NEAR(f.head_s, b.head_s / c.divisor, 1e-12 * b.head_s) << c.s.label();
      EXPECT_DOUBLE_EQ(f.moe_s, b.moe_s) << c.s.label();
    }
  }
}

TEST(PlanTest, ChunkedPrefillTtftIsTheMeanOverTheBatch) {
  // 3 prompts of 10 tokens, one replica (TP2). Chunk 10: one prompt per step, 3 steps, the
  // i-th request's first token after i steps: mean 2 steps of a 1-prompt step.
  const Strategy tp2{2, 1, 2, 1, false};
  StrategyResult one = evaluate_strategy(tiny(), profile(), {1, 2}, batch(1), tp2);
  Workload w = batch(3);
  w.prefill_chunk = 10;
  StrategyResult r = evaluate_strategy(tiny(), profile(), {1, 2}, w, tp2);
  EXPECT_DOUBLE_EQ(r.prefill.total_s, one.prefill.total_s);
  EXPECT_DOUBLE_EQ(r.ttft_s, 2 * one.prefill.total_s);
  // Chunk 20: two prompts per step, 2 steps: mean 1.5 steps of a 2-prompt step.
  w.prefill_chunk = 20;
  r = evaluate_strategy(tiny(), profile(), {1, 2}, w, tp2);
  StrategyResult two = evaluate_strategy(tiny(), profile(), {1, 2}, batch(2), tp2);
  EXPECT_DOUBLE_EQ(r.ttft_s, 1.5 * two.prefill.total_s);
  // Unchunked (0) and a chunk holding the whole batch: one step of all 3 prompts.
  w.prefill_chunk = 30;
  EXPECT_DOUBLE_EQ(evaluate_strategy(tiny(), profile(), {1, 2}, w, tp2).ttft_s,
                   evaluate_strategy(tiny(), profile(), {1, 2}, batch(3), tp2).ttft_s);
}

TEST(PlanTest, PureTpDecodeCommunicationByHand) {
  // TP2 on one node, batch 4: every device holds all 4 tokens; per layer two all-reduces of
  // 4 x 64 x 2 B = 512 B (2 x 1 us + 2 x 1/2 x 512 ns = 2.512 us), plus the embedding's
  // all-reduce (2.512 us) and the logits' all-gather of 4 x 100 x 4 B (1 us + 800 ns):
  // 2 layers x 2 x 2.512 + 2.512 + 1.8 = 14.36 us.
  StrategyResult r = evaluate_strategy(tiny(), profile(), {1, 2}, batch(4), {2, 1, 2, 1, false});
  ASSERT_TRUE(r.feasible) << r.reason;
  EXPECT_NEAR(r.decode.intra_comm_s, 14.36e-6, 1e-12);
}

TEST(PlanTest, FusedHybridHidesNodeLocalCollectives) {
  // 2 nodes x 2: hybrid TP2 x EP2, fused vs AR+A2A: fused sends 1/TP of the rows across
  // nodes and overlaps the node-local collectives, so its comm is smaller.
  const ModelConfig c = tiny(4);
  StrategyResult a = evaluate_strategy(c, profile(), {2, 2}, batch(64), {2, 2, 2, 2, false});
  StrategyResult f = evaluate_strategy(c, profile(), {2, 2}, batch(64), {2, 2, 2, 2, true});
  ASSERT_TRUE(a.feasible && f.feasible);
  EXPECT_LT(f.decode.inter_comm_s, a.decode.inter_comm_s);
  EXPECT_LT(f.decode.comm_s, a.decode.comm_s);
  EXPECT_LT(f.decode.comm_s, f.decode.intra_comm_s + f.decode.inter_comm_s);  // overlap
}

TEST(PlanTest, EachInfeasibilityReason) {
  // 1 node of 8: TP8 splits 4 heads 8 ways.
  auto r = plan(tiny(), profile(), {1, 8}, batch(8));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const StrategyResult* tp8 = find(r->infeasible, "attn TP8xDP1 | MoE TP8");
  ASSERT_NE(tp8, nullptr);
  EXPECT_EQ(tp8->reason, "num_attention_heads 4 not divisible by attention TP 8");
  const StrategyResult* tp4 = find(r->infeasible, "attn TP4xDP2 | MoE TP4xEP2 AR+A2A");
  ASSERT_NE(tp4, nullptr);
  EXPECT_EQ(tp4->reason, "num_key_value_heads 2 not divisible by attention TP 4");
  const StrategyResult* ep8 = find(r->infeasible, "attn TP1xDP8 | MoE EP8");
  ASSERT_NE(ep8, nullptr);
  EXPECT_EQ(ep8->reason, "routed experts 4 not divisible by EP 8");
  // Expert width 130 is not divisible by MoE TP 4.
  r = plan(tiny(4, 130), profile(), {1, 4}, batch(8));
  ASSERT_TRUE(r.ok());
  const StrategyResult* w4 = find(r->infeasible, "attn TP4xDP1 | MoE TP4");
  ASSERT_NE(w4, nullptr);
  EXPECT_EQ(w4->reason, "moe_intermediate_size 130 not divisible by MoE TP 4");
  // 2 nodes of 2: a hybrid TP4 x EP... would span nodes (here 4 nodes of 2, TP4 x EP2).
  r = plan(tiny(4), profile(), {4, 2}, batch(8));
  ASSERT_TRUE(r.ok());
  const StrategyResult* span = find(r->infeasible, "attn TP4xDP2 | MoE TP4xEP2 fused RS-A2A-AG");
  ASSERT_NE(span, nullptr);
  EXPECT_EQ(span->reason, "MoE TP 4 spans 2 nodes (2 devices per node): a hybrid's TP group stays inside a node");
  // Memory: 300 KB per device holds no TP2 footprint of 319.8 KB.
  StrategyResult m = evaluate_strategy(tiny(), profile(300e3), {1, 2}, batch(3), {2, 1, 2, 1, false});
  EXPECT_FALSE(m.feasible);
  EXPECT_TRUE(m.out_of_memory);
  EXPECT_EQ(m.reason, "weights 235.6 KB + KV cache 6.1 KB + buffers 78.0 KB = 319.8 KB > 300.0 KB per device at "
                      "attn TP2xDP1 | MoE TP2");
  m = evaluate_strategy(tiny(), profile(200e3), {1, 2}, batch(3), {2, 1, 2, 1, false});
  EXPECT_EQ(m.reason, "weights 235.6 KB > 200.0 KB per device at attn TP2xDP1 | MoE TP2");
}

TEST(PlanTest, NothingFitsSaysWhatMemoryIsNeeded) {
  auto r = plan(tiny(), profile(100e3), {1, 2}, batch(3));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->feasible.empty());
  const std::string msg = no_fit_message(*r, profile(100e3), {1, 2});
  EXPECT_NE(msg.find("no strategy fits the model on 1 x 2 devices of 100.0 KB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the smallest footprint is"), std::string::npos) << msg;
  EXPECT_NE(msg.find("devices of this kind for the weights"), std::string::npos) << msg;
}

TEST(PlanTest, RankedByThroughputInBatchMode) {
  auto r = plan(tiny(4), profile(), {2, 2}, batch(32, 64, 32));
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->feasible.size(), 3u);
  EXPECT_EQ(r->objective, "throughput");
  for (size_t i = 1; i < r->feasible.size(); ++i) {
    EXPECT_GE(r->feasible[i - 1].throughput, r->feasible[i].throughput);
  }
}

TEST(PlanTest, RateModeLittlesLawAndSaturation) {
  Workload w = batch(0);
  w.request_rate = 10;
  auto r = plan(tiny(4), profile(), {1, 2}, w);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->feasible.empty());
  EXPECT_EQ(r->objective, "latency");
  for (const auto& s : r->feasible) {
    // Little's law: the batch is the rate times the time a request stays, rounded up.
    EXPECT_EQ(s.batch, static_cast<int64_t>(std::ceil(10 * (s.ttft_s + 6 * s.tpot_s))));
    EXPECT_DOUBLE_EQ(s.throughput, 60.0);
  }
  w.request_rate = 1e9;
  r = plan(tiny(4), profile(), {1, 2}, w);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->feasible.empty());
  EXPECT_NE(r->infeasible[0].reason.find("saturates"), std::string::npos) << r->infeasible[0].reason;
}

TEST(PlanTest, BadWorkloadNamesTheFlag) {
  Workload w = batch(0);
  EXPECT_NE(plan(tiny(), profile(), {1, 2}, w).status().message().find("--batch B"), std::string::npos);
  EXPECT_NE(plan(tiny(), profile(), {0, 2}, batch(1)).status().message().find("--nodes"), std::string::npos);
  EXPECT_NE(plan(tiny(), profile(), {1, 0}, batch(1)).status().message().find("--devices-per-node"),
            std::string::npos);
  EXPECT_NE(plan(tiny(), profile(), {1, 2}, batch(1, 0)).status().message().find("--input-len"), std::string::npos);
  EXPECT_NE(plan(tiny(), profile(), {1, 2}, batch(1, 1, 0)).status().message().find("--output-len"),
            std::string::npos);
  w = batch(1);
  w.a2a_skew = 0.5;
  EXPECT_NE(plan(tiny(), profile(), {1, 2}, w).status().message().find("--a2a-skew"), std::string::npos);
}

TEST(PlanTest, DeepSeekV3FitsEightH200ButNotEightH100) {
  const std::string path = testing::source_dir() + "/tests/data/configs/deepseek-v3.json";
  auto c = parse_model_config(testing::read_file(path), path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto h100 = load_hardware_profile(testing::source_dir() + "/profiles/h100_sxm_8gpu.json");
  auto h200 = load_hardware_profile(testing::source_dir() + "/profiles/h200_sxm_8gpu.json");
  ASSERT_TRUE(h100.ok() && h200.ok());
  auto r = plan(*c, *h100, {1, 8}, batch(16, 1000, 1000));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->feasible.empty());
  EXPECT_NE(no_fit_message(*r, *h100, {1, 8}).find("no strategy fits"), std::string::npos);
  r = plan(*c, *h200, {1, 8}, batch(16, 1000, 1000));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->feasible.empty());
  // 16 nodes of 8 H100 (the first seed's setting): fits, and pure TP over 128 GPUs
  // across nodes is not the best.
  r = plan(*c, *h100, {16, 8}, batch(1024, 1000, 1000));
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->feasible.empty());
  EXPECT_NE(r->feasible.front().strategy.moe_kind(), "tp");
}

}  // namespace
}  // namespace moe::planner
