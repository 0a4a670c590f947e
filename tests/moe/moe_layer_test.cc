// moe_forward on a tiny random layer (own buffers, Weight2D views) against a naive
// per-token double-precision reference: softmax over experts -> top-k -> renormalise ->
// sum_j w_j * w2(silu(w1 x) * w3 x).
#include "moe/moe/moe_layer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "moe/tensor/dtype.h"

namespace moe {
namespace {

constexpr int kHidden = 8, kInter = 12, kExperts = 4, kTopK = 2;

// A matrix stored in `dtype`, with its exact values kept in double.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> storage;
  std::vector<double> values;
  Weight2D view() const { return Weight2D{storage.data(), dtype, rows, cols}; }
  DType dtype = DType::kF32;
};

Mat make_mat(DType dt, int64_t rows, int64_t cols, std::mt19937& rng, float scale) {
  Mat m;
  m.rows = rows;
  m.cols = cols;
  m.dtype = dt;
  std::uniform_real_distribution<float> dist(-scale, scale);
  m.storage.resize(static_cast<size_t>(rows * cols) * dtype_size(dt));
  m.values.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = dist(rng);
    uint8_t* p = m.storage.data() + static_cast<size_t>(i) * dtype_size(dt);
    if (dt == DType::kF32) {
      std::memcpy(p, &v, 4);
    } else {
      // Keep the value the stored bf16 holds: truncate the f32 to its high half, and
      // record that exact value (bf16_to_f32 of a high half is just a shift).
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = static_cast<uint16_t>(bits >> 16);
      bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&v, &bits, 4);
      std::memcpy(p, &h, 2);
    }
    m.values[static_cast<size_t>(i)] = v;
  }
  return m;
}

struct TinyLayer {
  Mat router;
  std::vector<Mat> w1, w2, w3;
  LayerWeights layer;
  ModelConfig config;
};

TinyLayer make_layer(DType dt, bool norm_topk, uint32_t seed) {
  std::mt19937 rng(seed);
  TinyLayer t;
  t.config.hidden_size = kHidden;
  t.config.intermediate_size = kInter;
  t.config.moe_intermediate_size = kInter;
  t.config.router.num_experts = kExperts;
  t.config.router.top_k = kTopK;
  t.config.router.norm_topk_prob = norm_topk;
  // Router weights large enough that routing margins are well above f32 rounding.
  t.router = make_mat(dt, kExperts, kHidden, rng, 1.0f);
  for (int e = 0; e < kExperts; ++e) {
    t.w1.push_back(make_mat(dt, kInter, kHidden, rng, 0.5f));
    t.w2.push_back(make_mat(dt, kHidden, kInter, rng, 0.5f));
    t.w3.push_back(make_mat(dt, kInter, kHidden, rng, 0.5f));
  }
  t.layer.router = t.router.view();
  t.layer.experts.resize(kExperts);
  for (int e = 0; e < kExperts; ++e) {
    auto& ew = t.layer.experts[static_cast<size_t>(e)];
    ew.w1 = t.w1[static_cast<size_t>(e)].view();
    ew.w2 = t.w2[static_cast<size_t>(e)].view();
    ew.w3 = t.w3[static_cast<size_t>(e)].view();
    ew.loaded = true;
  }
  return t;
}

std::vector<double> matvec(const Mat& m, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(m.rows), 0.0);
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) y[static_cast<size_t>(r)] += m.values[static_cast<size_t>(r * m.cols + c)] * x[static_cast<size_t>(c)];
  }
  return y;
}

// Returns the reference output and records, per token, the smallest gap between the
// k-th and (k+1)-th routing probability (to make sure the test is not a coin flip).
std::vector<double> naive_moe(const TinyLayer& t, const std::vector<float>& x, int64_t num_tokens, double* min_margin) {
  std::vector<double> out(static_cast<size_t>(num_tokens * kHidden), 0.0);
  *min_margin = 1e9;
  for (int64_t tok = 0; tok < num_tokens; ++tok) {
    std::vector<double> xt(kHidden);
    for (int i = 0; i < kHidden; ++i) xt[static_cast<size_t>(i)] = x[static_cast<size_t>(tok * kHidden + i)];
    std::vector<double> p = matvec(t.router, xt);
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (auto& v : p) sum += (v = std::exp(v - mx));
    for (auto& v : p) v /= sum;
    std::vector<int> order(kExperts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
    *min_margin = std::min(*min_margin, p[static_cast<size_t>(order[kTopK - 1])] - p[static_cast<size_t>(order[kTopK])]);
    double norm = 0;
    for (int j = 0; j < kTopK; ++j) norm += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
    if (!t.config.router.norm_topk_prob) norm = 1.0;
    for (int j = 0; j < kTopK; ++j) {
      const int e = order[static_cast<size_t>(j)];
      const double w = p[static_cast<size_t>(e)] / norm;
      std::vector<double> g = matvec(t.w1[static_cast<size_t>(e)], xt);
      const std::vector<double> u = matvec(t.w3[static_cast<size_t>(e)], xt);
      for (int i = 0; i < kInter; ++i) {
        const double gi = g[static_cast<size_t>(i)];
        g[static_cast<size_t>(i)] = gi / (1.0 + std::exp(-gi)) * u[static_cast<size_t>(i)];
      }
      const std::vector<double> y = matvec(t.w2[static_cast<size_t>(e)], g);
      for (int i = 0; i < kHidden; ++i) out[static_cast<size_t>(tok * kHidden + i)] += w * y[static_cast<size_t>(i)];
    }
  }
  return out;
}

struct MoeCase {
  DType dtype;
  bool norm_topk;
};

class MoeLayerTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeLayerTest, MatchesNaivePerTokenReference) {
  const auto [dt, norm_topk] = GetParam();
  const TinyLayer t = make_layer(dt, norm_topk, 1234);
  MoeWorkspace ws;  // reused across calls of different sizes, as the decoder does
  // 1 and 3 tokens: every expert group is small (GEMV path); 7 and 40: some groups > 4
  // tokens (GEMM path); then 2 again to check nothing stale leaks from the workspace.
  for (int64_t n : {1, 3, 7, 40, 2}) {
    SCOPED_TRACE("num_tokens=" + std::to_string(n));
    std::mt19937 rng(static_cast<uint32_t>(n * 17));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<float> x(static_cast<size_t>(n * kHidden));
    for (auto& v : x) v = dist(rng);
    double margin = 0;
    const std::vector<double> want = naive_moe(t, x, n, &margin);
    ASSERT_GT(margin, 1e-4) << "test data has a near-tie in routing; pick another seed";
    std::vector<float> out(static_cast<size_t>(n * kHidden) + 3, 1e30f);  // garbage: must be overwritten
    moe_forward(MoeLayerArgs::f32(t.config, t.layer, x.data(), n, out.data()), &ws);
    double max_abs = 0;
    for (double v : want) max_abs = std::max(max_abs, std::fabs(v));
    ASSERT_GT(max_abs, 0.05);  // the reference is not trivially ~0
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "element " << i;
    }
    for (size_t i = want.size(); i < out.size(); ++i) EXPECT_EQ(out[i], 1e30f) << "wrote past output at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeLayerTest,
                         ::testing::Values(MoeCase{DType::kF32, true}, MoeCase{DType::kBF16, true},
                                           MoeCase{DType::kF32, false}),
                         [](const ::testing::TestParamInfo<MoeCase>& info) {
                           return std::string(dtype_name(info.param.dtype)) + (info.param.norm_topk ? "_norm" : "_raw");
                         });

// Every token sees exactly the experts it was routed to: make one expert's w2 huge and
// check only the tokens routed to it change.
TEST(MoeLayerRoutingTest, OnlyRoutedExpertsContribute) {
  TinyLayer t = make_layer(DType::kF32, true, 99);
  const int64_t n = 12;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n * kHidden));
  for (auto& v : x) v = dist(rng);
  MoeWorkspace ws;
  std::vector<float> base(static_cast<size_t>(n * kHidden));
  moe_forward(MoeLayerArgs::f32(t.config, t.layer, x.data(), n, base.data()), &ws);
  const std::vector<int> routed_idx(ws.topk_idx.begin(), ws.topk_idx.begin() + n * kTopK);

  // Scale expert 3's down projection by 2.
  Mat& w2 = t.w2[3];
  for (int64_t i = 0; i < w2.rows * w2.cols; ++i) {
    float* p = reinterpret_cast<float*>(w2.storage.data()) + i;
    *p *= 2.0f;
  }
  std::vector<float> changed(base.size());
  moe_forward(MoeLayerArgs::f32(t.config, t.layer, x.data(), n, changed.data()), &ws);
  int routed_to_3 = 0;
  for (int64_t tok = 0; tok < n; ++tok) {
    const bool uses3 = routed_idx[static_cast<size_t>(tok * kTopK)] == 3 || routed_idx[static_cast<size_t>(tok * kTopK + 1)] == 3;
    routed_to_3 += uses3;
    bool differs = false;
    for (int i = 0; i < kHidden; ++i) {
      differs |= base[static_cast<size_t>(tok * kHidden + i)] != changed[static_cast<size_t>(tok * kHidden + i)];
    }
    EXPECT_EQ(differs, uses3) << "token " << tok;
  }
  EXPECT_GT(routed_to_3, 0);
  EXPECT_LT(routed_to_3, n);
}

// grouped_expert_ffn with explicit assignments, some slots -1 (expert held elsewhere):
// out[r] = sum over valid slots of weight * expert(x_r); a row with no valid slot is 0.
// Expert 3 is never referenced and is marked not loaded.
TEST(GroupedExpertFfnTest, ExplicitAssignmentsWithSkippedSlots) {
  TinyLayer t = make_layer(DType::kF32, true, 321);
  t.layer.experts[3].loaded = false;
  const int64_t rows = 6;
  const int idx[rows * kTopK] = {0, 2, -1, 1, 2, -1, -1, -1, 1, 0, 2, 2};
  const float wts[rows * kTopK] = {0.7f, 0.3f, 0.5f, 1.5f, -0.25f, 9.0f, 4.0f, 4.0f, 0.5f, 0.5f, 1.0f, 2.0f};
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(rows * kHidden));
  for (auto& v : x) v = dist(rng);
  ExpertWorkspace ws;
  std::vector<float> out(static_cast<size_t>(rows * kHidden), 1e30f);
  grouped_expert_ffn(MoeLayerArgs::f32(t.config, t.layer, x.data(), rows, out.data()), {idx, wts, rows, kTopK}, &ws);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> xr(kHidden);
    for (int i = 0; i < kHidden; ++i) xr[static_cast<size_t>(i)] = x[static_cast<size_t>(r * kHidden + i)];
    std::vector<double> want(kHidden, 0.0);
    for (int j = 0; j < kTopK; ++j) {
      const int e = idx[r * kTopK + j];
      if (e < 0) continue;
      std::vector<double> g = matvec(t.w1[static_cast<size_t>(e)], xr);
      const std::vector<double> u = matvec(t.w3[static_cast<size_t>(e)], xr);
      for (int i = 0; i < kInter; ++i) {
        const double gi = g[static_cast<size_t>(i)];
        g[static_cast<size_t>(i)] = gi / (1.0 + std::exp(-gi)) * u[static_cast<size_t>(i)];
      }
      const std::vector<double> y = matvec(t.w2[static_cast<size_t>(e)], g);
      for (int i = 0; i < kHidden; ++i) want[static_cast<size_t>(i)] += wts[r * kTopK + j] * y[static_cast<size_t>(i)];
    }
    for (int i = 0; i < kHidden; ++i) {
      const float got = out[static_cast<size_t>(r * kHidden + i)];
      if (r == 3) {
        EXPECT_EQ(got, 0.0f) << "row with no local expert, i=" << i;
      } else {
        EXPECT_NEAR(got, want[static_cast<size_t>(i)], 1e-5 * (1 + std::fabs(want[static_cast<size_t>(i)])))
            << "row " << r << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// Dropless memory bound: processing the grouped assignments in chunks of 3 rows (an
// expert's batch split across chunks) gives the reference result, like one chunk.
TEST(MoeLayerChunkTest, ChunkedExpertBatchesMatchReference) {
  TinyLayer t = make_layer(DType::kF32, true, 3);
  const int64_t n = 40;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n * kHidden));
  for (auto& v : x) v = dist(rng);
  double margin = 0;
  const std::vector<double> want = naive_moe(t, x, n, &margin);
  ASSERT_GT(margin, 1e-4);
  for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{1} << 20}) {
    SCOPED_TRACE("max_chunk_rows=" + std::to_string(chunk));
    MoeWorkspace ws;
    ws.experts.max_chunk_rows = chunk;
    std::vector<float> out(static_cast<size_t>(n * kHidden));
    moe_forward(MoeLayerArgs::f32(t.config, t.layer, x.data(), n, out.data()), &ws);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i])));
    // Buffers hold at most one chunk of rows.
    EXPECT_LE(ws.experts.gathered.size(), static_cast<size_t>(std::min<int64_t>(chunk, n * kTopK) * kHidden));
  }
}

// Workspaces sized up front: after reserve() for a batch limit, steps of up to that many
// tokens reuse the buffers (no reallocation inside the layer loop).
TEST(MoeWorkspaceTest, ReserveCoversStepsUpToTheBatchLimit) {
  const TinyLayer t = make_layer(DType::kF32, true, 11);
  constexpr int64_t kMaxTokens = 40;
  MoeWorkspace ws;
  ws.reserve(t.config, kMaxTokens);
  const float* logits = ws.router_logits.data();
  const int* idx = ws.topk_idx.data();
  const float* gathered = ws.experts.gathered.data();
  const float* gate = ws.experts.gate.data();
  const int* token_idx = ws.experts.groups.token_idx.data();
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (int64_t n : {int64_t{1}, kMaxTokens, int64_t{7}}) {
    std::vector<float> x(static_cast<size_t>(n * kHidden)), out(x.size());
    for (auto& v : x) v = dist(rng);
    moe_forward(MoeLayerArgs::f32(t.config, t.layer, x.data(), n, out.data()), &ws);
    EXPECT_EQ(ws.router_logits.data(), logits) << n;
    EXPECT_EQ(ws.topk_idx.data(), idx) << n;
    EXPECT_EQ(ws.experts.gathered.data(), gathered) << n;
    EXPECT_EQ(ws.experts.gate.data(), gate) << n;
    EXPECT_EQ(ws.experts.groups.token_idx.data(), token_idx) << n;
  }
}

}  // namespace
}  // namespace moe
