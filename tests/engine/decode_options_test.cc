// Engine::open's checks of the decode-speed and overlap options:
// --ep-micro-batches out of range or without --ep-overlap, an unknown --kv-dtype and a
// 16-bit KV cache for an MLA model are refused by name; the valid forms open (--ep-overlap
// with the hierarchical all-to-all too); a bf16 / f16 KV cache changes the logits a
// little (it is used, not ignored) and keeps greedy decoding on the tiny model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "contains_util.h"
#include "moe/engine.h"
#include "test_util.h"

namespace moe {
namespace {

EngineOptions base() { return EngineOptions{.model_dir = testing::tiny_model_dir(), .num_threads = 1}; }

TEST(DecodeOptionsTest, MicroBatchesOutOfRangeAreRefused) {
  for (int bad : {1, -3, 9}) {
    EngineOptions o = base();
    o.ep_overlap = true;
    o.ep_micro_batches = bad;
    auto e = Engine::open(o);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(e.status().message(), "--ep-micro-batches " + std::to_string(bad));
  }
}

TEST(DecodeOptionsTest, MicroBatchesWithoutOverlapAreRefused) {
  EngineOptions o = base();
  o.ep_micro_batches = 4;
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "--ep-overlap");
  o.ep_overlap = true;
  EXPECT_TRUE(Engine::open(o).ok());
}

// The hierarchical all-to-all has overlap too: no longer refused.
TEST(DecodeOptionsTest, OverlapWithHierarchicalOpens) {
  EngineOptions o = base();
  o.ep_overlap = true;
  o.a2a_hierarchical = 1;
  EXPECT_TRUE(Engine::open(o).ok());
  o.a2a_hierarchical = -1;
  EXPECT_TRUE(Engine::open(o).ok());
}

TEST(DecodeOptionsTest, UnknownKvDtypeIsRefused) {
  EngineOptions o = base();
  o.kv_dtype = "f8";
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "--kv-dtype 'f8'");
}

TEST(DecodeOptionsTest, SixteenBitKvCacheForMlaIsRefused) {
  EngineOptions o{.model_dir = testing::source_dir() + "/models/tiny-deepseek-v3-shakespeare", .num_threads = 1};
  o.kv_dtype = "bf16";
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "--kv-dtype bf16");
  EXPECT_CONTAINS(e.status().message(), "latent");
  o.kv_dtype = "f32";
  EXPECT_TRUE(Engine::open(o).ok());
}

struct GreedyRun {
  std::vector<int> tokens;
  std::vector<float> logits;
};

GreedyRun greedy(const std::string& kv_dtype) {
  EngineOptions o = base();
  o.kv_dtype = kv_dtype;
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  GenerateRequest req{.prompt = "First Citizen:\nBefore we proceed any further, hear me speak.", .max_tokens = 12};
  req.sampling.temperature = 0;
  req.return_prompt_logits = true;
  auto r = e.value()->generate(req);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return {r.value().output_token_ids, r.value().prompt_logits};
}

TEST(DecodeOptionsTest, SixteenBitKvCacheIsUsedAndClose) {
  const GreedyRun ref = greedy("f32");
  for (const char* dt : {"bf16", "f16"}) {
    SCOPED_TRACE(dt);
    const GreedyRun run = greedy(dt);
    ASSERT_EQ(run.logits.size(), ref.logits.size());
    double max_diff = 0;
    for (size_t i = 0; i < ref.logits.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(run.logits[i] - ref.logits[i])));
    }
    EXPECT_GT(max_diff, 0.0) << "the 16-bit cache changed nothing: ignored?";
    // bf16 keeps 8 significant bits (relative error <= 2^-9), f16 11: the logits (range ~20)
    // move by far less than 0.25.
    EXPECT_LT(max_diff, 0.25);
    EXPECT_EQ(run.tokens, ref.tokens);
  }
}

}  // namespace
}  // namespace moe
