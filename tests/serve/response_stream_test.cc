// ResponseStream with several choices and logprobs, fed hand-made events: the JSON of
// non-streamed bodies and streamed chunks (OpenAI's formats), usage, echo, and an
// error in one choice ending the response. Expected values are written by hand.
#include "moe/serve/response_stream.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace moe::serve {
namespace {

using nlohmann::json;

// Token id -> text: 'a'.. are letters; 200 is the first byte of "é" (0xC3), 201 the second (0xA9).
std::string token_text(int id) {
  if (id == 200) return "\xC3";
  if (id == 201) return "\xA9";
  return std::string(1, static_cast<char>(id));
}

TimedEvent event(int choice, const std::string& text, std::vector<int> ids, std::vector<TokenLogprob> lps = {},
                 const std::string& finish = "", int prompt_tokens = 3) {
  TimedEvent te;
  te.choice = choice;
  te.at = std::chrono::steady_clock::now();
  te.event.text = text;
  te.event.token_ids = std::move(ids);
  te.event.logprobs = std::move(lps);
  te.event.finished = !finish.empty();
  te.event.finish_reason = finish;
  te.event.prompt_tokens = prompt_tokens;
  return te;
}

ResponseStream make(Endpoint e, bool stream, ResponseShape shape, bool include_usage = false) {
  shape.token_text = token_text;
  return ResponseStream(e, stream, include_usage, ResponseMeta{"id-1", 7, "m"}, nullptr,
                        std::chrono::steady_clock::now(), std::move(shape));
}

std::vector<json> chunks(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    const std::string payload = sse.substr(pos + 6, end - pos - 6);
    out.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload));
    pos = end + 2;
  }
  return out;
}

TEST(ResponseStream, NonStreamedChoicesUsageCountsEachPromptOnce) {
  ResponseShape shape;
  shape.choices = 4;  // 2 prompts x n = 2
  shape.n = 2;
  ResponseStream rs = make(Endpoint::kCompletions, false, shape);
  std::vector<TimedEvent> evs = {event(3, "d", {100}, {}, "", 5), event(0, "a", {97}),
                                 event(1, "b", {98}, {}, "length"), event(2, "c", {99}, {}, "stop", 5)};
  evs[0].event.completion_tokens = 1;
  evs[1].event.completion_tokens = 1;
  evs[2].event.completion_tokens = 1;
  evs[3].event.completion_tokens = 2;
  EXPECT_EQ(rs.on_events(evs), "");
  EXPECT_EQ(rs.unfinished_choices(), 2);
  std::vector<TimedEvent> more = {event(0, "A", {65}, {}, "stop"), event(3, "D", {68}, {}, "length", 5)};
  more[0].event.completion_tokens = 3;
  more[1].event.completion_tokens = 4;
  const json j = json::parse(rs.on_events(more));
  ASSERT_TRUE(rs.finished());
  EXPECT_EQ(rs.http_status(), 200);
  ASSERT_EQ(j["choices"].size(), 4u);
  const char* texts[] = {"aA", "b", "c", "dD"};
  const char* reasons[] = {"stop", "length", "stop", "length"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], texts[i]);
    EXPECT_EQ(j["choices"][i]["finish_reason"], reasons[i]);
    EXPECT_TRUE(j["choices"][i]["logprobs"].is_null());
  }
  // Prompts of 3 and 5 tokens, each counted once; completions 3 + 1 + 2 + 4.
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 8}, {"completion_tokens", 10}, {"total_tokens", 18}, {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

TEST(ResponseStream, CompletionLogprobsWithEcho) {
  ResponseShape shape;
  shape.logprobs = 1;
  shape.echo = {"xy"};
  ResponseStream rs = make(Endpoint::kCompletions, false, shape);
  std::vector<TimedEvent> evs = {event(0, "a", {97}, {{97, -0.5f, {{98, -0.25f}}}})};
  evs[0].event.prompt_logprobs = {{1, 0.0f, {}}, {120, -2.0f, {{121, -1.0f}}}, {121, -1.0f, {{121, -1.0f}}}};
  EXPECT_EQ(rs.on_events(evs), "");
  std::vector<TimedEvent> last = {event(0, "", {200, 201}, {{200, -1.5f, {{200, -1.5f}}}, {201, -0.125f, {}}}, "length")};
  last[0].event.text = "\xC3\xA9";
  const json j = json::parse(rs.on_events(last));
  const json& c = j["choices"][0];
  EXPECT_EQ(c["text"], "xya\xC3\xA9");
  const json& lp = c["logprobs"];
  // Token 1 (BOS) reads as \x01 here; 200/201 are halves of a character: U+FFFD each.
  EXPECT_EQ(lp["tokens"], json({"\x01", "x", "y", "a", "\xEF\xBF\xBD", "\xEF\xBF\xBD"}));
  EXPECT_EQ(lp["token_logprobs"], json::parse("[null, -2.0, -1.0, -0.5, -1.5, -0.125]"));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], json({{"y", -1.0}, {"x", -2.0}}));  // top 1 + the token itself
  EXPECT_EQ(lp["top_logprobs"][2], json({{"y", -1.0}}));
  EXPECT_EQ(lp["top_logprobs"][3], json({{"b", -0.25}, {"a", -0.5}}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 3, 4, 5}));
}

TEST(ResponseStream, ChatLogprobsCarryBytes) {
  ResponseShape shape;
  shape.logprobs = 2;
  ResponseStream rs = make(Endpoint::kChatCompletions, false, shape);
  std::vector<TimedEvent> evs = {
      event(0, "", {200}, {{200, -0.5f, {{200, -0.5f}, {98, -std::numeric_limits<float>::infinity()}}}}),
      event(0, "\xC3\xA9", {201}, {{201, -0.25f, {{201, -0.25f}, {97, -3.0f}}}}, "stop")};
  const json j = json::parse(rs.on_events(evs));
  const json& c = j["choices"][0];
  EXPECT_EQ(c["message"]["content"], "\xC3\xA9");
  const json& content = c["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(content[0]["bytes"], json({0xC3}));
  EXPECT_EQ(content[0]["logprob"], -0.5);
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1], json({{"token", "b"}, {"logprob", -9999.0}, {"bytes", {98}}}));
  EXPECT_EQ(content[1]["bytes"], json({0xA9}));
  EXPECT_EQ(content[1]["top_logprobs"][1], json({{"token", "a"}, {"logprob", -3.0}, {"bytes", {97}}}));
}

TEST(ResponseStream, StreamedChoicesInterleaveWithTheirLogprobs) {
  ResponseShape shape;
  shape.choices = 2;
  shape.n = 2;
  shape.logprobs = 0;
  ResponseStream rs = make(Endpoint::kChatCompletions, true, shape, /*include_usage=*/true);
  std::vector<json> out = chunks(rs.begin());
  ASSERT_EQ(out.size(), 2u);  // a role chunk per choice
  EXPECT_EQ(out[1]["choices"][0]["index"], 1);
  EXPECT_EQ(out[1]["choices"][0]["delta"]["role"], "assistant");
  std::vector<TimedEvent> evs = {event(1, "b", {98}, {{98, -1.0f, {}}}), event(0, "a", {97}, {{97, -2.0f, {}}}),
                                 event(1, "", {2}, {{2, -0.5f, {}}}, "stop")};
  evs[0].event.completion_tokens = 1;
  evs[1].event.completion_tokens = 1;
  evs[2].event.completion_tokens = 2;
  out = chunks(rs.on_events(evs));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["choices"][0]["index"], 1);
  EXPECT_EQ(out[0]["choices"][0]["delta"]["content"], "b");
  EXPECT_EQ(out[0]["choices"][0]["logprobs"]["content"][0]["logprob"], -1.0);
  EXPECT_TRUE(out[0]["choices"][0]["logprobs"]["content"][0]["top_logprobs"].empty());
  EXPECT_TRUE(out[0]["usage"].is_null());
  EXPECT_EQ(out[1]["choices"][0]["index"], 0);
  EXPECT_EQ(out[1]["choices"][0]["delta"]["content"], "a");
  // Choice 1's end: the EOS token's logprob rides on its finish chunk.
  EXPECT_EQ(out[2]["choices"][0]["index"], 1);
  EXPECT_EQ(out[2]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out[2]["choices"][0]["logprobs"]["content"][0]["logprob"], -0.5);
  EXPECT_FALSE(rs.finished());
  std::vector<TimedEvent> last = {event(0, "", {}, {}, "length")};
  last[0].event.completion_tokens = 1;
  out = chunks(rs.on_events(last));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(out[0]["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(out[1]["choices"].empty());
  EXPECT_EQ(out[1]["usage"]["prompt_tokens"], 3);  // one prompt, counted once
  EXPECT_EQ(out[1]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(out[2], "[DONE]");
  EXPECT_TRUE(rs.finished());
}

TEST(ResponseStream, StreamedEchoComesFirstWithPromptLogprobs) {
  ResponseShape shape;
  shape.logprobs = 0;
  shape.echo = {"xy"};
  ResponseStream rs = make(Endpoint::kCompletions, true, shape);
  EXPECT_EQ(rs.begin(), "");
  std::vector<TimedEvent> evs = {event(0, "a", {97}, {{97, -0.5f, {}}})};
  evs[0].event.prompt_logprobs = {{1, 0.0f, {}}, {120, -2.0f, {}}, {121, -1.0f, {}}};
  std::vector<json> out = chunks(rs.on_events(evs));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["choices"][0]["text"], "xya");
  EXPECT_EQ(out[0]["choices"][0]["logprobs"]["token_logprobs"], json::parse("[null, -2.0, -1.0, -0.5]"));
  std::vector<TimedEvent> next = {event(0, "b", {98}, {{98, -0.25f, {}}}, "length")};
  out = chunks(rs.on_events(next));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["choices"][0]["text"], "b");
  EXPECT_EQ(out[0]["choices"][0]["logprobs"]["text_offset"], json({4}));  // after "\x01xya"
  EXPECT_EQ(out[1]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(out[2], "[DONE]");
}

TEST(ResponseStream, AnErrorInOneChoiceEndsTheResponse) {
  ResponseShape shape;
  shape.choices = 3;
  shape.n = 3;
  ResponseStream streamed = make(Endpoint::kCompletions, true, shape);
  std::vector<TimedEvent> evs = {event(0, "a", {97}), event(2, "", {}, {}, "error"), event(1, "b", {98})};
  evs[1].event.error = "boom";
  const std::vector<json> out = chunks(streamed.on_events(evs));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["choices"][0]["text"], "a");
  EXPECT_NE(out[1]["error"]["message"].get<std::string>().find("boom"), std::string::npos);
  EXPECT_EQ(out[2], "[DONE]");
  EXPECT_TRUE(streamed.finished());
  EXPECT_EQ(streamed.unfinished_choices(), 2);  // the caller cancels choices 0 and 1
  EXPECT_FALSE(streamed.choice_finished(0));
  EXPECT_TRUE(streamed.choice_finished(2));

  ResponseStream whole = make(Endpoint::kChatCompletions, false, shape);
  std::vector<TimedEvent> evs2 = {event(1, "", {}, {}, "error")};
  const json j = json::parse(whole.on_events(evs2));
  EXPECT_EQ(whole.http_status(), 503);
  EXPECT_EQ(j["error"]["type"], "service_unavailable");
}

}  // namespace
}  // namespace moe::serve
