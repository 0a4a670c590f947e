// Engine::open and Engine::generate reject invalid requests with a message naming the
// offending value; nothing is generated.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "contains_util.h"
#include "moe/engine.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::tiny_model_dir;

class GenerateErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = Engine::open({.model_dir = tiny_model_dir(), .num_threads = 1});
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value().release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }

  static GenerateRequest greedy(std::vector<int> ids, int max_tokens = 4) {
    GenerateRequest req;
    req.prompt_token_ids = std::move(ids);
    req.max_tokens = max_tokens;
    req.sampling.temperature = 0;
    return req;
  }

  // Runs `req`, expects `code`, returns the message.
  static std::string expect_error(const GenerateRequest& req, StatusCode code) {
    int calls = 0;
    auto r = engine_->generate(req, [&](int, const std::string&) { return ++calls > 0; });
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(calls, 0) << "tokens were generated for an invalid request";
    if (r.ok()) return "";
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    return r.status().message();
  }

  static Engine* engine_;
};

Engine* GenerateErrorsTest::engine_ = nullptr;

TEST_F(GenerateErrorsTest, ValidRequestWorks) {
  auto r = engine_->generate(greedy({1, 846, 2007}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->output_token_ids.size(), 4u);
  EXPECT_EQ(engine_->info().max_context, 512);
  EXPECT_EQ(engine_->info().vocab_size, 2048);
}

TEST_F(GenerateErrorsTest, PromptTokenIdOutOfVocab) {
  const std::string m = expect_error(greedy({1, 846, 2048}), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(m, "prompt token id 2048");
  EXPECT_CONTAINS(m, "position 2");
  EXPECT_CONTAINS(m, "[0, 2048)");
}

TEST_F(GenerateErrorsTest, NegativePromptTokenId) {
  const std::string m = expect_error(greedy({-3}), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(m, "prompt token id -3");
  EXPECT_CONTAINS(m, "position 0");
}

TEST_F(GenerateErrorsTest, NegativeMaxTokens) {
  const std::string m = expect_error(greedy({1, 846}, -1), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(m, "max_tokens");
  EXPECT_CONTAINS(m, "-1");
}

TEST_F(GenerateErrorsTest, ZeroMaxTokensGeneratesNothing) {
  auto r = engine_->generate(greedy({1, 846}, 0));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->output_token_ids.empty());
  EXPECT_EQ(r->finish_reason, "length");
}

TEST_F(GenerateErrorsTest, EmptyPrompt) {
  GenerateRequest req;
  req.prompt = "";
  req.max_tokens = 4;
  const std::string m = expect_error(req, StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(m, "prompt");
  EXPECT_CONTAINS(m, "empty");
}

TEST_F(GenerateErrorsTest, PromptPlusMaxTokensExceedsContext) {
  std::vector<int> ids(500, 275);
  ids[0] = 1;
  const std::string m = expect_error(greedy(ids, 13), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(m, "prompt (500 tokens)");
  EXPECT_CONTAINS(m, "max_tokens (13)");
  EXPECT_CONTAINS(m, "context of 512");
  // Exactly the context is fine.
  auto r = engine_->generate(greedy(ids, 12));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

TEST_F(GenerateErrorsTest, PromptLongerThanContext) {
  std::vector<int> ids(600, 275);
  const std::string m = expect_error(greedy(ids, 0), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(m, "context of 512");
}

TEST_F(GenerateErrorsTest, BadSamplingParams) {
  GenerateRequest req = greedy({1, 846});
  req.sampling.temperature = -1;
  EXPECT_CONTAINS(expect_error(req, StatusCode::kInvalidArgument), "temperature");
  req.sampling.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_CONTAINS(expect_error(req, StatusCode::kInvalidArgument), "temperature");
  req.sampling.temperature = std::numeric_limits<float>::infinity();
  EXPECT_CONTAINS(expect_error(req, StatusCode::kInvalidArgument), "temperature");
  req.sampling.temperature = 0.5f;
  req.sampling.top_p = 0;
  EXPECT_CONTAINS(expect_error(req, StatusCode::kInvalidArgument), "top_p");
  req.sampling.top_p = 1.5f;
  EXPECT_CONTAINS(expect_error(req, StatusCode::kInvalidArgument), "top_p");
  req.sampling.top_p = 0.9f;
  req.sampling.top_k = -2;
  EXPECT_CONTAINS(expect_error(req, StatusCode::kInvalidArgument), "top_k");
}

// A capacity factor that "dropless" would ignore is refused, naming both options (the
// CLI refuses --capacity-factor with --overflow-policy dropless the same way).
TEST(EngineOpenErrorsTest, CapacityFactorWithDroplessIsRefused) {
  EngineOptions o{.model_dir = testing::tiny_model_dir(), .num_threads = 1};
  o.overflow_policy = "dropless";
  o.capacity_factor = 1.25;
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "capacity_factor");
  EXPECT_CONTAINS(e.status().message(), "dropless");
  o.overflow_policy = "drop";
  EXPECT_TRUE(Engine::open(o).ok());
}

// min_replicas is a floor on replicas over EP ranks: below 1 is refused, and so is > 1
// without a communicator (one process holds each expert once). Under EP the planner's
// own errors apply (tests/e2e/placement_mpirun_test.cc).
TEST(EngineOpenErrorsTest, MinReplicasOutOfRangeOrWithoutEpIsRefused) {
  EngineOptions o{.model_dir = testing::tiny_model_dir(), .num_threads = 1};
  o.min_replicas = 0;
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "min_replicas 0 must be >= 1");
  o.min_replicas = 2;
  e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "min_replicas 2 needs expert parallelism");
  o.min_replicas = 1;
  EXPECT_TRUE(Engine::open(o).ok());
}

// The failover windows: the wait for lost experts may be 0 (serve degraded at once); the
// survivors' check-in window must be positive. NaN and infinity are refused for both.
TEST(EngineOpenErrorsTest, FailoverWindowsOutOfRangeAreRefused) {
  EngineOptions o{.model_dir = testing::tiny_model_dir(), .num_threads = 1};
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.failover_wait_seconds = bad;
    auto e = Engine::open(o);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_CONTAINS(e.status().message(), "failover_wait_seconds must be a finite number of seconds >= 0");
  }
  o.failover_wait_seconds = 0;
  for (double bad : {0.0, -3.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.failover_join_seconds = bad;
    auto e = Engine::open(o);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(e.status().message(), "failover_join_seconds must be a finite number of seconds > 0");
  }
  o.failover_join_seconds = 0.5;
  EXPECT_TRUE(Engine::open(o).ok());
}

TEST(EngineOpenErrorsTest, MissingModelDir) {
  const std::string dir = "/nonexistent/moe_model_dir";
  auto e = Engine::open({.model_dir = dir});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(e.status().message(), dir);
}

TEST(EngineOpenErrorsTest, ModelDirIsAFile) {
  const std::string path = tiny_model_dir() + "/config.json";
  auto e = Engine::open({.model_dir = path});
  ASSERT_FALSE(e.ok());
  EXPECT_CONTAINS(e.status().message(), path);
}

TEST(EngineOpenErrorsTest, MissingTokenizer) {
  moe::testing::ScopedTempDir dir("engine_notok");
  moe::testing::copy_model_dir(moe::testing::sharded_model_dir(), dir.path());
  std::filesystem::remove(dir.file("tokenizer.model"));
  auto e = Engine::open({.model_dir = dir.path()});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(e.status().message(), dir.path() + ": no tokenizer");
  EXPECT_CONTAINS(e.status().message(), "tokenizer.json");
  EXPECT_CONTAINS(e.status().message(), "tokenizer.model");
}

TEST(EngineOpenErrorsTest, CorruptTokenizer) {
  moe::testing::ScopedTempDir dir("engine_badtok");
  moe::testing::copy_model_dir(moe::testing::sharded_model_dir(), dir.path());
  moe::testing::write_file(dir.file("tokenizer.model"), "not a protobuf \xff\xff\xff");
  auto e = Engine::open({.model_dir = dir.path()});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(e.status().message(), dir.file("tokenizer.model"));
}

TEST(EngineOpenErrorsTest, CorruptTokenizerConfig) {
  moe::testing::ScopedTempDir dir("engine_badtokcfg");
  moe::testing::copy_model_dir(moe::testing::sharded_model_dir(), dir.path());
  moe::testing::write_file(dir.file("tokenizer_config.json"), "{\"add_bos_token\": ");
  auto e = Engine::open({.model_dir = dir.path()});
  ASSERT_FALSE(e.ok());
  EXPECT_CONTAINS(e.status().message(), dir.file("tokenizer_config.json"));
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// fp8_mode native on a bf16 checkpoint used to be accepted and ignored.
TEST(EngineOpenErrorsTest, Fp8NativeWithoutFp8WeightsIsRefused) {
  EngineOptions o{.model_dir = tiny_model_dir(), .num_threads = 1};
  o.fp8_mode = Fp8Mode::kNative;
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "--fp8 native");
  EXPECT_CONTAINS(e.status().message(), "quantization_config");
  o.fp8_mode = Fp8Mode::kDequant;  // the default: nothing to dequantise, fine
  EXPECT_TRUE(Engine::open(o).ok());
}

}  // namespace
}  // namespace moe
