// Multi-head latent attention (transformer/mla_attention.h) on the trained
// tiny-deepseek-v3-shakespeare weights: the naive path (K and V expanded from the latent
// cache) and the absorbed path (attention in the latent space) agree to rounding for a
// prefill and for decode steps, on every layer; the paged cache gives bitwise the
// contiguous cache's result (batch-invariant kernels); the cache holds kv_lora_rank + qk_rope_head_dim floats per
// position and layer; the block's output and cached latent rows match the torch
// reference's (tests/data/golden/deepseek-v3-mla), without and with YaRN. (Whole-model agreement with the torch reference: golden_test.cc.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "moe/model/hf_checkpoint.h"
#include "moe/transformer/mla_attention.h"
#include "test_util.h"

namespace moe {
namespace {

struct Model {
  ModelConfig config;
  HfCheckpoint ckpt;
  ModelWeights weights;
};

std::unique_ptr<Model> load_tiny_deepseek() {
  const std::string dir = testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare";
  auto m = std::make_unique<Model>();
  m->config = load_model_config(dir).value();
  m->ckpt = HfCheckpoint::open(dir).value();
  m->weights = bind_weights(m->config, m->ckpt, {}).value();
  return m;
}

std::vector<float> random_rows(int64_t m, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * n));
  for (float& v : x) v = d(rng);
  return x;
}

// Layer `layer` over a prompt of `prompt` rows, then `decode` single-row steps, with a
// contiguous latent cache; returns every output row in order.
std::vector<float> run_contiguous(const Model& model, MlaPath path, int layer, int64_t prompt, int64_t decode,
                                  const std::vector<float>& x, KernelOptions kernel = {}) {
  const ModelConfig& c = model.config;
  const int64_t hidden = c.hidden_size;
  MlaAttention block(c, model.weights, kernel, path);
  block.reserve(prompt, 1);
  const KvCacheShape shape = kv_cache_shape(c);
  KVCache cache(c.num_hidden_layers, shape.heads, shape.k_dim, prompt + decode, shape.v_dim);
  std::vector<float> out(x.size());
  auto step = [&](int64_t pos, int64_t n) {
    const RowSegment seg{0, n, pos, nullptr};
    block.forward(layer, TensorView::f32(x.data() + pos * hidden, {n, hidden}), AttentionBatch{&seg, 1, &cache, nullptr},
                  TensorView::f32(out.data() + pos * hidden, {n, hidden}));
  };
  step(0, prompt);
  for (int64_t t = 0; t < decode; ++t) step(prompt + t, 1);
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst / (double(*hi) - *lo);
}

TEST(MlaAttention, NaiveAndAbsorbedAgreeOnEveryLayer) {
  auto model = load_tiny_deepseek();
  const int64_t prompt = 24, decode = 6;
  const std::vector<float> x = random_rows(prompt + decode, model->config.hidden_size, 7);
  for (int layer = 0; layer < model->config.num_hidden_layers; ++layer) {
    const auto naive = run_contiguous(*model, MlaPath::kNaive, layer, prompt, decode, x);
    const auto absorbed = run_contiguous(*model, MlaPath::kAbsorbed, layer, prompt, decode, x);
    const double d = max_rel_diff(naive, absorbed);
    EXPECT_LT(d, 1e-5) << "layer " << layer;
    EXPECT_GT(d, 0.0) << "layer " << layer << ": two different computations agreeing bitwise means one path ran twice";
  }
}

TEST(MlaAttention, PagedCacheGivesTheContiguousResultBitwise) {
  auto model = load_tiny_deepseek();
  const ModelConfig& c = model->config;
  const int64_t hidden = c.hidden_size, n0 = 9, n1 = 14;
  const std::vector<float> x0 = random_rows(n0 + 1, hidden, 11), x1 = random_rows(n1 + 1, hidden, 12);
  for (MlaPath path : {MlaPath::kNaive, MlaPath::kAbsorbed}) {
    // Alone, contiguous: prompt then one decode row.
    const KernelOptions invariant{.batch_invariant = true};
    const auto alone0 = run_contiguous(*model, path, 1, n0, 1, x0, invariant);
    const auto alone1 = run_contiguous(*model, path, 1, n1, 1, x1, invariant);
    // Together over a paged cache (block size 4, scattered blocks): both prompts in one
    // forward, then both decode rows in another.
    MlaAttention block(c, model->weights, invariant, path);
    block.reserve(n0 + n1, 2);
    PagedKVCache paged(c.num_hidden_layers, kv_cache_shape(c), 4, 16);
    const std::vector<int32_t> t0 = {7, 2, 12}, t1 = {3, 0, 9, 5};
    std::vector<float> xs(x0.begin(), x0.begin() + n0 * hidden);
    xs.insert(xs.end(), x1.begin(), x1.begin() + n1 * hidden);
    std::vector<float> out((n0 + n1) * hidden), dec(2 * hidden);
    const RowSegment prefill[2] = {{0, n0, 0, t0.data()}, {n0, n1, 0, t1.data()}};
    block.forward(1, TensorView::f32(xs.data(), {n0 + n1, hidden}), AttentionBatch{prefill, 2, nullptr, &paged},
                  TensorView::f32(out.data(), {n0 + n1, hidden}));
    std::vector<float> xd(x0.begin() + n0 * hidden, x0.end());
    xd.insert(xd.end(), x1.begin() + n1 * hidden, x1.end());
    const RowSegment step[2] = {{0, 1, n0, t0.data()}, {1, 1, n1, t1.data()}};
    block.forward(1, TensorView::f32(xd.data(), {2, hidden}), AttentionBatch{step, 2, nullptr, &paged},
                  TensorView::f32(dec.data(), {2, hidden}));
    for (int64_t i = 0; i < n0 * hidden; ++i) ASSERT_EQ(out[i], alone0[i]) << i;
    for (int64_t i = 0; i < n1 * hidden; ++i) ASSERT_EQ(out[n0 * hidden + i], alone1[i]) << i;
    for (int64_t i = 0; i < hidden; ++i) {
      ASSERT_EQ(dec[i], alone0[n0 * hidden + i]) << i;
      ASSERT_EQ(dec[hidden + i], alone1[n1 * hidden + i]) << i;
    }
  }
}

TEST(MlaAttention, CacheHoldsTheLatentRowOnly) {
  auto model = load_tiny_deepseek();
  const ModelConfig& c = model->config;
  const KvCacheShape s = kv_cache_shape(c);
  EXPECT_EQ(s.heads, 1);
  EXPECT_EQ(s.k_dim, 32 + 16);  // kv_lora_rank + qk_rope_head_dim
  EXPECT_EQ(s.v_dim, 0);
  EXPECT_EQ(s.bytes_per_token_per_layer(), 48u * 4);
  KVCache cache(c.num_hidden_layers, s.heads, s.k_dim, 100, s.v_dim);
  EXPECT_EQ(cache.bytes(), 4u * 100 * 48 * 4);
  // A naive per-head cache would hold 2 x 4 heads x 48 (keys) / 32 (values) per position:
  // 320 floats against 48.
  ModelConfig v3 = c;
  v3.mla.kv_lora_rank = 512;
  v3.mla.qk_rope_head_dim = 64;
  EXPECT_EQ(kv_cache_shape(v3).bytes_per_token_per_layer(), 576u * 4);  // DeepSeek-V3: (512 + 64) values
}

TEST(MlaAttention, SoftmaxScaleFollowsYarnMscale) {
  auto model = load_tiny_deepseek();
  ModelConfig c = model->config;
  EXPECT_FLOAT_EQ(MlaAttention::softmax_scale(c), 1.0f / std::sqrt(48.0f));
  c.rope_scaling.type = RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 40;
  c.rope_scaling.mscale_all_dim = 1.0;
  const double m = 0.1 * std::log(40.0) + 1.0;  // DeepSeek-V3: yarn_get_mscale(40, 1) = 1.3689
  EXPECT_FLOAT_EQ(MlaAttention::softmax_scale(c), static_cast<float>(m * m / std::sqrt(48.0)));
  c.rope_scaling.mscale_all_dim = 0;  // absent: no change
  EXPECT_FLOAT_EQ(MlaAttention::softmax_scale(c), 1.0f / std::sqrt(48.0f));
}

// The block alone against tools/reference/make_deepseek_mla_golden.py: layer 1 of the
// tiny model over 20 positions, output within 1e-4 (absolute; outputs reach ~0.27) on
// each path, and the cache holding [RMSNorm(c_kv) | RoPE'd k_rope] per position.
TEST(MlaAttention, BlockMatchesTheTorchReferenceWithAndWithoutYarn) {
  auto model = load_tiny_deepseek();
  const std::string dir = testing::golden_dir() + "/deepseek-v3-mla";
  const auto cases = nlohmann::json::parse(testing::read_file(dir + "/cases.json"));
  const int layer = cases["layer"].get<int>();
  const int64_t n = cases["n_tokens"].get<int64_t>(), hidden = model->config.hidden_size;
  const std::vector<float> x = testing::read_f32(dir + "/" + cases["x_file"].get<std::string>());
  ASSERT_EQ(static_cast<int64_t>(x.size()), n * hidden);
  for (const auto& variant : cases["variants"]) {
    SCOPED_TRACE(variant["name"].get<std::string>());
    ModelConfig c = model->config;
    if (!variant["rope_scaling"].is_null()) {
      const auto& rs = variant["rope_scaling"];
      c.rope_scaling.type = RopeScaling::Type::kYarn;
      c.rope_scaling.factor = rs["factor"].get<double>();
      c.rope_scaling.original_max_position_embeddings = rs["original_max_position_embeddings"].get<int>();
      c.rope_scaling.beta_fast = rs["beta_fast"].get<double>();
      c.rope_scaling.beta_slow = rs["beta_slow"].get<double>();
      c.rope_scaling.mscale = rs["mscale"].get<double>();
      c.rope_scaling.mscale_all_dim = rs["mscale_all_dim"].get<double>();
    }
    EXPECT_NEAR(MlaAttention::softmax_scale(c), variant["softmax_scale"].get<double>(), 1e-7);
    const std::vector<float> want = testing::read_f32(dir + "/" + variant["out_file"].get<std::string>());
    const std::vector<float> latent = testing::read_f32(dir + "/" + variant["latent_file"].get<std::string>());
    for (MlaPath path : {MlaPath::kNaive, MlaPath::kAbsorbed}) {
      MlaAttention block(c, model->weights, KernelOptions{}, path);
      block.reserve(n, 1);
      const KvCacheShape shape = kv_cache_shape(c);
      KVCache cache(c.num_hidden_layers, shape.heads, shape.k_dim, n, shape.v_dim);
      std::vector<float> out(static_cast<size_t>(n * hidden));
      const RowSegment seg{0, n, 0, nullptr};
      block.forward(layer, TensorView::f32(x.data(), {n, hidden}), AttentionBatch{&seg, 1, &cache, nullptr},
                    TensorView::f32(out.data(), {n, hidden}));
      double worst = 0;
      for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(double(out[i]) - want[i]));
      EXPECT_LT(worst, 1e-4) << (path == MlaPath::kNaive ? "naive" : "absorbed");
      double worst_latent = 0;
      const float* rows = cache.k(layer);
      for (size_t i = 0; i < latent.size(); ++i) worst_latent = std::max(worst_latent, std::fabs(double(rows[i]) - latent[i]));
      EXPECT_LT(worst_latent, 1e-4);
    }
  }
}

}  // namespace
}  // namespace moe
