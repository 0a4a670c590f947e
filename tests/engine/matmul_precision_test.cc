// EngineOptions::matmul_precision (`--matmul-precision`): "medium" prefills with
// bf16 activations (oneDNN's AVX-512 BF16 matmul). The shipped tiny Mixtral against the
// independent PyTorch golden data (tests/data/golden/tiny-mixtral, f32 activations):
// final prompt-position logits within 2e-3 of the logit range (measured: up to 3.7e-4) (bf16 activations cost
// ~2^-9 relative each), and the first greedy token where the reference's margin exceeds
// our error; decode stays exact, so 8 greedy tokens after a 1-token prompt equal
// "highest". Plus every refusal, by name.
#include <gtest/gtest.h>


#include "moe/engine.h"
#include "moe/engine/kernel_choice.h"
#include "moe/ops/linear_cpu.h"
#include "golden_cases.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::golden_dir;
using moe::testing::tiny_model_dir;

StatusOr<std::unique_ptr<Engine>> open_with(const std::string& precision, const std::string& model = tiny_model_dir()) {
  EngineOptions eo{.model_dir = model};
  eo.matmul_precision = precision;
  return Engine::open(eo);
}

TEST(MatmulPrecisionTest, MediumMatchesTorchReferenceWithinBf16Error) {
  if (!cpu_supports(KernelIsa::kAvx512Bf16)) GTEST_SKIP() << "matmul precision medium needs AVX512_BF16: skipped";
  auto medium = open_with("medium");
  ASSERT_TRUE(medium.ok()) << medium.status().to_string();
  auto highest = open_with("highest");
  ASSERT_TRUE(highest.ok()) << highest.status().to_string();
  int gemm_cases = 0;
  for (const moe::testing::GoldenCase& c : moe::testing::load_golden_cases(golden_dir() + "/tiny-mixtral")) {
    SCOPED_TRACE(c.name);
    const GenerateRequest req = moe::testing::golden_prompt_request(c);
    auto m = medium.value()->generate(req);
    auto h = highest.value()->generate(req);
    ASSERT_TRUE(m.ok() && h.ok());
    ASSERT_EQ(c.logits.size(), m.value().prompt_logits.size());
    const double diff_medium = moe::testing::max_abs_diff(c.logits, m.value().prompt_logits);
    const double diff_highest = moe::testing::max_abs_diff(c.logits, h.value().prompt_logits);
    std::printf("%s: max |logit diff| / range: medium %.2e, highest %.2e\n", c.name.c_str(), diff_medium / c.range,
                diff_highest / c.range);
    EXPECT_LE(diff_medium / c.range, 2e-3);
    if (req.prompt_token_ids.size() > static_cast<size_t>(kGemvMaxTokens)) {
      ++gemm_cases;
      EXPECT_GT(diff_medium, diff_highest);  // the bf16 GEMM ran: coarser than f32
    }
    if (moe::testing::first_token_decided(c, diff_medium)) {
      ASSERT_FALSE(m.value().output_token_ids.empty());
      EXPECT_EQ(m.value().output_token_ids[0], c.gold["greedy_token_ids"][0].get<int>());
    }
  }
  EXPECT_GT(gemm_cases, 0) << "no golden prompt is long enough to take the GEMM";
  // Decode is untouched: after a one-token prompt (GEMV only), the same 8 greedy tokens.
  GenerateRequest req;
  req.prompt_token_ids = {1};
  req.max_tokens = 8;
  req.sampling.temperature = 0;
  req.ignore_eos = true;
  auto m = medium.value()->generate(req);
  auto h = highest.value()->generate(req);
  ASSERT_TRUE(m.ok() && h.ok());
  EXPECT_EQ(m.value().output_token_ids, h.value().output_token_ids);
  EXPECT_EQ(m.value().output_token_ids.size(), 8u);
}

TEST(MatmulPrecisionTest, RefusalsNameTheOption) {
  auto expect_refused = [](const StatusOr<std::unique_ptr<Engine>>& e, const std::string& want) {
    ASSERT_FALSE(e.ok()) << want;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(want), std::string::npos) << e.status().message();
  };
  expect_refused(open_with("low"), "matmul_precision 'low' is not one of highest, medium");
  // A CPU without AVX512_BF16 (the caller's answers), and this CPU told to use AVX2.
  EngineOptions eo;
  eo.matmul_precision = "medium";
  auto c = choose_kernels(eo, [](KernelIsa isa) { return isa == KernelIsa::kAuto || isa == KernelIsa::kAvx2; });
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("matmul_precision 'medium' (bf16 prefill GEMM) needs the avx512-bf16 kernels; "
                                      "kernels are avx2 (cpu: avx2)"),
            std::string::npos)
      << c.status().message();
  if (!cpu_supports(KernelIsa::kAvx512Bf16)) GTEST_SKIP() << "the other refusals need AVX512_BF16: skipped";
  {
    EngineOptions o{.model_dir = tiny_model_dir()};
    o.matmul_precision = "medium";
    o.kernels = "avx2";
    expect_refused(Engine::open(o), "needs the avx512-bf16 kernels; kernels are avx2");
    o.kernels = "auto";
    o.batch_invariant = true;
    expect_refused(Engine::open(o), "has no effect with batch_invariant kernels");
    o.batch_invariant = false;
    o.weights = "int8";
    expect_refused(Engine::open(o), "applies to bf16 weights; weights 'int8' has none");
  }
  // An f16 checkpoint (held in f32 after loading).
  expect_refused(open_with("medium", moe::testing::sharded_model_dir()),
                 "matmul_precision 'medium' applies to bf16 weights; this model's projections are held in F32");
}

}  // namespace
}  // namespace moe
