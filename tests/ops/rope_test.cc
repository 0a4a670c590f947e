// RoPE: HF's rotate_half layout (dimension i pairs with i + head_dim/2, rotating by
// pos * theta^(-2i/head_dim)), the interleaved layout (pairs (2i, 2i+1)), linear and YaRN
// scaling by hand, strided heads at an offset (MLA), positions past the tabulated prefix.
// Torch-reference cases: rope_golden_test.cc.
#include "moe/ops/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace moe {
namespace {

TEST(RopeTest, PositionZeroIsIdentity) {
  RopeTable rope(8, 10000.0, 4);
  std::vector<float> x = {0.5f, -1.25f, 3.0f, 7.0f, -2.0f, 0.125f, 1e-3f, -9.5f,   // head 0
                          1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};        // head 1
  const std::vector<float> orig = x;
  rope.apply(x.data(), 1, 16, 2, 0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], orig[i]) << i;
}

TEST(RopeTest, HeadDim4Position1ByHand) {
  // head_dim 4, theta 1e4: inv_freq = [1e4^0, 1e4^(-2/4)] = [1, 0.01]. At position 1
  // the angles are [1, 0.01]; pairs are (0, 2) and (1, 3).
  RopeTable rope(4, 10000.0, 2);
  const float x0 = 1, x1 = 2, x2 = 3, x3 = 4;
  float x[4] = {x0, x1, x2, x3};
  rope.apply(x, 1, 4, 1, 1);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0);    // 0.5403023, 0.8414710
  const double c2 = std::cos(0.01), s2 = std::sin(0.01);  // 0.9999500, 0.0099998
  EXPECT_NEAR(x[0], x0 * c1 - x2 * s1, 1e-6);  // 1*0.5403 - 3*0.8415 = -1.9841107
  EXPECT_NEAR(x[2], x2 * c1 + x0 * s1, 1e-6);  // 3*0.5403 + 1*0.8415 =  2.4623779
  EXPECT_NEAR(x[1], x1 * c2 - x3 * s2, 1e-6);  // 2*0.99995 - 4*0.0099998 = 1.9599007
  EXPECT_NEAR(x[3], x3 * c2 + x1 * s2, 1e-6);  // 4*0.99995 + 2*0.0099998 = 4.0197996
  EXPECT_NEAR(x[0], -1.9841106, 1e-5);
  EXPECT_NEAR(x[1], 1.9599007, 1e-5);
  EXPECT_NEAR(x[2], 2.4623779, 1e-5);
  EXPECT_NEAR(x[3], 4.0197996, 1e-5);
}

// Independent reference in double for any head_dim / position.
void naive_rope(std::vector<double>& v, int head_dim, double theta, int64_t pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * i / head_dim);
    const double a = v[static_cast<size_t>(i)], b = v[static_cast<size_t>(i + half)];
    const double ang = static_cast<double>(pos) * inv_freq;
    v[static_cast<size_t>(i)] = a * std::cos(ang) - b * std::sin(ang);
    v[static_cast<size_t>(i + half)] = b * std::cos(ang) + a * std::sin(ang);
  }
}

TEST(RopeTest, ManyTokensHeadsStrideAndStartPos) {
  // 3 tokens at positions 5, 6, 7; 2 heads of 8 dims, rows padded to stride 20 (the
  // padding must be left alone).
  const int hd = 8, heads = 2;
  const int64_t stride = 20, m = 3, start = 5;
  const double theta = 1e6;
  RopeTable rope(hd, theta, 16);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(m * stride));
  for (auto& v : x) v = dist(rng);
  const std::vector<float> orig = x;
  rope.apply(x.data(), m, stride, heads, start);
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < heads; ++h) {
      std::vector<double> v(hd);
      for (int i = 0; i < hd; ++i) v[static_cast<size_t>(i)] = orig[static_cast<size_t>(t * stride + h * hd + i)];
      naive_rope(v, hd, theta, start + t);
      for (int i = 0; i < hd; ++i) {
        EXPECT_NEAR(x[static_cast<size_t>(t * stride + h * hd + i)], v[static_cast<size_t>(i)], 1e-5)
            << "t=" << t << " h=" << h << " i=" << i;
      }
    }
    for (int64_t j = heads * hd; j < stride; ++j) {
      EXPECT_EQ(x[static_cast<size_t>(t * stride + j)], orig[static_cast<size_t>(t * stride + j)]) << "padding " << j;
    }
  }
}

TEST(RopeTest, PreservesNormAndComposesWithStartPos) {
  const int hd = 16;
  RopeTable rope(hd, 10000.0, 64);
  std::vector<float> a(hd), b;
  for (int i = 0; i < hd; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i) - 7.5f;
  b = a;
  double n0 = 0;
  for (float v : a) n0 += static_cast<double>(v) * v;
  // Applying at position 40 in one go vs. as the second of two tokens starting at 39.
  rope.apply(a.data(), 1, hd, 1, 40);
  std::vector<float> two(2 * hd);
  std::copy(b.begin(), b.end(), two.begin() + hd);
  rope.apply(two.data(), 2, hd, 1, 39);
  double n1 = 0;
  for (int i = 0; i < hd; ++i) {
    EXPECT_EQ(a[static_cast<size_t>(i)], two[static_cast<size_t>(hd + i)]) << i;
    n1 += static_cast<double>(a[static_cast<size_t>(i)]) * a[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(n1, n0, 1e-4 * n0);
  EXPECT_EQ(rope.max_positions(), 64);
}


// The tensor entry ([m, heads, head_dim]) equals the raw kernel bit for bit.
TEST(RopeTensorTest, EntryMatchesRawKernel) {
  const int hd = 8, heads = 3;
  const int64_t m = 4;
  RopeTable rope(hd, 10000.0, 16);
  std::vector<float> a(static_cast<size_t>(m * heads * hd));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * static_cast<float>(i) - 3.0f;
  std::vector<float> b = a;
  rope.apply(a.data(), m, heads * hd, heads, 5);
  rope.apply(TensorView::f32(b.data(), {m, heads, hd}), 5);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
}

TEST(RopeTensorDeathTest, WrongHeadDimOrPastTheTableIsAProgrammingError) {
  RopeTable rope(8, 10000.0, 4);
  std::vector<float> x(64);
  EXPECT_DEATH(rope.apply(TensorView::f32(x.data(), {2, 2, 16}), 0), "");
  EXPECT_DEATH(rope.apply(TensorView::f32(x.data(), {2, 4, 8}), 3), "");
}

TEST(RopeTest, InterleavedHeadDim4Position1ByHand) {
  // Interleaved pairs (0, 1) and (2, 3) with angles [1, 0.01] at position 1.
  RopeTable rope(RopeParams{.dim = 4, .theta = 10000.0, .layout = RopeLayout::kInterleaved, .max_positions = 2});
  float x[4] = {1, 2, 3, 4};
  rope.apply(x, 1, 4, 1, 1);
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  EXPECT_NEAR(x[0], 1 * c1 - 2 * s1, 1e-6);  // -1.1426397
  EXPECT_NEAR(x[1], 2 * c1 + 1 * s1, 1e-6);  //  1.9220756
  EXPECT_NEAR(x[2], 3 * c2 - 4 * s2, 1e-6);  //  2.9598517
  EXPECT_NEAR(x[3], 4 * c2 + 3 * s2, 1e-6);  //  4.0297983
  EXPECT_NEAR(x[0], -1.1426397, 1e-5);
  EXPECT_NEAR(x[1], 1.9220756, 1e-5);
}

// Interleaved RoPE is rotate_half RoPE conjugated by the permutation 2i -> i,
// 2i + 1 -> i + d/2 (what transformers' apply_rotary_pos_emb_interleave does).
TEST(RopeTest, InterleavedEqualsRotateHalfUnderThePermutation) {
  const int d = 16, heads = 3;
  const int64_t m = 5, start = 1234;
  RopeParams p{.dim = d, .theta = 50000.0, .max_positions = 4096};
  p.scaling = RopeParams::Scaling::kYarn;
  p.factor = 8;
  p.original_max_position_embeddings = 512;
  p.mscale = 0.5;
  p.mscale_all_dim = 1.0;
  RopeParams pi = p;
  pi.layout = RopeLayout::kInterleaved;
  const RopeTable half_table(p), inter_table(pi);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> a(static_cast<size_t>(m * heads * d)), b(a.size());
  for (auto& v : a) v = dist(rng);
  auto perm = [&](int i) { return i % 2 == 0 ? i / 2 : i / 2 + d / 2; };  // interleaved index -> rotate_half index
  for (int64_t r = 0; r < m * heads; ++r) {
    for (int i = 0; i < d; ++i) b[static_cast<size_t>(r * d + perm(i))] = a[static_cast<size_t>(r * d + i)];
  }
  inter_table.apply(a.data(), m, heads * d, heads, start);
  half_table.apply(b.data(), m, heads * d, heads, start);
  for (int64_t r = 0; r < m * heads; ++r) {
    for (int i = 0; i < d; ++i) {
      EXPECT_EQ(a[static_cast<size_t>(r * d + i)], b[static_cast<size_t>(r * d + perm(i))]) << r << " " << i;
    }
  }
}

TEST(RopeTest, LinearScalingDividesThePosition) {
  // inv_freq / 2 is exact in f32, so position 2p under factor 2 equals position p unscaled.
  RopeParams lin{.dim = 8, .theta = 10000.0, .max_positions = 64};
  lin.scaling = RopeParams::Scaling::kLinear;
  lin.factor = 2.0;
  const RopeTable scaled(lin), plain(8, 10000.0, 64);
  std::vector<float> a(8), b;
  std::iota(a.begin(), a.end(), -3.0f);
  b = a;
  scaled.apply(a.data(), 1, 8, 1, 34);
  plain.apply(b.data(), 1, 8, 1, 17);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)]) << i;
  EXPECT_FLOAT_EQ(scaled.inv_freq()[1], 0.05f);  // 1e4^(-1/4) / 2
  EXPECT_EQ(scaled.attention_factor(), 1.0f);
}

// DeepSeek-V3's rope_scaling (qk_rope_head_dim 64, theta 1e4, factor 40, original 4096,
// beta 32/1, mscale 1/1). Correction range by hand: dim_at(r) = 64 ln(4096 / (2 pi r)) /
// (2 ln 1e4): dim_at(32) = 10.47 -> low 10, dim_at(1) = 22.51 -> high 23.
TEST(RopeTest, YarnDeepseekV3ByHand) {
  RopeParams p{.dim = 64, .theta = 10000.0, .layout = RopeLayout::kInterleaved, .max_positions = 163840};
  p.scaling = RopeParams::Scaling::kYarn;
  p.factor = 40;
  p.original_max_position_embeddings = 4096;
  p.beta_fast = 32;
  p.beta_slow = 1;
  p.mscale = 1;
  p.mscale_all_dim = 1;
  const RopeTable rope(p);
  const std::vector<float>& inv = rope.inv_freq();
  ASSERT_EQ(inv.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double extra = std::pow(1e4, -2.0 * i / 64), inter = extra / 40;
    const double ramp = std::clamp((i - 10) / 13.0, 0.0, 1.0);  // 0 up to 10, 1 from 23
    EXPECT_NEAR(inv[static_cast<size_t>(i)], inter * ramp + extra * (1 - ramp), 1e-6 * extra) << i;
  }
  EXPECT_NEAR(inv[16], std::pow(1e4, -0.5) * (6.0 / 13 / 40 + 7.0 / 13), 1e-9);
  EXPECT_EQ(rope.attention_factor(), 1.0f);  // get_mscale(40, 1) / get_mscale(40, 1)
  const double m = 0.1 * std::log(40.0) + 1;  // 1.3688879
  EXPECT_NEAR(yarn_softmax_scale_multiplier(p), m * m, 1e-12);
  EXPECT_NEAR(yarn_softmax_scale_multiplier(p), 1.8738542, 1e-6);
  EXPECT_EQ(rope.cached_positions(), RopeTable::kMaxCachedPositions);  // 163840 positions, small table
}

// Kimi-K2: theta 5e4, factor 32, beta 1/1: dim_at(1) = 64 ln(651.9) / (2 ln 5e4) = 19.17,
// so low 19, high 20: extrapolated below 20, interpolated from 20.
TEST(RopeTest, YarnKimiK2ByHand) {
  RopeParams p{.dim = 64, .theta = 50000.0, .layout = RopeLayout::kInterleaved, .max_positions = 131072};
  p.scaling = RopeParams::Scaling::kYarn;
  p.factor = 32;
  p.original_max_position_embeddings = 4096;
  p.beta_fast = 1;
  p.beta_slow = 1;
  p.mscale = 1;
  p.mscale_all_dim = 1;
  const std::vector<float> inv = rope_inv_freq(p);
  for (int i = 0; i < 32; ++i) {
    const double extra = std::pow(5e4, -2.0 * i / 64);
    EXPECT_NEAR(inv[static_cast<size_t>(i)], i < 20 ? extra : extra / 32, 1e-6 * extra) << i;
  }
  EXPECT_DOUBLE_EQ(yarn_attention_factor(p), 1.0);
  EXPECT_NEAR(yarn_softmax_scale_multiplier(p), std::pow(0.1 * std::log(32.0) + 1, 2), 1e-12);
}

TEST(RopeTest, YarnAttentionFactorRules) {
  RopeParams p{.dim = 8, .theta = 1e4, .max_positions = 8};
  EXPECT_EQ(yarn_attention_factor(p), 1.0);  // not yarn
  EXPECT_EQ(yarn_softmax_scale_multiplier(p), 1.0);
  p.scaling = RopeParams::Scaling::kLinear;
  p.factor = 4;
  p.mscale_all_dim = 1;
  EXPECT_EQ(yarn_attention_factor(p), 1.0);
  EXPECT_EQ(yarn_softmax_scale_multiplier(p), 1.0);  // only under yarn
  p.scaling = RopeParams::Scaling::kYarn;
  p.original_max_position_embeddings = 64;
  p.mscale = 2.0;
  p.mscale_all_dim = 0.0;  // absent: get_mscale(factor), mscale ignored (transformers)
  EXPECT_NEAR(yarn_attention_factor(p), 0.1 * std::log(4.0) + 1, 1e-15);
  EXPECT_EQ(yarn_softmax_scale_multiplier(p), 1.0);
  p.mscale_all_dim = 0.5;
  EXPECT_NEAR(yarn_attention_factor(p), (0.2 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-15);
  p.attention_factor = 0.9;
  EXPECT_EQ(yarn_attention_factor(p), 0.9);
  p.factor = 1.0;  // get_mscale(s <= 1) = 1
  EXPECT_EQ(yarn_softmax_scale_multiplier(p), 1.0);
  EXPECT_EQ(yarn_get_mscale(1.0, 5.0), 1.0);
  EXPECT_EQ(yarn_get_mscale(0.5), 1.0);
}

// MLA rows [heads][nope | rope]: only the rope part of each head turns, exactly as a
// contiguous [heads][rope] array would.
TEST(RopeTest, StridedHeadsAtAnOffsetLeaveTheRestAlone) {
  const int nope = 5, rope_dim = 6, heads = 3, head_stride = nope + rope_dim;
  const int64_t m = 4, row_stride = heads * head_stride + 2, start = 9;
  const RopeTable rope(RopeParams{.dim = rope_dim, .theta = 1e4, .layout = RopeLayout::kInterleaved, .max_positions = 32});
  std::vector<float> x(static_cast<size_t>(m * row_stride));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
  const std::vector<float> orig = x;
  std::vector<float> packed;  // [m, heads, rope_dim]
  for (int64_t t = 0; t < m; ++t) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < rope_dim; ++i) packed.push_back(x[static_cast<size_t>(t * row_stride + h * head_stride + nope + i)]);
    }
  }
  rope.apply(RopeTable::Rows{.x = x.data() + nope, .m = m, .row_stride = row_stride, .num_heads = heads,
                             .head_stride = head_stride},
             start);
  rope.apply(TensorView::f32(packed.data(), {m, heads, rope_dim}), start);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t j = 0; j < row_stride; ++j) {
      const size_t k = static_cast<size_t>(t * row_stride + j);
      const int64_t h = j / head_stride, in_head = j % head_stride;
      if (h < heads && in_head >= nope) {
        EXPECT_EQ(x[k], packed[static_cast<size_t>((t * heads + h) * rope_dim + in_head - nope)]) << t << " " << j;
      } else {
        EXPECT_EQ(x[k], orig[k]) << "untouched t=" << t << " j=" << j;
      }
    }
  }
}

// Positions past the tabulated prefix are computed per call with the same arithmetic:
// one call across the boundary equals per-token calls, and matches the double reference.
TEST(RopeTest, PastTheTabulatedPrefix) {
  const int hd = 8;
  const int64_t start = RopeTable::kMaxCachedPositions - 2, m = 5;
  const RopeTable rope(hd, 10000.0, int64_t{1} << 24);
  EXPECT_EQ(rope.max_positions(), int64_t{1} << 24);
  EXPECT_EQ(rope.cached_positions(), RopeTable::kMaxCachedPositions);
  std::vector<float> a(static_cast<size_t>(m * hd));
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  std::vector<float> b = a;
  const std::vector<float> orig = a;
  rope.apply(a.data(), m, hd, 1, start);
  for (int64_t t = 0; t < m; ++t) rope.apply(b.data() + t * hd, 1, hd, 1, start + t);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << i;
  for (int64_t t = 0; t < m; ++t) {
    std::vector<double> v(orig.begin() + t * hd, orig.begin() + (t + 1) * hd);
    naive_rope(v, hd, 10000.0, start + t);
    // f32 angle (pos * inv_freq) is off the double one by up to ~8192 * 2^-24 rad.
    for (int i = 0; i < hd; ++i) EXPECT_NEAR(a[static_cast<size_t>(t * hd + i)], v[static_cast<size_t>(i)], 2e-3) << t;
  }
  // The last position works and needs no table.
  std::vector<float> c(orig.begin(), orig.begin() + hd);
  rope.apply(c.data(), 1, hd, 1, (int64_t{1} << 24) - 1);
  double n0 = 0, n1 = 0;
  for (int i = 0; i < hd; ++i) {
    n0 += static_cast<double>(orig[static_cast<size_t>(i)]) * orig[static_cast<size_t>(i)];
    n1 += static_cast<double>(c[static_cast<size_t>(i)]) * c[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(n1, n0, 1e-5 * n0);
}

TEST(RopeTensorDeathTest, PastMaxPositionsOrBadParamsIsAProgrammingError) {
  const RopeTable rope(RopeParams{.dim = 4, .theta = 1e4, .max_positions = 10000});
  std::vector<float> x(8);
  EXPECT_DEATH(rope.apply(x.data(), 2, 4, 1, 9999), "");
  EXPECT_DEATH(rope.apply(x.data(), 1, 4, 1, -1), "");
  EXPECT_DEATH(RopeTable(RopeParams{.dim = 5, .theta = 1e4, .max_positions = 4}), "");
  RopeParams yarn{.dim = 4, .theta = 1e4, .max_positions = 4};
  yarn.scaling = RopeParams::Scaling::kYarn;
  yarn.factor = 4;  // original_max_position_embeddings missing
  EXPECT_DEATH(RopeTable{yarn}, "");
}

}  // namespace
}  // namespace moe
