// The one request validator (Engine::generate and Scheduler::submit): every bad field is
// InvalidArgument naming the field and value; the prompt's ids come back when valid.
#include "moe/engine/request_validation.h"

#include <gtest/gtest.h>

#include <limits>

#include "contains_util.h"

namespace moe {
namespace {

const std::string kNoPrompt;

// Ids only, so no tokenizer is needed.
struct Req {
  std::vector<int> ids{1, 5, 7};
  int max_tokens = 4;
  SamplingParams sampling{};
  std::vector<std::string> stop{};
  std::vector<int> stop_token_ids{};
  int logprobs = -1, prompt_logprobs = -1;
  RequestFields fields() const {
    return {.prompt = kNoPrompt,
            .prompt_token_ids = ids,
            .max_tokens = max_tokens,
            .sampling = sampling,
            .stop = stop,
            .stop_token_ids = stop_token_ids,
            .logprobs = logprobs,
            .prompt_logprobs = prompt_logprobs};
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

TEST(RequestValidation, MinP) {
  Req r;
  r.sampling.min_p = 1.0f;  // the bounds are valid
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
  r.sampling.min_p = 0.0f;
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
  r.sampling.min_p = 1.5f;
  EXPECT_CONTAINS(expect_invalid(r), "min_p must be in [0, 1] (got 1.5)");
  r.sampling.min_p = -0.1f;
  EXPECT_CONTAINS(expect_invalid(r), "min_p");
  r.sampling.min_p = std::numeric_limits<float>::quiet_NaN();
  EXPECT_CONTAINS(expect_invalid(r), "min_p");
}

TEST(RequestValidation, PresenceAndFrequencyPenalties) {
  Req r;
  r.sampling.presence_penalty = 2.0f;
  r.sampling.frequency_penalty = -2.0f;
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
  r.sampling.presence_penalty = 2.5f;
  EXPECT_CONTAINS(expect_invalid(r), "presence_penalty must be in [-2, 2] (got 2.5)");
  r.sampling.presence_penalty = 0;
  r.sampling.frequency_penalty = -3.0f;
  EXPECT_CONTAINS(expect_invalid(r), "frequency_penalty must be in [-2, 2] (got -3)");
  r.sampling.frequency_penalty = std::numeric_limits<float>::quiet_NaN();
  EXPECT_CONTAINS(expect_invalid(r), "frequency_penalty");
}

TEST(RequestValidation, RepetitionPenalty) {
  Req r;
  r.sampling.repetition_penalty = 5.0f;  // vLLM's bound is > 0 only
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
  r.sampling.repetition_penalty = 0.0f;
  EXPECT_CONTAINS(expect_invalid(r), "repetition_penalty must be a finite number > 0 (got 0)");
  r.sampling.repetition_penalty = -1.0f;
  EXPECT_CONTAINS(expect_invalid(r), "repetition_penalty");
  r.sampling.repetition_penalty = std::numeric_limits<float>::infinity();
  EXPECT_CONTAINS(expect_invalid(r), "repetition_penalty");
}

TEST(RequestValidation, LogitBias) {
  Req r;
  r.sampling.logit_bias = {{0, -100.0f}, {15, 100.0f}};
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
  r.sampling.logit_bias = {{3, 100.5f}};
  EXPECT_CONTAINS(expect_invalid(r), "logit_bias for token 3 must be in [-100, 100] (got 100.5)");
  r.sampling.logit_bias = {{3, std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_CONTAINS(expect_invalid(r), "logit_bias for token 3");
  r.sampling.logit_bias = {{16, 1.0f}};
  EXPECT_CONTAINS(expect_invalid(r), "logit_bias token id 16 is outside the vocabulary [0, 16)");
  r.sampling.logit_bias = {{-1, 1.0f}};
  EXPECT_CONTAINS(expect_invalid(r), "logit_bias token id -1");
}

TEST(RequestValidation, LogprobsAndPromptLogprobs) {
  Req r;
  r.logprobs = 20;
  r.prompt_logprobs = 0;
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
  r.logprobs = 21;
  EXPECT_CONTAINS(expect_invalid(r), "logprobs must be in [-1, 20] (-1 = off; got 21)");
  r.logprobs = -2;
  EXPECT_CONTAINS(expect_invalid(r), "logprobs must be in [-1, 20]");
  r.logprobs = -1;
  r.prompt_logprobs = 25;
  EXPECT_CONTAINS(expect_invalid(r), "prompt_logprobs must be in [-1, 20] (-1 = off; got 25)");
}

TEST(RequestValidation, StopTokenIdsOutsideTheVocabulary) {
  Req r;
  r.stop_token_ids = {0, 15};
  EXPECT_TRUE(validate_request(r.fields(), kLimits).ok());
  r.stop_token_ids = {2, 16};
  EXPECT_CONTAINS(expect_invalid(r), "stop_token_ids[1] = 16 is outside the vocabulary [0, 16)");
  r.stop_token_ids = {-5};
  EXPECT_CONTAINS(expect_invalid(r), "stop_token_ids[0] = -5");
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
