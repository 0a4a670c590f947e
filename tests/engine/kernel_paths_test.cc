// The whole engine on each kernel path and weight format (EngineOptions::kernels,
// ::weights) against the independent PyTorch golden data of the shipped tiny
// Mixtral (tests/data/golden/tiny-mixtral, tools/reference/make_golden.py): final
// prompt-position logits within a fraction of the logit range, and the first greedy
// token; with and without batch_invariant (which runs the path's GEMV kernels for the
// whole prompt; otherwise prompts of more than 4 tokens take sgemm). A path this CPU
// lacks is skipped by name. Plus the options' error paths.
#include <gtest/gtest.h>

#include <algorithm>

#include "moe/engine.h"
#include "moe/engine/kernel_choice.h"
#include "golden_cases.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::golden_dir;
using moe::testing::tiny_model_dir;

struct PathCase {
  std::string kernels, weights;
  double logits_tol;  // max |logit diff| / logit range against the f32 reference
};

class KernelPathsTest : public ::testing::TestWithParam<PathCase> {};

TEST_P(KernelPathsTest, TinyMixtralMatchesTorchReference) {
  const PathCase& pc = GetParam();
  if (!cpu_supports(*parse_kernel_isa(pc.kernels))) {
    GTEST_SKIP() << "kernel path " << pc.kernels << " not supported by this CPU: skipped";
  }
  for (bool invariant : {false, true}) {
  SCOPED_TRACE(invariant ? "batch_invariant" : "default");
  EngineOptions eo{.model_dir = tiny_model_dir()};
  eo.kernels = pc.kernels;
  eo.weights = pc.weights;
  eo.batch_invariant = invariant;
  auto engine = Engine::open(eo);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  for (const moe::testing::GoldenCase& c : moe::testing::load_golden_cases(golden_dir() + "/tiny-mixtral")) {
    SCOPED_TRACE(c.name);
    auto result = engine.value()->generate(moe::testing::golden_prompt_request(c));
    ASSERT_TRUE(result.ok()) << result.status().to_string();
    ASSERT_EQ(c.logits.size(), result.value().prompt_logits.size());
    const double max_diff = moe::testing::max_abs_diff(c.logits, result.value().prompt_logits);
    std::printf("%s %s/%s%s: max |logit diff| / range = %.2e\n", c.name.c_str(), pc.kernels.c_str(),
                pc.weights.c_str(), invariant ? " (batch invariant)" : "", max_diff / c.range);
    EXPECT_LE(max_diff / c.range, pc.logits_tol) << "max |diff| " << max_diff << " over range " << c.range;
    // The first greedy token, unless the reference's own top-2 margin is within our error.
    if (moe::testing::first_token_decided(c, max_diff)) {
      ASSERT_FALSE(result.value().output_token_ids.empty());
      EXPECT_EQ(result.value().output_token_ids[0], c.gold["greedy_token_ids"][0].get<int>());
    }
  }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, KernelPathsTest,
                         ::testing::Values(PathCase{"avx2", "native", 1e-3}, PathCase{"avx512", "native", 1e-3},
                                           PathCase{"avx512-bf16", "native", 1e-3}, PathCase{"avx2", "int8", 2e-2},
                                           PathCase{"avx512", "int8", 2e-2}),
                         [](const ::testing::TestParamInfo<PathCase>& i) {
                           std::string n = i.param.kernels + "_" + i.param.weights;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(KernelChoiceTest, UnknownNamesAreRefusedByName) {
  EngineOptions eo{.model_dir = tiny_model_dir()};
  eo.kernels = "avx9";
  auto e = Engine::open(eo);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("kernels 'avx9'"), std::string::npos) << e.status().message();
  eo.kernels = "auto";
  eo.weights = "int4";
  e = Engine::open(eo);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("weights 'int4'"), std::string::npos) << e.status().message();
  eo.weights = "native";
  eo.hugepages = "sometimes";
  e = Engine::open(eo);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("hugepages 'sometimes' is not one of auto, on, off"), std::string::npos)
      << e.status().message();
}

// EngineOptions::hugepages: the weights copied into huge pages give bit-identical
// prompt logits and greedy tokens to the same weights read from the mapped files, for
// native and int8 weights (the copy must carry int8's scales).
TEST(HugePagesEngineTest, SameLogitsAndTokensAsFromTheMappedFiles) {
  for (const char* weights : {"native", "int8"}) {
    SCOPED_TRACE(weights);
    GenerateRequest req;
    req.prompt_token_ids = {1, 415, 293, 906, 285, 1142, 287, 13};
    req.max_tokens = 8;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    req.return_prompt_logits = true;
    std::vector<GenerateResult> results;
    for (const char* mode : {"off", "on"}) {
      EngineOptions eo{.model_dir = tiny_model_dir()};
      eo.weights = weights;
      eo.hugepages = mode;
      auto engine = Engine::open(eo);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      auto r = engine.value()->generate(req);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      results.push_back(std::move(r).value());
    }
    ASSERT_EQ(results[0].output_token_ids.size(), 8u);
    EXPECT_EQ(results[0].output_token_ids, results[1].output_token_ids);
    ASSERT_FALSE(results[0].prompt_logits.empty());
    EXPECT_EQ(results[0].prompt_logits, results[1].prompt_logits);  // bitwise: same bytes, same kernels
  }
}

bool avx2_only(KernelIsa isa) { return isa == KernelIsa::kAuto || isa == KernelIsa::kAvx2; }

TEST(KernelChoiceTest, PathTheCpuLacksIsRefusedAndAutoFallsBack) {
  EngineOptions eo;
  eo.kernels = "avx512-bf16";
  auto c = choose_kernels(eo, avx2_only);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("does not support it (it supports: avx2)"), std::string::npos)
      << c.status().message();
  eo.kernels = "auto";
  eo.weights = "int8";
  c = choose_kernels(eo, avx2_only);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().isa, KernelIsa::kAvx2);
  EXPECT_TRUE(c.value().int8_weights);
  // On this CPU, auto is the best path it has, and the summary names it.
  eo.weights = "native";
  c = choose_kernels(eo);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().isa, best_kernel_isa());
  EXPECT_NE(describe_kernels(c.value()).find(std::string("kernels ") + kernel_isa_name(best_kernel_isa())),
            std::string::npos);
}

}  // namespace
}  // namespace moe
