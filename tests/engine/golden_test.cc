// The engine against golden data from the independent PyTorch reference
// (tools/reference/make_golden.py with mixtral_ref.py, qwen_moe_ref.py, deepseek_ref.py):
// final prompt-position logits within 1e-3 of the logit range (DeepSeek sets: 1e-4, per
// MLA path), and the 32 greedy tokens identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "moe/engine.h"
#include "moe/model/config.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::golden_dir;
using moe::testing::read_f32;
using moe::testing::read_file;
using moe::testing::source_dir;

struct GoldenSet {
  std::string golden;     // folder under tests/data/golden
  std::string model_dir;  // model it was made from
  bool from_text;         // prompts given as text (tokenizer checked too)
  double logits_tol = 1e-3;          // max |logit diff| / logit range
  std::string mla_attention = "auto";  // EngineOptions::mla_attention (MLA models)
};

void PrintTo(const GoldenSet& set, std::ostream* os) { *os << set.golden << "/" << set.mla_attention; }

class GoldenTest : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(GoldenTest, LogitsAndGreedyTokensMatchReference) {
  const GoldenSet& set = GetParam();
  // FP8 weights natively: the reference dequantises them in f32, which the FP8 kernels
  // compute exactly (--fp8 dequant rounds them to bf16 once more).
  // (native is refused on a model without FP8 weights.)
  auto config = load_model_config(set.model_dir);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto engine = Engine::open({.model_dir = set.model_dir,
                              .mla_attention = set.mla_attention,
                              .fp8_mode = config->fp8.enabled ? Fp8Mode::kNative : Fp8Mode::kDequant});
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const std::string dir = golden_dir() + "/" + set.golden;
  auto index = nlohmann::json::parse(read_file(dir + "/index.json"));
  ASSERT_GE(index["cases"].size(), 3u);
  for (const auto& entry : index["cases"]) {
    SCOPED_TRACE(entry["name"].get<std::string>());
    auto gold = nlohmann::json::parse(read_file(dir + "/" + entry["json"].get<std::string>()));
    GenerateRequest req;
    const auto expected_prompt = gold["prompt_token_ids"].get<std::vector<int>>();
    if (set.from_text) {
      req.prompt = gold["prompt"].get<std::string>();
    } else {
      req.prompt_token_ids = expected_prompt;
    }
    const auto expected_tokens = gold["greedy_token_ids"].get<std::vector<int>>();
    req.max_tokens = static_cast<int>(expected_tokens.size());
    req.sampling.temperature = 0;
    req.return_prompt_logits = true;
    auto result = engine.value()->generate(req);
    ASSERT_TRUE(result.ok()) << result.status().to_string();
    EXPECT_EQ(result.value().prompt_token_ids, expected_prompt);

    const auto logits = read_f32(dir + "/" + gold["logits_file"].get<std::string>());
    ASSERT_EQ(logits.size(), result.value().prompt_logits.size());
    const auto [mn, mx] = std::minmax_element(logits.begin(), logits.end());
    const double range = *mx - *mn;
    double max_diff = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(logits[i] - result.value().prompt_logits[i])));
    }
    EXPECT_LE(max_diff / range, set.logits_tol) << "max |diff| " << max_diff << " over range " << range;

    // Greedy tokens must agree. Only a step where the reference's own top-2 margin is
    // below 1e-5 of the logit range (a near-tie that f32 summation order can flip) ends
    // the comparison; the reference records those margins.
    const auto margins = gold["greedy_margins"].get<std::vector<double>>();
    const auto& got = result.value().output_token_ids;
    size_t comparable = expected_tokens.size();
    for (size_t i = 0; i < margins.size(); ++i) {
      if (margins[i] < 1e-5 * range) {
        comparable = i;
        break;
      }
    }
    std::printf("%s: max |logit diff| / range = %.2e, greedy tokens compared %zu/%zu\n",
                entry["name"].get<std::string>().c_str(), max_diff / range, comparable, expected_tokens.size());
    ASSERT_GE(got.size(), comparable);
    for (size_t i = 0; i < comparable; ++i) EXPECT_EQ(got[i], expected_tokens[i]) << "greedy step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenTest,
    ::testing::Values(GoldenSet{"tiny-mixtral", source_dir() + "/models/tiny-mixtral-shakespeare", true},
                      GoldenSet{"random-mixtral-sharded", source_dir() + "/tests/data/models/random-mixtral-sharded",
                                false},
                      GoldenSet{"random-qwen2-moe", source_dir() + "/tests/data/models/random-qwen2-moe", false},
                      GoldenSet{"random-qwen3-moe", source_dir() + "/tests/data/models/random-qwen3-moe", false},
                      // DeepSeek (multi-head latent attention), each MLA path:
                      GoldenSet{"tiny-deepseek-v3", source_dir() + "/models/tiny-deepseek-v3-shakespeare", true, 1e-4},
                      GoldenSet{"tiny-deepseek-v3", source_dir() + "/models/tiny-deepseek-v3-shakespeare", true, 1e-4,
                                "naive"},
                      GoldenSet{"tiny-deepseek-v3", source_dir() + "/models/tiny-deepseek-v3-shakespeare", true, 1e-4,
                                "absorbed"},
                      GoldenSet{"random-deepseek-v2-lite", source_dir() + "/tests/data/models/random-deepseek-v2-lite",
                                false, 1e-4},
                      GoldenSet{"random-deepseek-v2-grouped",
                                source_dir() + "/tests/data/models/random-deepseek-v2-grouped", false, 1e-4, "naive"},
                      GoldenSet{"random-kimi-k2", source_dir() + "/tests/data/models/random-kimi-k2", false, 1e-4,
                                "absorbed"},
                      GoldenSet{"random-deepseek-v3-fp8", source_dir() + "/tests/data/models/random-deepseek-v3-fp8",
                                false, 1e-4}),
    [](const ::testing::TestParamInfo<GoldenSet>& info) {
      std::string n = info.param.golden + "_" + info.param.mla_attention;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

}  // namespace
}  // namespace moe
