// Engine::open on an FP8 checkpoint (the tiny Mixtral quantised in blocks of [48, 80],
// tests/fp8_model_util.h) with EngineOptions::fp8_mode native and dequant, against the
// same weights dequantised to F32 by the test: greedy tokens, last-prompt logits, and
// the weight bytes a decode step reads (native: FP8 + scales, about half of dequant's
// bf16 for the quantised matrices).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fp8_model_util.h"
#include "moe/engine.h"
#include "test_util.h"

namespace moe {
namespace {

struct EngineRun {
  GenerateResult result;
  ModelInfo info;
};

EngineRun generate(const std::string& dir, Fp8Mode mode) {
  EngineOptions o{.model_dir = dir, .num_threads = 1};
  o.fp8_mode = mode;
  auto engine = Engine::open(o);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  GenerateRequest req{.prompt = "ROMEO:\nBut soft, what light", .max_tokens = 16};
  req.sampling.temperature = 0;
  req.return_prompt_logits = true;
  auto r = (*engine)->generate(req);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return {r.ok() ? *r : GenerateResult{}, (*engine)->info()};
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

TEST(Fp8EngineTest, NativeAndDequantAgainstTheF32Dequantised) {
  testing::ScopedTempDir tmp("fp8_engine");
  testing::make_fp8_model(testing::tiny_model_dir(), tmp.file("fp8"), 48, 80, tmp.file("deq"));
  const EngineRun ref = generate(tmp.file("deq"), Fp8Mode::kDequant);  // bf16: nothing to dequantise
  const EngineRun native = generate(tmp.file("fp8"), Fp8Mode::kNative);
  const EngineRun dequant = generate(tmp.file("fp8"), Fp8Mode::kDequant);
  ASSERT_EQ(ref.result.prompt_logits.size(), 2048u);
  ASSERT_EQ(native.result.prompt_logits.size(), 2048u);
  ASSERT_EQ(dequant.result.prompt_logits.size(), 2048u);
  const auto [lo, hi] = std::minmax_element(ref.result.prompt_logits.begin(), ref.result.prompt_logits.end());
  const double range = *hi - *lo;
  // Native: the same weights as the F32 reference, summed in another order.
  EXPECT_LE(max_diff(native.result.prompt_logits, ref.result.prompt_logits), 1e-4 * range);
  EXPECT_EQ(native.result.output_token_ids, ref.result.output_token_ids);
  // Dequant: the weights rounded once more, to bf16 (relative 2^-9).
  const double dq = max_diff(dequant.result.prompt_logits, ref.result.prompt_logits);
  EXPECT_LE(dq, 2e-2 * range);
  EXPECT_GT(dq, 0.0);  // it did run on bf16 copies, not the FP8 kernels
  // Bytes per decode token: per layer q/o [128, 128], k/v [64, 128] and the top-2 experts
  // ([256, 128] x 2 + [128, 256]) are FP8 + f32 scales natively and bf16 dequantised
  // (one byte more per weight, no scales); the rest is bf16 in both. Scales per layer
  // in blocks of [48, 80]: q, o 3 x 2; k, v 2 x 2; w1, w3 6 x 2; w2 3 x 4.
  EXPECT_LT(native.info.decode_bytes_per_token, dequant.info.decode_bytes_per_token);
  const size_t per_layer_fp8 = (128 * 128 * 2 + 64 * 128 * 2) + 2 * 3 * 256 * 128;  // q,o + k,v + 2 experts
  const size_t saved = 4 * per_layer_fp8;  // bf16 - fp8 = 1 byte per weight, minus the scales
  const size_t scales = 4 * (2 * (3 * 2) + 2 * (2 * 2) + 2 * (2 * (6 * 2) + 3 * 4)) * 4;
  EXPECT_EQ(dequant.info.decode_bytes_per_token - native.info.decode_bytes_per_token, saved - scales);
}

}  // namespace
}  // namespace moe
