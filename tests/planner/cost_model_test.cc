// The planner's alpha-beta and roofline formulas (cost_model.h) against hand-computed
// sums, and the alpha/beta fit against exact synthetic timings.
#include "moe/planner/cost_model.h"

#include <gtest/gtest.h>

#include "moe/planner/calibration_fit.h"

namespace moe::planner {
namespace {

HardwareProfile two_tier(double a_in, double b_in, double a_ex, double b_ex) {
  HardwareProfile p;
  p.devices_per_node = 4;
  for (auto& ab : p.intra_node.primitive) ab = {a_in, b_in};
  for (auto& ab : p.inter_node.primitive) ab = {a_ex, b_ex};
  return p;
}

TEST(CostModelTest, RingFormulasOnOneTier) {
  const AlphaBeta ab{1e-6, 1e-9};  // 1 us per step, 1 GB/s
  // allreduce n=4, S=4000: 2*3*1us + 2*3/4*4000 B*1ns = 6 + 6 us
  EXPECT_NEAR(tier_collective_seconds(ab, Primitive::kAllReduce, 4, 4000), 12e-6, 1e-15);
  // reduce_scatter / allgather: 3 us + 3/4*4000 ns = 6 us
  EXPECT_NEAR(tier_collective_seconds(ab, Primitive::kReduceScatter, 4, 4000), 6e-6, 1e-15);
  EXPECT_NEAR(tier_collective_seconds(ab, Primitive::kAllGather, 4, 4000), 6e-6, 1e-15);
  // alltoall with skew 2: 3 us + 2*3/4*4000 ns = 9 us
  EXPECT_NEAR(tier_collective_seconds(ab, Primitive::kAllToAll, 4, 4000, 2.0), 9e-6, 1e-15);
  // p2p: 1 us + 4000 ns
  EXPECT_NEAR(tier_collective_seconds(ab, Primitive::kP2p, 2, 4000), 5e-6, 1e-15);
  // One rank: no communication.
  EXPECT_EQ(tier_collective_seconds(ab, Primitive::kAllReduce, 1, 4000), 0.0);
}

TEST(CostModelTest, GroupInsideOneNodeUsesIntraTier) {
  const HardwareProfile p = two_tier(1e-6, 1e-9, 10e-6, 10e-9);
  EXPECT_NEAR(collective_seconds(p, Primitive::kAllReduce, {4, 1}, 4000), 12e-6, 1e-15);
  // One rank per node: the inter tier's ring, n = 2: 2*10 us + 2*1/2*4000*10 ns = 60 us
  EXPECT_NEAR(collective_seconds(p, Primitive::kAllReduce, {2, 2}, 4000), 60e-6, 1e-15);
  EXPECT_NEAR(collective_seconds(p, Primitive::kP2p, {2, 2}, 1000), 20e-6, 1e-15);
  EXPECT_NEAR(collective_seconds(p, Primitive::kP2p, {2, 1}, 1000), 2e-6, 1e-15);
}

TEST(CostModelTest, HierarchicalCollectivesAcrossNodes) {
  const HardwareProfile p = two_tier(1e-6, 1e-9, 10e-6, 10e-9);
  // 8 ranks on 2 nodes (g = 4), S = 8000:
  //   RS_intra(4, 8000) = 3 + 3/4*8 = 9 us; AR_inter(2, 2000) = 20 + 2000*10 ns = 40 us;
  //   AG_intra = 9 us -> 58 us
  EXPECT_NEAR(collective_seconds(p, Primitive::kAllReduce, {8, 2}, 8000), 58e-6, 1e-15);
  // RS = 9 + RS_inter(2, 2000) = 9 + (10 + 1/2*2000*10 ns = 20) = 29 us; AG the same.
  EXPECT_NEAR(collective_seconds(p, Primitive::kReduceScatter, {8, 2}, 8000), 29e-6, 1e-15);
  EXPECT_NEAR(collective_seconds(p, Primitive::kAllGather, {8, 2}, 8000), 29e-6, 1e-15);
  // alltoall: intra 3*1 + 3/8*8000 ns = 6 us; inter 4*10 + 4/8*8000*10 ns = 80 us -> 80 us
  EXPECT_NEAR(collective_seconds(p, Primitive::kAllToAll, {8, 2}, 8000), 80e-6, 1e-15);
  // Skew 1.5 scales both byte terms: inter 40 + 60 = 100 us
  EXPECT_NEAR(collective_seconds(p, Primitive::kAllToAll, {8, 2}, 8000, 1.5), 100e-6, 1e-15);
  // With a fast inter tier the intra part bounds it: inter 4*0 + 0.5*8000*0.01 ns = 0.04 us
  const HardwareProfile q = two_tier(1e-6, 1e-9, 0, 1e-11);
  EXPECT_NEAR(collective_seconds(q, Primitive::kAllToAll, {8, 2}, 8000), 6e-6, 1e-15);
}

TEST(CostModelTest, Roofline) {
  DeviceSpec d;
  d.peak_flops_bf16 = 100;
  d.peak_flops_fp8 = 400;
  d.memory_bandwidth = 10;
  d.compute_efficiency = 0.5;
  d.memory_efficiency = 0.5;
  // compute 100 / 50 = 2 s; memory 30 / 5 = 6 s -> memory-bound 6 s
  EXPECT_DOUBLE_EQ(roofline_seconds(d, 100, 30, false), 6.0);
  // compute 1000 / 50 = 20 s > 6 s
  EXPECT_DOUBLE_EQ(roofline_seconds(d, 1000, 30, false), 20.0);
  // FP8: 1000 / 200 = 5 s < 6 s
  EXPECT_DOUBLE_EQ(roofline_seconds(d, 1000, 30, true), 6.0);
  d.peak_flops_fp8 = 0;  // no FP8 units: the bf16 rate
  EXPECT_DOUBLE_EQ(roofline_seconds(d, 1000, 30, true), 20.0);
}

TEST(CalibrationFitTest, RecoversExactAlphaBeta) {
  for (Primitive p : {Primitive::kAllReduce, Primitive::kReduceScatter, Primitive::kAllGather, Primitive::kAllToAll,
                      Primitive::kP2p}) {
    const double alpha = 2e-6, beta = 1.0 / 100e9;
    double A = 0, B = 0;
    primitive_coefficients(p, 4, &A, &B);
    std::vector<TimedSize> s;
    for (double bytes = 4096; bytes <= 16e6; bytes *= 4) s.push_back({bytes, A * alpha + B * bytes * beta});
    auto ab = fit_alpha_beta(p, 4, s);
    ASSERT_TRUE(ab.ok()) << ab.status().to_string();
    EXPECT_NEAR(ab->alpha, alpha, alpha * 1e-9) << primitive_name(p);
    EXPECT_NEAR(ab->beta, beta, beta * 1e-9) << primitive_name(p);
  }
}

TEST(CalibrationFitTest, NegativeInterceptRefitsWithZeroAlpha) {
  // t = S * 1 ns exactly minus a little at small sizes: the free fit's alpha < 0.
  std::vector<TimedSize> s = {{1000, 0.5e-6}, {2000, 1.9e-6}, {4000, 4e-6}};
  auto ab = fit_alpha_beta(Primitive::kP2p, 2, s);
  ASSERT_TRUE(ab.ok());
  EXPECT_EQ(ab->alpha, 0.0);
  EXPECT_GT(ab->beta, 0.0);
}

TEST(CalibrationFitTest, Errors) {
  EXPECT_NE(fit_alpha_beta(Primitive::kAllReduce, 1, {{1, 1}, {2, 2}}).status().message().find(">= 2 ranks"),
            std::string::npos);
  EXPECT_NE(fit_alpha_beta(Primitive::kAllReduce, 2, {{1, 1}, {1, 2}}).status().message().find("two distinct"),
            std::string::npos);
  EXPECT_NE(fit_alpha_beta(Primitive::kAllReduce, 2, {{1, 0}, {2, 2}}).status().message().find("not positive"),
            std::string::npos);
}

}  // namespace
}  // namespace moe::planner
