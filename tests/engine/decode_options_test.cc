// Engine::open's checks of the decode-speed and overlap options (issue 18 part B):
// --ep-micro-batches out of range or without --ep-overlap, and --ep-overlap with the
// hierarchical all-to-all, are refused by name; the valid forms open.
#include <gtest/gtest.h>

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

TEST(DecodeOptionsTest, OverlapWithHierarchicalIsRefused) {
  EngineOptions o = base();
  o.ep_overlap = true;
  o.a2a_hierarchical = 1;
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "--ep-overlap");
  EXPECT_CONTAINS(e.status().message(), "hierarchical");
  o.a2a_hierarchical = -1;  // auto: the flat exchange where overlap is asked for
  EXPECT_TRUE(Engine::open(o).ok());
}

}  // namespace
}  // namespace moe
