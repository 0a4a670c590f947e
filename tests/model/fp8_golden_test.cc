// FP8 dequantisation against the torch reference: the seeded random-deepseek-v3-fp8
// checkpoint (F8_E4M3, 32 x 32 block scales, partial edge blocks) and the dequantised
// values tools/reference/ computed from it (tests/data/golden/deepseek-v3-fp8-dequant:
// w = fp8(bits) * scale_inv, in float32). The routed expert and the shared expert are
// bound by bind_mlp_block (weights.cc, with their scales); the MLA projection is viewed
// with its scale tensor directly. Every value must be bitwise the reference's (one f32
// rounding of the same product).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights.h"
#include "test_util.h"

namespace moe {
namespace {

std::string model_dir() { return testing::source_dir() + "/tests/data/models/random-deepseek-v3-fp8"; }
std::string golden() { return testing::golden_dir() + "/deepseek-v3-fp8-dequant"; }

std::vector<float> dequantized(const Weight2D& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  dequantize_rows_f32(w, 0, w.rows, out.data());
  return out;
}

TEST(Fp8GoldenTest, DequantisedWeightsEqualTheTorchReference) {
  auto config = load_model_config(model_dir());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ASSERT_TRUE(config->fp8.enabled);
  ASSERT_EQ(config->fp8.block_rows, 32);
  ASSERT_EQ(config->fp8.block_cols, 32);
  auto ckpt = HfCheckpoint::open(model_dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  std::vector<LayerWeights> layers(3);
  for (int l : {1, 2}) {
    const Status st = bind_mlp_block(*config, *ckpt, l, nullptr, &layers[static_cast<size_t>(l)]);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  const nlohmann::json cases = nlohmann::json::parse(testing::read_file(golden() + "/cases.json"));
  int checked = 0;
  for (const auto& t : cases["tensors"]) {
    const std::string name = t["name"].get<std::string>();
    SCOPED_TRACE(name);
    Weight2D w;
    if (name == "model.layers.1.mlp.experts.5.down_proj.weight") {
      w = layers[1].experts[5].w2;
    } else if (name == "model.layers.2.mlp.shared_experts.up_proj.weight") {
      w = layers[2].shared_expert.w3;
    } else {
      // An MLA projection: the weight and its scales straight from the checkpoint.
      auto data = ckpt->get(name);
      auto scale = ckpt->get(name + kFp8ScaleSuffix);
      ASSERT_TRUE(data.ok() && scale.ok()) << name;
      ASSERT_EQ((*data)->dtype, DType::kF8E4M3);
      w = Weight2D{(*data)->data, DType::kF8E4M3, (*data)->shape[0], (*data)->shape[1], (*scale)->data,
                   DType::kF32, 32, 32};
      ASSERT_EQ((*scale)->shape, (std::vector<int64_t>{w.scale_rows(), w.scale_cols()}));
    }
    ASSERT_EQ(w.dtype, DType::kF8E4M3);
    ASSERT_TRUE(w.has_scale());
    ASSERT_EQ(std::vector<int64_t>({w.rows, w.cols}), t["shape"].get<std::vector<int64_t>>());
    const std::vector<float> want = testing::read_f32(golden() + "/" + t["file"].get<std::string>());
    ASSERT_EQ(want.size(), static_cast<size_t>(w.rows * w.cols));
    EXPECT_EQ(dequantized(w), want);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

}  // namespace
}  // namespace moe
