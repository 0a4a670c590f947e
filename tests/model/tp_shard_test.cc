// Tensor-parallel weight sharding (model/tp_shard.h): every slice's shape and values
// against the full tensor (dequantised to f32 on both sides, so FP8 slices are checked
// with their block scales), the local config, the vocabulary shards, and each error.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "contains_util.h"
#include "fp8_model_util.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/tp_shard.h"
#include "moe/model/weights.h"
#include "test_util.h"

namespace moe {
namespace {

struct Model {
  ModelConfig config;
  HfCheckpoint ckpt;
  ModelWeights weights;
};

std::unique_ptr<Model> load(const std::string& dir, const ExpertFilter& filter = nullptr) {
  auto m = std::make_unique<Model>();
  m->config = load_model_config(dir).value();
  m->ckpt = HfCheckpoint::open(dir).value();
  m->weights = bind_weights(m->config, m->ckpt, filter).value();
  return m;
}

std::vector<float> to_f32(const Weight2D& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  dequantize_rows_f32(w, 0, w.rows, out.data());
  return out;
}

// `part` is rows [row0, row0 + part.rows) of `full` (a column-parallel / vocab slice).
void expect_rows(const Weight2D& full, const Weight2D& part, int64_t row0, int64_t rows, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(part.rows, rows);
  ASSERT_EQ(part.cols, full.cols);
  ASSERT_EQ(part.dtype, full.dtype);
  EXPECT_EQ(part.has_scale(), full.has_scale());
  const std::vector<float> f = to_f32(full), p = to_f32(part);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < full.cols; ++c) {
      ASSERT_EQ(p[static_cast<size_t>(r * full.cols + c)], f[static_cast<size_t>((row0 + r) * full.cols + c)])
          << "row " << r << " col " << c;
    }
  }
}

// `part` is columns [col0, col0 + cols) of `full` (a row-parallel slice), a copy.
void expect_cols(const Weight2D& full, const Weight2D& part, int64_t col0, int64_t cols, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(part.rows, full.rows);
  ASSERT_EQ(part.cols, cols);
  ASSERT_EQ(part.dtype, full.dtype);
  EXPECT_EQ(part.has_scale(), full.has_scale());
  EXPECT_NE(part.data, full.data);
  const std::vector<float> f = to_f32(full), p = to_f32(part);
  for (int64_t r = 0; r < full.rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(p[static_cast<size_t>(r * cols + c)], f[static_cast<size_t>(r * full.cols + col0 + c)])
          << "row " << r << " col " << c;
    }
  }
}

void expect_same(const Weight2D& full, const Weight2D& part, const std::string& what) {
  EXPECT_EQ(part.data, full.data) << what;
  EXPECT_EQ(part.rows, full.rows) << what;
  EXPECT_EQ(part.cols, full.cols) << what;
}

void expect_expert(const ExpertWeights& full, const ExpertWeights& part, int rank, int tp, const std::string& what) {
  ASSERT_EQ(part.loaded, full.loaded) << what;
  if (!full.loaded) return;
  const int64_t n = full.w1.rows / tp;
  expect_rows(full.w1, part.w1, rank * n, n, what + " w1");
  expect_rows(full.w3, part.w3, rank * n, n, what + " w3");
  expect_cols(full.w2, part.w2, rank * n, n, what + " w2");
}

// Every tensor of rank `rank`'s shard against the full weights.
void expect_shard(const ModelConfig& c, const ModelWeights& full, const ModelWeights& part, int rank, int tp) {
  const VocabShard v = vocab_shard(c.vocab_size, rank, tp);
  expect_rows(full.embed_tokens, part.embed_tokens, v.begin, v.size(), "embed_tokens");
  expect_rows(full.lm_head, part.lm_head, v.begin, v.size(), "lm_head");
  EXPECT_EQ(part.final_norm, full.final_norm);
  ASSERT_EQ(part.layers.size(), full.layers.size());
  for (size_t l = 0; l < full.layers.size(); ++l) {
    const LayerWeights& F = full.layers[l];
    const LayerWeights& P = part.layers[l];
    const std::string at = "layer " + std::to_string(l) + " ";
    EXPECT_EQ(P.input_norm, F.input_norm);
    EXPECT_EQ(P.post_attention_norm, F.post_attention_norm);
    if (c.mla.enabled()) {
      const MlaConfig& m = c.mla;
      const int64_t hl = c.num_attention_heads / tp;
      if (m.q_lora_rank > 0) {
        expect_same(F.mla.q_a_proj, P.mla.q_a_proj, at + "q_a_proj");
        EXPECT_EQ(P.mla.q_a_norm, F.mla.q_a_norm);
        expect_rows(F.mla.q_b_proj, P.mla.q_b_proj, rank * hl * m.qk_head_dim(), hl * m.qk_head_dim(), at + "q_b_proj");
      } else {
        expect_rows(F.mla.q_proj, P.mla.q_proj, rank * hl * m.qk_head_dim(), hl * m.qk_head_dim(), at + "q_proj");
      }
      expect_same(F.mla.kv_a_proj, P.mla.kv_a_proj, at + "kv_a_proj");
      EXPECT_EQ(P.mla.kv_a_norm, F.mla.kv_a_norm);
      const int64_t kvb = m.qk_nope_head_dim + m.v_head_dim;
      expect_rows(F.mla.kv_b_proj, P.mla.kv_b_proj, rank * hl * kvb, hl * kvb, at + "kv_b_proj");
      expect_cols(F.o_proj, P.o_proj, rank * hl * m.v_head_dim, hl * m.v_head_dim, at + "o_proj");
    } else {
      const int64_t q = F.q_proj.rows / tp, kv = F.k_proj.rows / tp;
      EXPECT_EQ(q, static_cast<int64_t>(c.num_attention_heads / tp) * c.head_dim);
      expect_rows(F.q_proj, P.q_proj, rank * q, q, at + "q_proj");
      expect_rows(F.k_proj, P.k_proj, rank * kv, kv, at + "k_proj");
      expect_rows(F.v_proj, P.v_proj, rank * kv, kv, at + "v_proj");
      expect_cols(F.o_proj, P.o_proj, rank * q, q, at + "o_proj");
      if (c.attention_qkv_bias) {
        ASSERT_EQ(P.q_bias.size(), static_cast<size_t>(q));
        ASSERT_EQ(P.k_bias.size(), static_cast<size_t>(kv));
        EXPECT_TRUE(std::equal(P.q_bias.begin(), P.q_bias.end(), F.q_bias.begin() + rank * q));
        EXPECT_TRUE(std::equal(P.k_bias.begin(), P.k_bias.end(), F.k_bias.begin() + rank * kv));
        EXPECT_TRUE(std::equal(P.v_bias.begin(), P.v_bias.end(), F.v_bias.begin() + rank * kv));
      } else {
        EXPECT_TRUE(P.q_bias.empty());
      }
      EXPECT_EQ(P.q_norm, F.q_norm);
      EXPECT_EQ(P.k_norm, F.k_norm);
    }
    if (!c.is_moe_layer(static_cast<int>(l))) {
      expect_expert(F.dense_mlp, P.dense_mlp, rank, tp, at + "dense_mlp");
      EXPECT_EQ(P.dense_mlp.w1.rows, c.intermediate_size / tp);
      continue;
    }
    expect_same(F.router, P.router, at + "router");
    EXPECT_EQ(P.score_bias, F.score_bias);
    expect_same(F.shared_expert_gate, P.shared_expert_gate, at + "shared_expert_gate");
    expect_expert(F.shared_expert, P.shared_expert, rank, tp, at + "shared_expert");
    ASSERT_EQ(P.experts.size(), F.experts.size());
    for (size_t e = 0; e < F.experts.size(); ++e) {
      expect_expert(F.experts[e], P.experts[e], rank, tp, at + "expert " + std::to_string(e));
      if (F.experts[e].loaded) {
        EXPECT_EQ(P.experts[e].w1.rows, c.moe_intermediate_size / tp);
      }
    }
  }
}

void check_model(const std::string& dir, const std::vector<int>& tps, const ExpertFilter& filter = nullptr) {
  auto model = load(dir, filter);
  for (int tp : tps) {
    ASSERT_TRUE(check_tp_shardable(model->config, tp).ok()) << check_tp_shardable(model->config, tp).message();
    for (int rank = 0; rank < tp; ++rank) {
      SCOPED_TRACE(dir + " tp " + std::to_string(tp) + " rank " + std::to_string(rank));
      TpWeightStorage storage;
      auto shard = shard_weights_for_tp(model->config, model->weights, rank, tp, &storage);
      ASSERT_TRUE(shard.ok()) << shard.status().message();
      expect_shard(model->config, model->weights, shard.value(), rank, tp);
      EXPECT_GT(storage.bytes, 0u);
    }
  }
}

std::string model_path(const std::string& rel) { return testing::source_dir() + "/" + rel; }

TEST(TpShard, MixtralGqaSlicesMatchTheFullTensors) { check_model(testing::tiny_model_dir(), {1, 2}); }

TEST(TpShard, Qwen2QkvBiasSharedExpertAndDenseLayer) {
  check_model(model_path("tests/data/models/random-qwen2-moe"), {2});
}

TEST(TpShard, Qwen3QkNormIsReplicated) { check_model(model_path("tests/data/models/random-qwen3-moe"), {2}); }

TEST(TpShard, DeepseekV3MlaHeadsSplitLatentReplicated) {
  check_model(model_path("models/tiny-deepseek-v3-shakespeare"), {2, 4});
}

TEST(TpShard, DeepseekV2LiteMlaWithoutQLora) {
  check_model(model_path("tests/data/models/random-deepseek-v2-lite"), {2, 4});
}

TEST(TpShard, ExpertsOfOtherEpRanksStayUnloaded) {
  check_model(testing::tiny_model_dir(), {2}, [](int, int e) { return e % 2 == 1; });
}

// FP8 (tiny Mixtral quantised in [24, 32] blocks): column slices start mid-block (row
// phase 64 % 24), row-parallel slices carry their scale columns.
TEST(TpShard, Fp8SlicesKeepTheirBlockScales) {
  testing::ScopedTempDir dir("tp_shard_fp8");
  testing::make_fp8_model(testing::tiny_model_dir(), dir.file("fp8"), 24, 32);
  check_model(dir.file("fp8"), {2});
  auto model = load(dir.file("fp8"));
  TpWeightStorage storage;
  const ModelWeights part = shard_weights_for_tp(model->config, model->weights, 1, 2, &storage).value();
  EXPECT_EQ(part.layers[0].q_proj.row_phase, 64 % 24);
  EXPECT_EQ(part.layers[0].o_proj.scale_cols(), 2);  // 64 columns in blocks of 32
}

TEST(TpShard, LocalConfigDividesHeadsAndWidths) {
  const ModelConfig c = load_model_config(model_path("tests/data/models/random-qwen2-moe")).value();
  const ModelConfig l = tp_local_config(c, 2);
  EXPECT_EQ(l.num_attention_heads, 2);
  EXPECT_EQ(l.num_key_value_heads, 1);
  EXPECT_EQ(l.intermediate_size, 48);
  EXPECT_EQ(l.moe_intermediate_size, 16);
  EXPECT_EQ(l.shared_expert_intermediate_size, 24);
  EXPECT_EQ(l.hidden_size, c.hidden_size);
  EXPECT_EQ(l.vocab_size, c.vocab_size);
  EXPECT_EQ(l.head_dim, c.head_dim);
  const ModelConfig d = load_model_config(model_path("models/tiny-deepseek-v3-shakespeare")).value();
  const ModelConfig dl = tp_local_config(d, 4);
  EXPECT_EQ(dl.num_attention_heads, 1);
  EXPECT_EQ(dl.mla.kv_lora_rank, d.mla.kv_lora_rank);
  EXPECT_EQ(dl.mla.v_head_dim, d.mla.v_head_dim);
  EXPECT_EQ(dl.moe_intermediate_size, 16);
}

TEST(TpShard, VocabShardsCoverTheVocabularyOnce) {
  EXPECT_EQ(vocab_shard(2048, 1, 2).begin, 1024);
  EXPECT_EQ(vocab_shard(2048, 1, 2).end, 2048);
  // 10 over 4: ceil = 3 rows per rank, the last gets 1.
  const int64_t want[4][2] = {{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(vocab_shard(10, r, 4).begin, want[r][0]);
    EXPECT_EQ(vocab_shard(10, r, 4).end, want[r][1]);
  }
  // 5 over 4: ceil = 2, the last rank is empty.
  EXPECT_EQ(vocab_shard(5, 3, 4).size(), 0);
  EXPECT_EQ(vocab_shard(5, 2, 4).size(), 1);
}

// --- errors ---

ModelConfig deepseek_config() { return load_model_config(model_path("models/tiny-deepseek-v3-shakespeare")).value(); }

TEST(TpShardErrors, KvHeadsNotDivisibleIsRefusedNotReplicated) {
  const ModelConfig c = load_model_config(testing::tiny_model_dir()).value();  // 4 heads, 2 kv heads
  const Status st = check_tp_shardable(c, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(st.message(), "--tp 4");
  EXPECT_CONTAINS(st.message(), "num_key_value_heads = 2");
}

TEST(TpShardErrors, HeadsNotDivisible) {
  const Status st = check_tp_shardable(deepseek_config(), 3);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(st.message(), "--tp 3");
  EXPECT_CONTAINS(st.message(), "num_attention_heads = 4");
}

TEST(TpShardErrors, IntermediateSizesNotDivisible) {
  ModelConfig c = deepseek_config();  // layer 0 dense, shared expert
  c.intermediate_size = 258;
  EXPECT_CONTAINS(check_tp_shardable(c, 4).message(), "intermediate_size = 258");
  c = deepseek_config();
  c.moe_intermediate_size = 66;
  EXPECT_CONTAINS(check_tp_shardable(c, 4).message(), "moe_intermediate_size = 66");
  c = deepseek_config();
  c.shared_expert_intermediate_size = 66;
  EXPECT_CONTAINS(check_tp_shardable(c, 4).message(), "shared_expert_intermediate_size = 66");
  // A model without dense layers does not use intermediate_size: not checked.
  ModelConfig m = load_model_config(testing::tiny_model_dir()).value();
  m.intermediate_size = 255;
  m.moe_intermediate_size = 256;
  EXPECT_TRUE(check_tp_shardable(m, 2).ok());
}

TEST(TpShardErrors, TpBelowOneAndRankOutOfRange) {
  EXPECT_CONTAINS(check_tp_shardable(deepseek_config(), 0).message(), "--tp must be >= 1");
  auto model = load(testing::tiny_model_dir());
  TpWeightStorage storage;
  const auto r = shard_weights_for_tp(model->config, model->weights, 2, 2, &storage);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(r.status().message(), "TP rank 2 is out of range for --tp 2");
}

// The shipped DeepSeek-V3 FP8 test model (blocks of 32): o_proj's 96 columns over 2
// ranks are 48, not whole blocks.
TEST(TpShardErrors, Fp8RowParallelSliceOffTheBlocks) {
  const ModelConfig c = load_model_config(model_path("tests/data/models/random-deepseek-v3-fp8")).value();
  const Status st = check_tp_shardable(c, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(st.message(), "o_proj");
  EXPECT_CONTAINS(st.message(), "48 columns");
  EXPECT_CONTAINS(st.message(), "weight_block_size");
  // Pretend FP8 with blocks of 64: o_proj (64) and the dense down_proj (128) are whole
  // blocks, the experts' (32) not.
  ModelConfig d = deepseek_config();
  d.fp8.enabled = true;
  d.fp8.block_cols = 64;
  EXPECT_CONTAINS(check_tp_shardable(d, 2).message(), "'model.layers.1.mlp.experts.0.down_proj.weight' is 32 columns");
  EXPECT_TRUE(check_tp_shardable(d, 2).message().find("moe_intermediate_size 64") != std::string::npos);
  d.moe_intermediate_size = 128;
  d.shared_expert_intermediate_size = 96;
  EXPECT_CONTAINS(check_tp_shardable(d, 2).message(), "shared_experts.down_proj.weight' is 48 columns");
}

// FP8 weights whose scales say blocks of 32 columns under a config that does not
// declare FP8: the tensor-level check names the tensor.
TEST(TpShardErrors, Fp8TensorSliceOffItsBlocksNamesTheTensor) {
  testing::ScopedTempDir dir("tp_shard_fp8_err");
  testing::make_fp8_model(testing::tiny_model_dir(), dir.file("fp8"), 16, 48);
  auto model = load(dir.file("fp8"));
  EXPECT_CONTAINS(check_tp_shardable(model->config, 2).message(), "not a multiple of the FP8 block width 48");
  ModelConfig no_fp8 = model->config;
  no_fp8.fp8.enabled = false;
  TpWeightStorage storage;
  const auto r = shard_weights_for_tp(no_fp8, model->weights, 1, 2, &storage);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(r.status().message(), "'model.layers.0.self_attn.o_proj.weight'");
  EXPECT_CONTAINS(r.status().message(), "columns [64, 128)");
  EXPECT_CONTAINS(r.status().message(), "block width 48");
}

TEST(TpShardErrors, TensorOfTheWrongShapeIsNamed) {
  auto model = load(testing::tiny_model_dir());
  ModelWeights w = model->weights;
  w.layers[2].experts[5].w2.cols = 250;
  TpWeightStorage storage;
  const auto r = shard_weights_for_tp(model->config, w, 0, 2, &storage);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(r.status().message(), "'model.layers.2.block_sparse_moe.experts.5.w2.weight' is [128, 250]");
  EXPECT_CONTAINS(r.status().message(), "[128, 256]");
}

}  // namespace
}  // namespace moe
