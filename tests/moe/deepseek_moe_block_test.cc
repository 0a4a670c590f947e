// The DeepSeek-V3 MoE block (sigmoid router with score-correction bias and group
// limit, routed scaling, shared expert) of tiny-deepseek-v3-shakespeare layer 1, with
// its real weights (tests/data/golden/deepseek-v3-moe/layer1.safetensors), against the
// independent torch reference (tools/reference/make_deepseek_moe_golden.py): single
// process and expert-parallel over 2 and 4 in-process ranks.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "moe/comm/inproc_communicator.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/moe_layer.h"
#include "moe/moe/swiglu_mlp.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

class DeepseekMoeBlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string golden = testing::golden_dir() + "/deepseek-v3-moe";
    cases_ = nlohmann::json::parse(testing::read_file(golden + "/cases.json"));
    auto cfg = parse_model_config(testing::read_file(testing::source_dir() + "/tests/data/configs/tiny-deepseek-v3.json"),
                                  "tiny-deepseek-v3.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    config_ = *cfg;
    // HfCheckpoint::open wants a model.safetensors in a directory: link the golden file.
    ASSERT_EQ(::symlink((golden + "/" + cases_["weights_file"].get<std::string>()).c_str(),
                        dir_.file("model.safetensors").c_str()), 0);
    auto ckpt = HfCheckpoint::open(dir_.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    ckpt_ = std::make_unique<HfCheckpoint>(std::move(*ckpt));
    layer_ = cases_["layer"].get<int>();
    const Status st = bind_mlp_block(config_, *ckpt_, layer_, nullptr, &weights_);
    ASSERT_TRUE(st.ok()) << st.to_string();
    x_ = testing::read_f32(golden + "/" + cases_["x_file"].get<std::string>());
    y_ = testing::read_f32(golden + "/" + cases_["y_file"].get<std::string>());
    y_routed_ = testing::read_f32(golden + "/" + cases_["y_routed_file"].get<std::string>());
    n_ = cases_["n_tokens"].get<int>();
    ASSERT_EQ(x_.size(), static_cast<size_t>(n_ * config_.hidden_size));
    tol_ = cases_["suggested_atol_f32"].get<double>();
  }

  void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    double max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
    EXPECT_LE(max_diff, tol_) << what;
  }

  nlohmann::json cases_;
  ModelConfig config_;
  testing::ScopedTempDir dir_{"deepseek_moe"};
  std::unique_ptr<HfCheckpoint> ckpt_;
  LayerWeights weights_;
  int layer_ = 0, n_ = 0;
  double tol_ = 0;
  std::vector<float> x_, y_, y_routed_;
};

TEST_F(DeepseekMoeBlockTest, SingleProcessMatchesReference) {
  ASSERT_EQ(weights_.score_bias.size(), 16u);
  ASSERT_TRUE(weights_.shared_expert.loaded);
  const int64_t hidden = config_.hidden_size;
  MoeWorkspace ws;
  std::vector<float> out(static_cast<size_t>(n_ * hidden));
  moe_forward(MoeLayerArgs::f32(config_, weights_, x_.data(), n_, out.data()), &ws);
  const auto want_idx = cases_["topk_idx"].get<std::vector<std::vector<int>>>();
  for (int t = 0; t < n_; ++t) {
    for (int j = 0; j < config_.router.top_k; ++j) {
      EXPECT_EQ(ws.topk_idx[static_cast<size_t>(t * config_.router.top_k + j)], want_idx[static_cast<size_t>(t)][static_cast<size_t>(j)])
          << "token " << t << " slot " << j;
    }
  }
  expect_near(out, y_routed_, "routed experts");
  MlpWorkspace mlp;
  add_shared_expert(weights_, x_.data(), n_, &mlp, out.data());
  expect_near(out, y_, "routed + shared");
}

TEST_F(DeepseekMoeBlockTest, ExpertParallelMatchesReference) {
  const int64_t hidden = config_.hidden_size;
  for (int R : {2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(R));
    std::vector<float> out(static_cast<size_t>(n_ * hidden));
    InProcessGroup group(R, 0, 20);
    const Status st = run_ranks(group, [&](Communicator& comm) -> Status {
      EpContext ctx;
      ctx.comm = &comm;
      ctx.placement = ExpertPlacement::contiguous(config_.router.num_experts, R);
      // Each rank's tokens: a contiguous slice (uneven); every rank has all experts
      // bound here, which is fine: only its own are used.
      const int r = comm.rank();
      const int t0 = n_ * r / R, t1 = n_ * (r + 1) / R;
      auto ws = make_ep_workspace(config_, ctx, t1 - t0);
      return ep_moe_forward(
          MoeLayerArgs::f32(config_, weights_, x_.data() + t0 * hidden, t1 - t0, out.data() + t0 * hidden), ctx,
          ws.get());
    });
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_near(out, y_routed_, "routed experts under EP");
  }
}

}  // namespace
}  // namespace moe
