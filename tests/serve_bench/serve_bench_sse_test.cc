// The incremental SSE parser (bytes split anywhere), the OpenAI chunk decoder and
// StreamRecorder's TTFT / ITL / usage bookkeeping.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "contains_util.h"
#include "moe/serve_bench/request_output.h"
#include "moe/serve_bench/sse.h"

namespace sb = moe::serve_bench;

namespace {

std::vector<std::string> parse_in_pieces(const std::string& stream, const std::vector<size_t>& cuts) {
  sb::SseParser p;
  std::vector<std::string> events;
  auto on = [&](std::string_view d) { events.emplace_back(d); };
  size_t prev = 0;
  for (size_t c : cuts) {
    p.feed(std::string_view(stream).substr(prev, c - prev), on);
    prev = c;
  }
  p.feed(std::string_view(stream).substr(prev), on);
  p.finish(on);
  return events;
}

const std::string kStream =
    ": keep-alive comment\r\n"
    "data: {\"choices\":[{\"text\":\"Hel\"}]}\r\n\r\n"
    "event: message\n"
    "data:{\"choices\":[{\"text\":\"lo\"}]}\n\n"
    "data: first line\n"
    "data: second line\r\r"
    "id: 7\n"
    "data: [DONE]\n\n";

const std::vector<std::string> kEvents = {"{\"choices\":[{\"text\":\"Hel\"}]}", "{\"choices\":[{\"text\":\"lo\"}]}",
                                          "first line\nsecond line", "[DONE]"};

}  // namespace

TEST(ServeBenchSse, WholeStream) { EXPECT_EQ(parse_in_pieces(kStream, {}), kEvents); }

TEST(ServeBenchSse, EverySplitPoint) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    EXPECT_EQ(parse_in_pieces(kStream, {cut}), kEvents) << "split at " << cut;
  }
}

TEST(ServeBenchSse, ByteByByte) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i < kStream.size(); ++i) cuts.push_back(i);
  EXPECT_EQ(parse_in_pieces(kStream, cuts), kEvents);
}

TEST(ServeBenchSse, CrLfSplitBetweenReadsIsOneLineEnd) {
  // "\r" ends one read, "\n" starts the next: one line break, not an empty line.
  const std::string s = "data: a\r\ndata: b\r\n\r\n";
  EXPECT_EQ(parse_in_pieces(s, {8}), (std::vector<std::string>{"a\nb"}));
}

TEST(ServeBenchSse, LastEventWithoutBlankLineIsDispatchedAtFinish) {
  EXPECT_EQ(parse_in_pieces("data: x\n\ndata: [DONE]", {}), (std::vector<std::string>{"x", "[DONE]"}));
  EXPECT_EQ(parse_in_pieces("data: y\n", {}), (std::vector<std::string>{"y"}));
  EXPECT_TRUE(parse_in_pieces(": only a comment\n\n", {}).empty());
  EXPECT_TRUE(parse_in_pieces("", {}).empty());
}

TEST(ServeBenchSse, ParseCompletionChunk) {
  auto c = sb::parse_stream_chunk(R"({"id":"x","choices":[{"index":0,"text":"ab","finish_reason":null}]})", false);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->has_choices);
  EXPECT_EQ(c->text, "ab");
  EXPECT_FALSE(c->done);
  EXPECT_FALSE(c->completion_tokens.has_value());

  auto usage = sb::parse_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})", false);
  ASSERT_TRUE(usage.ok());
  EXPECT_FALSE(usage->has_choices);
  EXPECT_EQ(*usage->prompt_tokens, 12);
  EXPECT_EQ(*usage->completion_tokens, 34);

  // choices and usage in the same chunk
  auto both = sb::parse_stream_chunk(
      R"({"choices":[{"text":"z","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":8}})", false);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->text, "z");
  EXPECT_EQ(both->finish_reason, "length");
  EXPECT_EQ(*both->completion_tokens, 8);

  EXPECT_TRUE(sb::parse_stream_chunk("[DONE]", false)->done);
  EXPECT_TRUE(sb::parse_stream_chunk(" [DONE] ", true)->done);
}

TEST(ServeBenchSse, ParseChatChunk) {
  auto role = sb::parse_stream_chunk(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})", true);
  ASSERT_TRUE(role.ok());
  EXPECT_TRUE(role->has_choices);
  EXPECT_EQ(role->text, "");
  auto content = sb::parse_stream_chunk(R"({"choices":[{"delta":{"content":"Hi"}}]})", true);
  EXPECT_EQ(content->text, "Hi");
  // a completions field is not chat content
  EXPECT_EQ(sb::parse_stream_chunk(R"({"choices":[{"text":"Hi"}]})", true)->text, "");
  EXPECT_EQ(sb::parse_stream_chunk(R"({"choices":[{"delta":{"content":null}}]})", true)->text, "");
}

TEST(ServeBenchSse, ParseErrors) {
  auto err = sb::parse_stream_chunk(R"({"error":{"message":"context too long","code":400}})", false);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->error, "context too long");
  EXPECT_EQ(sb::parse_stream_chunk(R"({"error":"plain"})", false)->error, "plain");
  auto bad = sb::parse_stream_chunk("{not json", false);
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "not a JSON object");
  EXPECT_FALSE(sb::parse_stream_chunk("[1,2]", false).ok());
}

TEST(ServeBenchSse, RecorderTtftItlAndUsage) {
  sb::StreamRecorder rec(/*chat=*/false, /*estimated_prompt_len=*/99);
  rec.on_bytes("data: {\"choices\":[{\"text\":\"\"}]}\n\n", 0.05);  // empty text: not the first token
  rec.on_bytes("data: {\"choices\":[{\"text\":\"A\"}]}\n\ndata: {\"choi", 0.10);
  rec.on_bytes("ces\":[{\"text\":\"B\"}]}\n\n", 0.13);
  rec.on_bytes("data: {\"choices\":[{\"text\":\"C\",\"finish_reason\":\"length\"}]}\n\n", 0.20);
  rec.on_bytes("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n",
               0.21);
  rec.finish(0.21);
  const sb::RequestOutput& o = rec.output();
  EXPECT_TRUE(o.success) << o.error;
  EXPECT_DOUBLE_EQ(o.ttft_s, 0.10);
  ASSERT_EQ(o.itl_s.size(), 2u);
  EXPECT_NEAR(o.itl_s[0], 0.03, 1e-12);
  EXPECT_NEAR(o.itl_s[1], 0.07, 1e-12);
  EXPECT_DOUBLE_EQ(o.latency_s, 0.21);
  EXPECT_EQ(o.generated_text, "ABC");
  EXPECT_EQ(o.output_tokens, 3);
  EXPECT_TRUE(o.usage_reported);
  EXPECT_EQ(o.prompt_len, 7);
  EXPECT_EQ(o.text_chunks, 3);
  EXPECT_EQ(o.finish_reason, "length");
}

TEST(ServeBenchSse, RecorderChatRoleChunkIsNotTheFirstToken) {
  sb::StreamRecorder rec(/*chat=*/true, 5);
  rec.on_bytes("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", 0.01);
  rec.on_bytes("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", 0.30);
  rec.on_bytes("data: [DONE]\n\n", 0.31);
  rec.finish(0.31);
  EXPECT_TRUE(rec.output().success);
  EXPECT_DOUBLE_EQ(rec.output().ttft_s, 0.30);
  EXPECT_TRUE(rec.output().itl_s.empty());
  EXPECT_EQ(rec.output().prompt_len, 5);       // no usage: the estimate stays
  EXPECT_EQ(rec.output().output_tokens, -1);
}

TEST(ServeBenchSse, RecorderFailures) {
  {
    sb::StreamRecorder rec(false, 1);
    rec.on_bytes("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"error\":{\"message\":\"engine died\"}}\n\n", 0.1);
    rec.finish(0.2);
    EXPECT_FALSE(rec.output().success);
    EXPECT_CONTAINS(rec.output().error, "engine died");
  }
  {
    sb::StreamRecorder rec(false, 1);
    rec.on_bytes("data: [DONE]\n\n", 0.1);
    rec.finish(0.1);
    EXPECT_FALSE(rec.output().success);
    EXPECT_CONTAINS(rec.output().error, "without any text chunk");
  }
  {
    sb::StreamRecorder rec(false, 1);
    rec.on_bytes("data: {oops\n\n", 0.1);
    rec.finish(0.1);
    EXPECT_FALSE(rec.output().success);
    EXPECT_CONTAINS(rec.output().error, "not a JSON object");
  }
  {
    sb::StreamRecorder rec(false, 1);
    rec.fail("HTTP 400: too long", 0.05);
    rec.on_bytes("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 0.1);  // ignored after the failure
    EXPECT_FALSE(rec.output().success);
    EXPECT_EQ(rec.output().error, "HTTP 400: too long");
    EXPECT_EQ(rec.output().text_chunks, 0);
  }
}

TEST(ServeBenchSse, UsageCachedTokens) {
  // OpenAI's and vLLM's shape
  sb::Usage u = sb::parse_usage(nlohmann::json::parse(
      R"({"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128,
          "prompt_tokens_details": {"cached_tokens": 96}})"));
  EXPECT_EQ(u.prompt_tokens, 120);
  EXPECT_EQ(u.completion_tokens, 8);
  EXPECT_EQ(u.cached_tokens, 96);
  // absent, null details (prefix caching off), null, negative or non-integer counts: not reported
  for (const char* text : {R"({"prompt_tokens": 5, "completion_tokens": 1})",
                           R"({"prompt_tokens": 5, "prompt_tokens_details": null})",
                           R"({"prompt_tokens": 5, "prompt_tokens_details": {}})",
                           R"({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": null}})",
                           R"({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": -3}})",
                           R"({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": "4"}})"}) {
    sb::Usage v = sb::parse_usage(nlohmann::json::parse(text));
    EXPECT_EQ(v.prompt_tokens, 5) << text;
    EXPECT_FALSE(v.cached_tokens.has_value()) << text;
  }
  EXPECT_FALSE(sb::parse_usage(nlohmann::json(nullptr)).prompt_tokens.has_value());
  EXPECT_EQ(sb::parse_usage(nlohmann::json::parse(R"({"prompt_tokens_details": {"cached_tokens": 0}})")).cached_tokens, 0);

  // through a stream chunk into the record
  auto c = sb::parse_stream_chunk(
      R"({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 32}}})",
      false);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cached_tokens, 32);
  sb::StreamRecorder rec(false, 9);
  rec.on_bytes("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 0.01);
  EXPECT_EQ(rec.output().cached_tokens, -1);  // not reported (yet)
  rec.on_bytes(R"(data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}})"
               "\n\ndata: [DONE]\n\n",
               0.02);
  rec.finish(0.03);
  EXPECT_TRUE(rec.output().success);
  EXPECT_EQ(rec.output().cached_tokens, 32);
  EXPECT_EQ(rec.output().prompt_len, 40);
}
