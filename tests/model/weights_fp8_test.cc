// FP8 checkpoints (F8_E4M3 weights with `<name>_scale_inv` block scales): binding, the
// errors of bad scale tensors, and the decoder's logits with the FP8 weights kept in
// FP8 against the same model dequantised to F32 by the test (tests/fp8_model_util.h).
//
// The model is a copy of the shipped tiny Mixtral with its attention and expert
// matrices quantised in blocks of [48, 80], so every matrix has partial edge blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "contains_util.h"
#include "fp8_model_util.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights.h"
#include "moe/transformer/decoder.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ScopedTempDir;

constexpr int kBr = 48, kBc = 80;
const std::string kW2 = "model.layers.1.block_sparse_moe.experts.3.w2.weight";

class WeightsFp8Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dirs_ = new ScopedTempDir("weights_fp8");
    testing::make_fp8_model(testing::tiny_model_dir(), dirs_->file("fp8"), kBr, kBc, dirs_->file("deq"));
  }
  static void TearDownTestSuite() {
    delete dirs_;
    dirs_ = nullptr;
  }
  void SetUp() override {
    std::filesystem::create_directories(copy_.path());
    testing::copy_model_dir(fp8_dir(), copy_.path());
  }
  static std::string fp8_dir() { return dirs_->file("fp8"); }
  static std::string deq_dir() { return dirs_->file("deq"); }

  StatusOr<ModelWeights> bind(const std::string& dir) {
    MOE_ASSIGN_OR_RETURN(config_, load_model_config(dir));
    MOE_ASSIGN_OR_RETURN(HfCheckpoint ckpt, HfCheckpoint::open(dir));
    ckpts_.push_back(std::make_unique<HfCheckpoint>(std::move(ckpt)));
    return bind_weights(config_, *ckpts_.back());
  }

  // Rewrites the copy's model.safetensors with `edit` applied to its tensors.
  template <typename F>
  void edit_tensors(F edit) {
    auto tensors = testing::parse_safetensors(copy_.file("model.safetensors"));
    edit(tensors);
    std::stable_partition(tensors.begin(), tensors.end(), [](const testing::StTensor& t) { return t.dtype == "F32"; });
    testing::write_file(copy_.file("model.safetensors"), testing::serialize_safetensors(tensors, json{{"format", "pt"}}));
  }

  static ScopedTempDir* dirs_;
  ScopedTempDir copy_{"weights_fp8_copy"};
  ModelConfig config_;
  std::vector<std::unique_ptr<HfCheckpoint>> ckpts_;
};
ScopedTempDir* WeightsFp8Test::dirs_ = nullptr;

TEST_F(WeightsFp8Test, BindsWeightsWithTheirScales) {
  auto w = bind(fp8_dir());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE(config_.fp8.enabled);
  EXPECT_EQ(config_.fp8.block_rows, kBr);
  EXPECT_EQ(config_.fp8.block_cols, kBc);
  const Weight2D& w2 = w->layers[1].experts[3].w2;  // [hidden 128, inter 256]
  EXPECT_EQ(w2.dtype, DType::kF8E4M3);
  ASSERT_TRUE(w2.has_scale());
  EXPECT_EQ(w2.scale_dtype, DType::kF32);
  EXPECT_EQ(w2.scale_rows(), 3);  // ceil(128 / 48)
  EXPECT_EQ(w2.scale_cols(), 4);  // ceil(256 / 80)
  EXPECT_EQ(w2.bytes(), 128u * 256u + 12u * 4u);
  EXPECT_EQ(w->layers[0].q_proj.dtype, DType::kF8E4M3);
  EXPECT_TRUE(w->layers[0].q_proj.has_scale());
  EXPECT_EQ(w->layers[0].router.dtype, DType::kBF16);  // never quantised
  EXPECT_FALSE(w->layers[0].router.has_scale());
  EXPECT_EQ(w->embed_tokens.dtype, DType::kBF16);

  // The dequantised matrix is the F32 reference model's, element for element (scales
  // bound to the right blocks, partial edges included).
  auto ref = bind(deq_dir());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  const Weight2D& want = ref->layers[1].experts[3].w2;
  ASSERT_EQ(want.dtype, DType::kF32);
  std::vector<float> got(static_cast<size_t>(w2.rows * w2.cols)), exp(got.size());
  dequantize_rows_f32(w2, 0, w2.rows, got.data());
  dequantize_rows_f32(want, 0, want.rows, exp.data());
  EXPECT_EQ(got, exp);
}

// Logits of the FP8 model (GEMV and GEMM dequantising in the kernel) against the F32
// model the test dequantised: the same weights, so they differ only by summation order.
TEST_F(WeightsFp8Test, DecoderLogitsMatchTheDequantisedModel) {
  auto fp8 = bind(fp8_dir());
  ASSERT_TRUE(fp8.ok()) << fp8.status().to_string();
  auto deq = bind(deq_dir());
  ASSERT_TRUE(deq.ok()) << deq.status().to_string();
  const std::vector<int> tokens = {1, 450, 1681, 310, 278, 172, 1889, 13};
  auto run = [&](const ModelWeights& w) {
    Decoder dec(config_, w, DecoderOptions{nullptr, KernelOptions{}});
    KVCache cache(config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim, 16);
    std::vector<float> prefill(static_cast<size_t>(config_.vocab_size)), step(prefill.size());
    EXPECT_TRUE(dec.forward(tokens.data(), static_cast<int64_t>(tokens.size()), 0, &cache, prefill.data()).ok());
    const int next = 42;
    EXPECT_TRUE(dec.forward(&next, 1, static_cast<int64_t>(tokens.size()), &cache, step.data()).ok());
    prefill.insert(prefill.end(), step.begin(), step.end());
    return prefill;
  };
  const std::vector<float> a = run(*fp8), b = run(*deq);
  ASSERT_EQ(a.size(), b.size());
  float lo = b[0], hi = b[0];
  for (float v : b) lo = std::min(lo, v), hi = std::max(hi, v);
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(a[i]) - b[i]));
  EXPECT_LE(max_diff, 1e-4 * (hi - lo)) << "range " << hi - lo;
  EXPECT_GT(hi - lo, 1.0f);
}

TEST_F(WeightsFp8Test, MissingScaleIsNamed) {
  edit_tensors([](auto& t) { std::erase_if(t, [](const auto& x) { return x.name == kW2 + "_scale_inv"; }); });
  auto w = bind(copy_.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(w.status().message(), "tensor '" + kW2 + "_scale_inv'");
  EXPECT_CONTAINS(w.status().message(), "missing");
}

TEST_F(WeightsFp8Test, WrongBlockShapeNamesBothShapesAndTheBlockSize) {
  json c = testing::read_json(copy_.file("config.json"));
  c["quantization_config"]["weight_block_size"] = {64, 64};
  testing::write_json(copy_.file("config.json"), c);
  auto w = bind(copy_.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = w.status().message();
  EXPECT_CONTAINS(m, "_scale_inv'");
  EXPECT_CONTAINS(m, "has shape [3, 2]");  // the first F8 tensor: q_proj [128, 128] in blocks of [48, 80]
  EXPECT_CONTAINS(m, "needs [2, 2]");
  EXPECT_CONTAINS(m, "[64, 64]");
  EXPECT_CONTAINS(m, "weight_block_size");
}

TEST_F(WeightsFp8Test, Fp8WithoutQuantizationConfigIsRefused) {
  json c = testing::read_json(copy_.file("config.json"));
  c.erase("quantization_config");
  testing::write_json(copy_.file("config.json"), c);
  auto w = bind(copy_.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(w.status().message(), "is F8_E4M3");
  EXPECT_CONTAINS(w.status().message(), "no quantization_config");
}

TEST_F(WeightsFp8Test, NonFloatScaleIsRefused) {
  edit_tensors([](auto& t) {
    for (auto& x : t)
      if (x.name == kW2 + "_scale_inv") x.dtype = "I32";
  });
  auto w = bind(copy_.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(w.status().message(), "tensor '" + kW2 + "_scale_inv'");
  EXPECT_CONTAINS(w.status().message(), "I32");
  EXPECT_CONTAINS(w.status().message(), "block scales must be F32, BF16 or F16");
}

TEST_F(WeightsFp8Test, Fp8RouterIsRefused) {
  const std::string router = "model.layers.0.block_sparse_moe.gate.weight";
  edit_tensors([&](auto& t) {
    for (auto& x : t)
      if (x.name == router) {
        x.dtype = "F8_E4M3";
        x.bytes.resize(x.bytes.size() / 2);
      }
  });
  auto w = bind(copy_.path());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(w.status().message(), "tensor '" + router + "'");
  EXPECT_CONTAINS(w.status().message(), "only quantised Linear weights");
}

}  // namespace
}  // namespace moe
