// Parsing of the OpenAI / vLLM generation parameters (n, logprobs, echo, penalties,
// min_p, logit_bias, stop_token_ids, response_format, prompt lists), their 400s, the
// refusal of unsupported fields, and sequence_requests()'s expansion into n * prompts
// sequences. Expected values are the request's own numbers (hand-checked).
#include "moe/serve/openai_params.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace moe::serve {
namespace {

using nlohmann::json;
constexpr Endpoint kCmpl = Endpoint::kCompletions;
constexpr Endpoint kChat = Endpoint::kChatCompletions;

ProtocolLimits limits() {
  ProtocolLimits l;
  l.served_model_name = "m";
  l.max_tokens_limit = 100;
  l.vocab_size = 50;
  l.max_n = 4;
  return l;
}

OpenAiRequest parse_ok(Endpoint e, const json& body) {
  OpenAiRequest r;
  auto err = parse_request(e, body.dump(), limits(), &r);
  EXPECT_FALSE(err.has_value()) << body.dump() << " -> " << (err ? err->param + ": " + err->message : "");
  return r;
}

// A completions body with prompt "x" plus `extra`.
json cmpl(json extra) {
  json b = {{"prompt", "x"}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}
json chat(json extra) {
  json b = {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

void expect_bad(Endpoint e, const json& body, const std::string& param, const std::string& words = "") {
  OpenAiRequest r;
  auto err = parse_request(e, body.dump(), limits(), &r);
  ASSERT_TRUE(err.has_value()) << body.dump();
  EXPECT_EQ(err->http_status, 400) << body.dump();
  EXPECT_EQ(err->param, param) << body.dump() << " -> " << err->message;
  EXPECT_NE(err->message.find(param.empty() ? "" : param.substr(0, param.find('.'))), std::string::npos)
      << "the message names the field: " << err->message;
  if (!words.empty()) {
    EXPECT_NE(err->message.find(words), std::string::npos) << err->message;
  }
}

TEST(OpenAiParams, DefaultsAreNeutral) {
  const OpenAiRequest r = parse_ok(kCmpl, cmpl({}));
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.seq.logprobs, -1);
  EXPECT_EQ(r.seq.prompt_logprobs, -1);
  EXPECT_EQ(r.seq.sampling.presence_penalty, 0.0f);
  EXPECT_EQ(r.seq.sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(r.seq.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(r.seq.sampling.min_p, 0.0f);
  EXPECT_TRUE(r.seq.sampling.logit_bias.empty());
  EXPECT_TRUE(r.seq.stop_token_ids.empty());
  EXPECT_EQ(r.seq.response_format, "text");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "x");
}

TEST(OpenAiParams, SamplingParametersReachTheSequence) {
  const OpenAiRequest r = parse_ok(kCmpl, cmpl({{"presence_penalty", 1.5},
                                                {"frequency_penalty", -2},
                                                {"repetition_penalty", 1.3},
                                                {"min_p", 0.25},
                                                {"logit_bias", {{"7", 100}, {"0", -100}, {"49", 0.5}}},
                                                {"stop_token_ids", {3, 49}},
                                                {"ignore_eos", true}}));
  const SamplingParams& s = r.seq.sampling;
  EXPECT_FLOAT_EQ(s.presence_penalty, 1.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -2.0f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.3f);
  EXPECT_FLOAT_EQ(s.min_p, 0.25f);
  auto bias = s.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int, float>>{{0, -100.0f}, {7, 100.0f}, {49, 0.5f}}));
  EXPECT_EQ(r.seq.stop_token_ids, (std::vector<int>{3, 49}));
  EXPECT_TRUE(r.seq.ignore_eos);
  // Chat takes the same fields.
  const OpenAiRequest c = parse_ok(kChat, chat({{"min_p", 1}, {"repetition_penalty", 0.5}, {"logit_bias", json::object()}}));
  EXPECT_FLOAT_EQ(c.seq.sampling.min_p, 1.0f);
  EXPECT_FLOAT_EQ(c.seq.sampling.repetition_penalty, 0.5f);
}

TEST(OpenAiParams, BadSamplingValuesNameTheField) {
  expect_bad(kCmpl, cmpl({{"presence_penalty", 2.5}}), "presence_penalty", "[-2, 2]");
  expect_bad(kCmpl, cmpl({{"presence_penalty", "1"}}), "presence_penalty");
  expect_bad(kCmpl, cmpl({{"frequency_penalty", -2.01}}), "frequency_penalty");
  expect_bad(kCmpl, cmpl({{"repetition_penalty", 0}}), "repetition_penalty", "> 0");
  expect_bad(kCmpl, cmpl({{"repetition_penalty", -1}}), "repetition_penalty");
  expect_bad(kCmpl, cmpl({{"min_p", 1.5}}), "min_p");
  expect_bad(kCmpl, cmpl({{"min_p", -0.1}}), "min_p");
  expect_bad(kChat, chat({{"min_p", true}}), "min_p");
  // logit_bias: not an object, keys that are not token ids, values that are not numbers in range.
  expect_bad(kCmpl, cmpl({{"logit_bias", json::parse("[1,2]")}}), "logit_bias");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"abc", 1}}}}), "logit_bias", "\"abc\"");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"-1", 1}}}}), "logit_bias");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"1.5", 1}}}}), "logit_bias");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"", 1}}}}), "logit_bias");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"50", 1}}}}), "logit_bias", "[0, 50)");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"99999999999", 1}}}}), "logit_bias");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"3", "high"}}}}), "logit_bias", "token 3");
  expect_bad(kCmpl, cmpl({{"logit_bias", {{"3", 100.5}}}}), "logit_bias", "[-100, 100]");
  expect_bad(kChat, chat({{"logit_bias", {{"3", nullptr}}}}), "logit_bias");
  expect_bad(kCmpl, cmpl({{"stop_token_ids", 3}}), "stop_token_ids");
  expect_bad(kCmpl, cmpl({{"stop_token_ids", json::parse("[50]")}}), "stop_token_ids");
  expect_bad(kCmpl, cmpl({{"stop_token_ids", json::parse("[-1]")}}), "stop_token_ids");
  expect_bad(kCmpl, cmpl({{"stop_token_ids", json::parse(R"(["3"])")}}), "stop_token_ids");
}

TEST(OpenAiParams, NAndBestOf) {
  OpenAiRequest r = parse_ok(kCmpl, cmpl({{"n", 4}, {"best_of", 4}}));
  EXPECT_EQ(r.n, 4);
  r = parse_ok(kChat, chat({{"n", 3}}));
  EXPECT_EQ(r.n, 3);
  expect_bad(kCmpl, cmpl({{"n", 5}}), "n", "at most 4");
  expect_bad(kChat, chat({{"n", 17}}), "n", "at most 4");
  expect_bad(kCmpl, cmpl({{"n", 0}}), "n");
  expect_bad(kCmpl, cmpl({{"n", 1.5}}), "n");
  expect_bad(kCmpl, cmpl({{"n", 2}, {"best_of", 3}}), "best_of");
  expect_bad(kCmpl, cmpl({{"best_of", 2}}), "best_of");
}

TEST(OpenAiParams, CompletionLogprobsAndEcho) {
  OpenAiRequest r = parse_ok(kCmpl, cmpl({{"logprobs", 5}}));
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_EQ(r.seq.logprobs, 5);
  EXPECT_EQ(r.seq.prompt_logprobs, -1);
  r = parse_ok(kCmpl, cmpl({{"logprobs", 0}, {"echo", true}}));
  EXPECT_EQ(r.logprobs, 0);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.seq.prompt_logprobs, 0);  // echo with logprobs: the prompt's logprobs too
  r = parse_ok(kCmpl, cmpl({{"echo", true}}));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.seq.prompt_logprobs, -1);
  r = parse_ok(kCmpl, cmpl({{"logprobs", 20}}));
  EXPECT_EQ(r.logprobs, 20);
  expect_bad(kCmpl, cmpl({{"logprobs", 21}}), "logprobs", "at most 20");
  expect_bad(kCmpl, cmpl({{"logprobs", -1}}), "logprobs");
  expect_bad(kCmpl, cmpl({{"logprobs", true}}), "logprobs");
  expect_bad(kCmpl, cmpl({{"echo", 1}}), "echo");
}

TEST(OpenAiParams, ChatLogprobsAndTopLogprobs) {
  OpenAiRequest r = parse_ok(kChat, chat({{"logprobs", true}}));
  EXPECT_EQ(r.logprobs, 0);
  EXPECT_EQ(r.seq.logprobs, 0);
  r = parse_ok(kChat, chat({{"logprobs", true}, {"top_logprobs", 20}}));
  EXPECT_EQ(r.logprobs, 20);
  r = parse_ok(kChat, chat({{"logprobs", false}}));
  EXPECT_EQ(r.logprobs, -1);
  expect_bad(kChat, chat({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs", "at most 20");
  expect_bad(kChat, chat({{"logprobs", true}, {"top_logprobs", -1}}), "top_logprobs");
  expect_bad(kChat, chat({{"logprobs", false}, {"top_logprobs", 1}}), "top_logprobs", "'logprobs': true");
  expect_bad(kChat, chat({{"top_logprobs", 0}}), "top_logprobs");
  expect_bad(kChat, chat({{"logprobs", 3}}), "logprobs");
  expect_bad(kChat, chat({{"echo", true}}), "echo");
}

TEST(OpenAiParams, ResponseFormat) {
  OpenAiRequest r = parse_ok(kChat, chat({{"response_format", {{"type", "text"}}}}));
  EXPECT_EQ(r.seq.response_format, "text");
  r = parse_ok(kChat, chat({{"response_format", {{"type", "json_object"}}}}));
  EXPECT_EQ(r.seq.response_format, "json_object");
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  r = parse_ok(kChat, chat({{"response_format",
                             {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}, {"strict", true}}}}}}));
  EXPECT_EQ(r.seq.response_format, "json_schema");
  EXPECT_EQ(json::parse(r.seq.json_schema), schema);
  r = parse_ok(kCmpl, cmpl({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "s"}}}}}}));
  EXPECT_EQ(r.seq.response_format, "json_object");  // no schema: any JSON object (OpenAI: schema optional)
  expect_bad(kChat, chat({{"response_format", "json"}}), "response_format");
  expect_bad(kChat, chat({{"response_format", json::object()}}), "response_format.type");
  expect_bad(kChat, chat({{"response_format", {{"type", "yaml"}}}}), "response_format.type", "yaml");
  expect_bad(kChat, chat({{"response_format", {{"type", "json_schema"}}}}), "response_format.json_schema");
  expect_bad(kChat, chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", "x"}}}}}}),
             "response_format.json_schema.schema");
  expect_bad(kChat, chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", 3}}}}}}),
             "response_format.json_schema.name");
  expect_bad(kChat, chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"strict", "yes"}}}}}}),
             "response_format.json_schema.strict");
}

TEST(OpenAiParams, PromptLists) {
  OpenAiRequest r = parse_ok(kCmpl, {{"prompt", {"ab", "c", "def"}}});
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[2].text, "def");
  EXPECT_EQ(r.seq.prompt, "ab");
  r = parse_ok(kCmpl, {{"prompt", json::parse("[[1,2],[3]]")}});
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].token_ids, (std::vector<int>{3}));
  EXPECT_EQ(r.seq.prompt_token_ids, (std::vector<int>{1, 2}));
  json many = json::array();
  for (int i = 0; i < kMaxPromptsPerRequest; ++i) many.push_back("p");
  EXPECT_EQ(parse_ok(kCmpl, {{"prompt", many}}).prompts.size(), static_cast<size_t>(kMaxPromptsPerRequest));
  many.push_back("p");
  expect_bad(kCmpl, {{"prompt", many}}, "prompt", "at most 64");
  expect_bad(kCmpl, {{"prompt", {"a", ""}}}, "prompt", "prompt[1]");
  expect_bad(kCmpl, {{"prompt", json::parse(R"(["a",[1]])")}}, "prompt");
  expect_bad(kCmpl, {{"prompt", json::parse(R"([[1],"a"])")}}, "prompt");
  expect_bad(kCmpl, {{"prompt", json::parse("[[1],[]]")}}, "prompt");
  expect_bad(kCmpl, {{"prompt", json::parse("[[1],[50]]")}}, "prompt");
  // n * prompts is bounded too.
  json twenty = json::array();
  for (int i = 0; i < 20; ++i) twenty.push_back("p");
  expect_bad(kCmpl, {{"prompt", twenty}, {"n", 4}}, "n", "64 sequences");
}

TEST(OpenAiParams, UnsupportedFieldsAreRefusedByName) {
  expect_bad(kChat, chat({{"tools", json::parse(R"([{"type":"function"}])")}}), "tools");
  expect_bad(kChat, chat({{"functions", json::parse(R"([{"name":"f"}])")}}), "functions");
  expect_bad(kChat, chat({{"function_call", "auto"}}), "function_call");
  expect_bad(kChat, chat({{"tool_choice", "required"}}), "tool_choice");
  expect_bad(kChat, chat({{"tool_choice", {{"type", "function"}}}}), "tool_choice");
  expect_bad(kChat, chat({{"modalities", {"text", "audio"}}}), "modalities");
  expect_bad(kChat, chat({{"audio", {{"voice", "x"}}}}), "audio");
  expect_bad(kChat, chat({{"prediction", {{"type", "content"}}}}), "prediction");
  expect_bad(kChat, chat({{"add_generation_prompt", false}}), "add_generation_prompt");
  expect_bad(kChat, chat({{"continue_final_message", true}}), "continue_final_message");
  expect_bad(kChat, chat({{"chat_template", "{{x}}"}}), "chat_template");
  expect_bad(kCmpl, cmpl({{"suffix", "end"}}), "suffix");
  expect_bad(kCmpl, cmpl({{"use_beam_search", true}}), "use_beam_search");
  expect_bad(kCmpl, cmpl({{"guided_json", {{"type", "object"}}}}), "guided_json", "response_format");
  expect_bad(kCmpl, cmpl({{"guided_regex", "a+"}}), "guided_regex");
  expect_bad(kCmpl, cmpl({{"min_tokens", 3}}), "min_tokens");
  expect_bad(kCmpl, cmpl({{"prompt_logprobs", 1}}), "prompt_logprobs", "echo");
  expect_bad(kCmpl, cmpl({{"include_stop_str_in_output", true}}), "include_stop_str_in_output");
  expect_bad(kCmpl, cmpl({{"skip_special_tokens", false}}), "skip_special_tokens");
  expect_bad(kCmpl, cmpl({{"truncate_prompt_tokens", 5}}), "truncate_prompt_tokens");
  expect_bad(kCmpl, cmpl({{"length_penalty", 0.5}}), "length_penalty");
  // Their neutral values, and harmless metadata, are accepted.
  parse_ok(kChat, chat({{"tools", json::array()}, {"tool_choice", "none"}, {"parallel_tool_calls", true},
                        {"modalities", json::parse(R"(["text"])")}, {"user", "u"}, {"metadata", {{"k", "v"}}}, {"store", false},
                        {"add_generation_prompt", true}, {"echo", false}}));
  parse_ok(kChat, chat({{"tool_choice", "auto"}}));
  parse_ok(kCmpl, cmpl({{"suffix", ""}, {"use_beam_search", false}, {"min_tokens", 0}, {"skip_special_tokens", true},
                        {"include_stop_str_in_output", false}, {"length_penalty", 1}, {"best_of", 1}}));
}

TEST(OpenAiParams, CacheSalt) {
  EXPECT_EQ(parse_ok(Endpoint::kCompletions, cmpl({{"cache_salt", "tenant-7"}})).seq.cache_salt, "tenant-7");
  EXPECT_EQ(parse_ok(Endpoint::kChatCompletions, chat({{"cache_salt", std::string(256, 's')}})).seq.cache_salt.size(), 256u);
  EXPECT_EQ(parse_ok(Endpoint::kCompletions, cmpl({{"cache_salt", nullptr}})).seq.cache_salt, "");
  expect_bad(Endpoint::kCompletions, cmpl({{"cache_salt", 5}}), "cache_salt", "a string");
  expect_bad(Endpoint::kCompletions, cmpl({{"cache_salt", ""}}), "cache_salt", "non-empty");
  expect_bad(Endpoint::kChatCompletions, chat({{"cache_salt", std::string(257, 's')}}), "cache_salt", "at most 256");
}

TEST(OpenAiParams, SequenceRequestsArePromptMajorWithSeedPlusSample) {
  OpenAiRequest r = parse_ok(kCmpl, {{"prompt", {"a", "b"}}, {"n", 3}, {"seed", 10}, {"logprobs", 2},
                                     {"echo", true}, {"max_tokens", 7}});
  const std::vector<SeqRequest> seqs = sequence_requests(r);
  ASSERT_EQ(seqs.size(), 6u);
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(seqs[i].prompt, i < 3 ? "a" : "b") << i;
    EXPECT_EQ(seqs[i].sampling.seed, 10u + i % 3) << i;  // sample j: seed + j
    EXPECT_EQ(seqs[i].max_tokens, 7);
    EXPECT_EQ(seqs[i].logprobs, 2);
    EXPECT_EQ(seqs[i].prompt_logprobs, 2);
  }
  // Unseeded: every sequence draws its own random seed (left unset).
  r = parse_ok(kChat, chat({{"n", 2}}));
  r.seq.prompt = "rendered";
  const std::vector<SeqRequest> chat_seqs = sequence_requests(r);
  ASSERT_EQ(chat_seqs.size(), 2u);
  EXPECT_EQ(chat_seqs[1].prompt, "rendered");
  EXPECT_FALSE(chat_seqs[1].sampling.seed.has_value());
  r = parse_ok(kCmpl, {{"prompt", json::parse("[[5,6],[7]]")}});
  const std::vector<SeqRequest> id_seqs = sequence_requests(r);
  ASSERT_EQ(id_seqs.size(), 2u);
  EXPECT_EQ(id_seqs[1].prompt_token_ids, (std::vector<int>{7}));
  EXPECT_TRUE(id_seqs[1].prompt.empty());
}

}  // namespace
}  // namespace moe::serve
