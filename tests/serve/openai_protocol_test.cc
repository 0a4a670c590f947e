#include "moe/serve/openai_protocol.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <limits>

namespace moe::serve {
namespace {

using nlohmann::json;

ProtocolLimits limits() {
  ProtocolLimits l;
  l.served_model_name = "m";
  l.max_tokens_limit = 100;
  l.vocab_size = 50;
  return l;
}

std::optional<ApiError> parse(Endpoint e, const std::string& body, OpenAiRequest* out = nullptr) {
  OpenAiRequest r;
  return parse_request(e, body, limits(), out ? out : &r);
}

// Expects a 400 naming `param`.
void expect_bad(Endpoint e, const std::string& body, const std::string& param) {
  auto err = parse(e, body);
  ASSERT_TRUE(err.has_value()) << body;
  EXPECT_EQ(err->http_status, 400) << body;
  EXPECT_EQ(err->param, param) << body << " -> " << err->message;
  EXPECT_EQ(err->type, "invalid_request_error");
  EXPECT_FALSE(err->message.empty());
}

constexpr Endpoint kCmpl = Endpoint::kCompletions;
constexpr Endpoint kChat = Endpoint::kChatCompletions;

TEST(OpenAiProtocol, CompletionDefaultsFollowOpenAi) {
  OpenAiRequest r;
  ASSERT_FALSE(parse(kCmpl, R"({"model":"m","prompt":"hi"})", &r));
  EXPECT_EQ(r.seq.prompt, "hi");
  EXPECT_EQ(r.seq.max_tokens, 16);
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.seq.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.seq.sampling.top_p, 1.0f);
  EXPECT_EQ(r.seq.sampling.top_k, 0);
  EXPECT_FALSE(r.seq.sampling.seed.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
}

// top_p 1e-300 is valid, but as a float it rounds to 0 and used to be refused ("got
// 0.000000"). It becomes the smallest positive float: the same nucleus (the top token).
TEST(OpenAiProtocol, TinyTopPIsAcceptedAsTheSmallestPositiveFloat) {
  OpenAiRequest r;
  ASSERT_FALSE(parse(kCmpl, R"({"model":"m","prompt":"x","top_p":1e-300})", &r));
  EXPECT_GT(r.seq.sampling.top_p, 0.0f);
  EXPECT_EQ(r.seq.sampling.top_p, std::numeric_limits<float>::denorm_min());
}

TEST(OpenAiProtocol, CompletionFields) {
  OpenAiRequest r;
  ASSERT_FALSE(parse(kCmpl,
                     R"({"model":"m","prompt":["x"],"max_tokens":5,"temperature":0,"top_p":0.5,"top_k":7,"seed":-3,
                         "stop":["a","bb"],"n":1,"echo":false,"stream":true,"stream_options":{"include_usage":true},
                         "user":"u","presence_penalty":0,"frequency_penalty":0.0,"logprobs":null,"unknown":{"x":1}})",
                     &r));
  EXPECT_EQ(r.seq.prompt, "x");
  EXPECT_EQ(r.seq.max_tokens, 5);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_FLOAT_EQ(r.seq.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r.seq.sampling.top_p, 0.5f);
  EXPECT_EQ(r.seq.sampling.top_k, 7);
  EXPECT_EQ(r.seq.sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.seq.stop, (std::vector<std::string>{"a", "bb"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiProtocol, PromptForms) {
  OpenAiRequest r;
  // Without 'model': the served one (as vLLM).
  ASSERT_FALSE(parse(kCmpl, R"({"prompt":"hi"})", &r));
  EXPECT_EQ(r.model, "m");
  ASSERT_FALSE(parse(kCmpl, R"({"model":"m","prompt":[1,2,49]})", &r));
  EXPECT_EQ(r.seq.prompt_token_ids, (std::vector<int>{1, 2, 49}));
  ASSERT_FALSE(parse(kCmpl, R"({"model":"m","prompt":[[3,4]]})", &r));
  EXPECT_EQ(r.seq.prompt_token_ids, (std::vector<int>{3, 4}));
  ASSERT_FALSE(parse(kCmpl, R"({"model":"m","prompt":"x","stop":"END","top_k":-1})", &r));
  EXPECT_EQ(r.seq.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(r.seq.sampling.top_k, 0);
  EXPECT_FALSE(r.seq.ignore_eos);
  ASSERT_FALSE(parse(kCmpl, R"({"model":"m","prompt":"x","ignore_eos":true})", &r));
  EXPECT_TRUE(r.seq.ignore_eos);
}

TEST(OpenAiProtocol, BadCompletionFields) {
  expect_bad(kCmpl, R"({"model":"m"})", "prompt");
  expect_bad(kCmpl, R"({"model":"m","prompt":""})", "prompt");
  expect_bad(kCmpl, R"({"model":"m","prompt":[]})", "prompt");
  expect_bad(kCmpl, R"({"model":"m","prompt":[1,"a"]})", "prompt");
  expect_bad(kCmpl, R"({"model":"m","prompt":[1,50]})", "prompt");
  expect_bad(kCmpl, R"({"model":"m","prompt":[-1]})", "prompt");
  expect_bad(kCmpl, R"({"model":"m","prompt":5})", "prompt");
  expect_bad(kCmpl, R"({"model":"m","prompt":{"a":1}})", "prompt");
  expect_bad(kCmpl, R"({"model":7,"prompt":"x"})", "model");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","max_tokens":0})", "max_tokens");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","max_tokens":-5})", "max_tokens");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","max_tokens":101})", "max_tokens");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","max_tokens":"5"})", "max_tokens");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","max_tokens":5.5})", "max_tokens");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","max_tokens":18446744073709551615})", "max_tokens");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","temperature":2.5})", "temperature");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","temperature":-0.1})", "temperature");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","temperature":"hot"})", "temperature");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","top_p":0})", "top_p");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","top_p":1.5})", "top_p");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","top_k":-2})", "top_k");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","top_k":1.5})", "top_k");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","seed":"1"})", "seed");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","stop":["a","b","c","d","e"]})", "stop");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","stop":[1]})", "stop");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","stop":""})", "stop");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","stop":7})", "stop");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","n":"1"})", "n");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","echo":"no"})", "echo");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","stream":"yes"})", "stream");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","ignore_eos":1})", "ignore_eos");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", "stream_options");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":1}})",
             "stream_options.include_usage");
}

TEST(OpenAiProtocol, UnknownModelIs404) {
  auto err = parse(kCmpl, R"({"model":"gpt-4","prompt":"x"})");
  ASSERT_TRUE(err);
  EXPECT_EQ(err->http_status, 404);
  EXPECT_EQ(err->code, "model_not_found");
  EXPECT_EQ(err->param, "model");
  EXPECT_NE(err->message.find("gpt-4"), std::string::npos);
}

TEST(OpenAiProtocol, MalformedBodies) {
  expect_bad(kCmpl, "", "");
  expect_bad(kCmpl, "{", "");
  expect_bad(kCmpl, R"({"model":"m","prompt":"x",})", "");
  expect_bad(kCmpl, "[1,2]", "");
  expect_bad(kCmpl, "null", "");
  auto err = parse(kCmpl, "{\"model\":\"m\",\"prompt\":\"\xff\xfe\"}");
  ASSERT_TRUE(err);
  EXPECT_EQ(err->http_status, 400);
  EXPECT_NE(err->message.find("UTF-8"), std::string::npos);
}

TEST(OpenAiProtocol, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xc3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xe0\x80\xaf"));      // overlong 3-byte
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\x80"));              // stray continuation
}

TEST(OpenAiProtocol, ChatMessages) {
  OpenAiRequest r;
  ASSERT_FALSE(parse(kChat,
                     R"({"model":"m","messages":[{"role":"system","content":"s"},
                         {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                         {"role":"assistant","content":null},{"role":"developer","content":"d"}]})",
                     &r));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].role, "system");
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_TRUE(r.seq.prompt.empty());
  ASSERT_FALSE(parse(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":9,
                               "max_tokens":3,"logprobs":false})",
                     &r));
  EXPECT_EQ(r.seq.max_tokens, 9);
  EXPECT_TRUE(r.max_tokens_given);
}

TEST(OpenAiProtocol, BadChatFields) {
  expect_bad(kChat, R"({"model":"m"})", "messages");
  expect_bad(kChat, R"({"model":"m","messages":[]})", "messages");
  expect_bad(kChat, R"({"model":"m","messages":"hi"})", "messages");
  expect_bad(kChat, R"({"model":"m","messages":["hi"]})", "messages[0]");
  expect_bad(kChat, R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role");
  expect_bad(kChat, R"({"model":"m","messages":[{"role":"robot","content":"x"}]})", "messages[0].role");
  expect_bad(kChat, R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content");
  expect_bad(kChat, R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages[0].content");
  expect_bad(kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
             "messages[0].content[0].type");
  expect_bad(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":0})",
             "max_completion_tokens");
  // top_logprobs needs logprobs: true (as OpenAI and vLLM).
  expect_bad(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})", "top_logprobs");
}

TEST(OpenAiProtocol, ErrorJson) {
  ApiError e;
  e.http_status = 404;
  e.message = "no such model";
  e.code = "model_not_found";
  json j = json::parse(error_json(e));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "model_not_found");
}

TEST(OpenAiProtocol, ResponseObjects) {
  ResponseMeta meta{make_response_id("cmpl-"), 1700000000, "m"};
  EXPECT_EQ(meta.id.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(meta.id.size(), 5u + 24u);
  EXPECT_NE(make_response_id("x"), make_response_id("x"));
  json c = json::parse(completion_json(meta, "hello", "length", {3, 2}));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["created"], 1700000000);
  EXPECT_EQ(c["model"], "m");
  EXPECT_EQ(c["choices"][0]["text"], "hello");
  EXPECT_EQ(c["choices"][0]["index"], 0);
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(c["usage"], json::parse(R"({"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}})"));
  json cc = json::parse(chat_completion_json(meta, "hi", "stop", {1, 1}));
  EXPECT_EQ(cc["object"], "chat.completion");
  EXPECT_EQ(cc["choices"][0]["message"], json::parse(R"({"role":"assistant","content":"hi"})"));
  EXPECT_EQ(cc["choices"][0]["finish_reason"], "stop");
  // A cut multi-byte character in the output is replaced, not thrown.
  json bad = json::parse(completion_json(meta, "ok\xe2\x82", "length", {1, 1}));
  EXPECT_EQ(bad["choices"][0]["text"].get<std::string>().substr(0, 2), "ok");
}

TEST(OpenAiProtocol, StreamChunks) {
  ResponseMeta meta{"chatcmpl-1", 5, "m"};
  json role = json::parse(chat_role_chunk_json(meta, false));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(role.contains("usage"));
  json mid = json::parse(chat_chunk_json(meta, "ab", "", true));
  EXPECT_EQ(mid["choices"][0]["delta"], json::parse(R"({"content":"ab"})"));
  EXPECT_TRUE(mid.contains("usage") && mid["usage"].is_null());
  json last = json::parse(chat_chunk_json(meta, "", "stop", false));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  json usage = json::parse(usage_chunk_json(Endpoint::kChatCompletions, meta, {4, 2}));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 6);
  json tc = json::parse(completion_chunk_json(meta, "x", "", false));
  EXPECT_EQ(tc["object"], "text_completion");
  EXPECT_EQ(tc["choices"][0]["text"], "x");
  EXPECT_EQ(sse_event("{}"), "data: {}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

}  // namespace
}  // namespace moe::serve
