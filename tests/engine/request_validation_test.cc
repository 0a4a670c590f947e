// The one request validator (Engine::generate and Scheduler::submit): every bad field is
// InvalidArgument naming the field and value; the prompt's ids come back when valid.
#include "moe/engine/request_validation.h"

#include <gtest/gtest.h>

#include <limits>

#include "contains_util.h"

namespace moe {
namespace {

const std::string kNoPrompt;
const std::vector<std::string> kNoStop;

// Ids only, so no tokenizer is needed.
struct Req {
  std::vector<int> ids{1, 5, 7};
  int max_tokens = 4;
  SamplingParams sampling{};
  std::vector<std::string> stop{};
  RequestFields fields() const {
    return {.prompt = kNoPrompt, .prompt_token_ids = ids, .max_tokens = max_tokens, .sampling = sampling, .stop = stop};
  }
};

constexpr RequestLimits kLimits{.tokenizer = nullptr, .vocab_size = 16, .max_context = 10, .min_max_tokens = 1};

std::string expect_invalid(const Req& r, RequestLimits limits = kLimits) {
  auto got = validate_request(r.fields(), limits);
  EXPECT_FALSE(got.ok());
  if (got.ok()) return "";
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << got.status().to_string();
  return got.status().message();
}

TEST(RequestValidation, ValidRequestReturnsThePromptIds) {
  Req r;
  auto got = validate_request(r.fields(), kLimits);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got.value(), r.ids);
  r.max_tokens = 7;  // exactly the context
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
}

TEST(RequestValidation, SamplingValues) {
  Req r;
  r.sampling.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_CONTAINS(expect_invalid(r), "temperature");
  r.sampling.temperature = 0;
  r.sampling.top_p = 0;
  EXPECT_CONTAINS(expect_invalid(r), "top_p");
  r.sampling.top_p = 1;
  r.sampling.top_k = -1;
  EXPECT_CONTAINS(expect_invalid(r), "top_k");
}

TEST(RequestValidation, MaxTokensBelowTheCallersMinimum) {
  Req r;
  r.max_tokens = 0;
  EXPECT_CONTAINS(expect_invalid(r), "max_tokens must be >= 1 (got 0)");
  RequestLimits generate = kLimits;
  generate.min_max_tokens = 0;
  EXPECT_TRUE(validate_request(r.fields(), generate).ok());
  r.max_tokens = -1;
  EXPECT_CONTAINS(expect_invalid(r, generate), "max_tokens must be >= 0 (got -1)");
}

TEST(RequestValidation, StopStrings) {
  Req r;
  r.stop = {"a", "b", "c", "d", "e"};
  EXPECT_CONTAINS(expect_invalid(r), "at most 4 stop strings (got 5)");
  r.stop = {"a", ""};
  EXPECT_CONTAINS(expect_invalid(r), "stop strings must not be empty");
}

TEST(RequestValidation, PromptIdsOutsideTheVocabulary) {
  Req r;
  r.ids = {1, 16};
  const std::string m = expect_invalid(r);
  EXPECT_CONTAINS(m, "prompt token id 16 at position 1");
  EXPECT_CONTAINS(m, "[0, 16)");
  r.ids = {-2};
  EXPECT_CONTAINS(expect_invalid(r), "prompt token id -2 at position 0");
}

TEST(RequestValidation, EmptyPrompt) {
  Req r;
  r.ids.clear();
  EXPECT_CONTAINS(expect_invalid(r), "prompt is empty");
}

TEST(RequestValidation, ContextOverflowIsInvalidArgumentNamingBothParts) {
  Req r;
  r.max_tokens = 8;  // 3 + 8 > 10
  const std::string m = expect_invalid(r);
  EXPECT_CONTAINS(m, "maximum context length is 10");
  EXPECT_CONTAINS(m, "11 were requested");
  EXPECT_CONTAINS(m, "prompt (3 tokens)");
  EXPECT_CONTAINS(m, "max_tokens (8)");
  EXPECT_CONTAINS(m, "context of 10");
}

}  // namespace
}  // namespace moe
