// Multi-turn conversations against the fake server with its word-level prefix cache:
// what each turn sends (completions text, chat messages), the cached_tokens that come
// back, conversations stopped at the context limit or by a failed turn, the concurrency
// limit and the think time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "contains_util.h"
#include "fake_openai_server.h"
#include "moe/serve_bench/conversation_runner.h"
#include "moe/serve_bench/reuse_metrics.h"

namespace sb = moe::serve_bench;
using moe::testing::FakeOpenAiServer;
using moe::testing::FakeServerConfig;

namespace {

int words_plus_bos(std::string_view t) { return static_cast<int>(moe::testing::fake_words(std::string(t)).size()) + 1; }

FakeServerConfig cache_server() {
  FakeServerConfig c;
  c.ttft_ms = 5;
  c.itl_ms = 1;
  c.prefix_cache = true;
  return c;
}

sb::ClientOptions options_for(const FakeOpenAiServer& s, const std::string& endpoint) {
  sb::ClientOptions o;
  o.base = sb::parse_base_url(s.url()).value();
  o.endpoint = endpoint;
  o.model = "fake-model";
  return o;
}

// N conversations of T synthetic turns, 4 output tokens each.
std::vector<sb::Conversation> conversations(int n, int turns) {
  return sb::deal_conversations(sb::synthetic_messages(n * turns, 4, words_plus_bos), n, turns);
}

sb::ConversationRunOptions run_options(int max_model_len = 512) {
  sb::ConversationRunOptions r;
  r.max_model_len = max_model_len;
  r.count_tokens = words_plus_bos;
  return r;
}

}  // namespace

TEST(ServeBenchConversationRunner, CompletionsTurnsResendTheConversationAndHitTheCache) {
  FakeOpenAiServer server(cache_server());
  const auto convs = conversations(2, 3);
  sb::ConversationRunResult r = sb::run_conversations(options_for(server, "/v1/completions"), convs, {}, run_options());
  ASSERT_EQ(r.outputs.size(), 6u);
  EXPECT_EQ(r.stopped_early, 0);
  EXPECT_EQ(r.ended_by_failure, 0);
  EXPECT_EQ(r.turn_of, (std::vector<int>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(r.conversation_of, (std::vector<int>{0, 0, 0, 1, 1, 1}));
  // What was sent: turn k = turn k-1's prompt + its answer + separator + message k.
  std::vector<std::string> prompts;
  for (const auto& b : server.bodies()) {
    EXPECT_FALSE(b.contains("messages"));
    prompts.push_back(b["prompt"].get<std::string>());
  }
  ASSERT_EQ(prompts.size(), 6u);
  for (int c = 0; c < 2; ++c) {
    const auto& turns = convs[static_cast<size_t>(c)].turns;
    std::string expected = turns[0].prompt;
    for (int k = 0; k < 3; ++k) {
      if (k > 0) expected += r.outputs[static_cast<size_t>(c * 3 + k - 1)].generated_text + sb::kTurnSeparator + turns[static_cast<size_t>(k)].prompt;
      EXPECT_NE(std::find(prompts.begin(), prompts.end(), expected), prompts.end()) << c << " " << k;
    }
  }
  EXPECT_EQ(r.outputs[0].generated_text, "t0 t1 t2 t3 ");
  // The fake's cache in words: turn 1 32 words (BOS: 33 tokens), nothing cached; turn 2
  // reuses turn 1's 32 words + 4 answer words, the last message word and "t0" glued
  // together by the plain concatenation (35), then 32 more; turn 3 likewise.
  for (int c = 0; c < 2; ++c) {
    const auto* o = &r.outputs[static_cast<size_t>(c * 3)];
    EXPECT_EQ(o[0].prompt_len, 33);
    EXPECT_EQ(o[0].cached_tokens, 0);
    EXPECT_EQ(o[1].prompt_len, 68);
    EXPECT_EQ(o[1].cached_tokens, 35);
    EXPECT_EQ(o[2].prompt_len, 103);
    EXPECT_EQ(o[2].cached_tokens, 70);
  }
  std::vector<bool> later;
  for (int t : r.turn_of) later.push_back(t > 1);
  sb::PrefixReuse reuse = sb::prefix_reuse(r.outputs, later);
  EXPECT_EQ(reuse.cached_tokens_later, 2 * (35 + 70));
  EXPECT_EQ(reuse.prompt_tokens_later, 2 * (68 + 103));
  EXPECT_EQ(reuse.prompt_tokens, 2 * (33 + 68 + 103));
}

TEST(ServeBenchConversationRunner, ChatSendsTheGrowingMessages) {
  FakeOpenAiServer server(cache_server());
  const auto convs = conversations(1, 3);
  sb::ConversationRunResult r =
      sb::run_conversations(options_for(server, "/v1/chat/completions"), convs, {}, run_options());
  ASSERT_EQ(r.outputs.size(), 3u);
  auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    const auto& m = bodies[k]["messages"];
    ASSERT_EQ(m.size(), 2 * k + 1);
    for (size_t i = 0; i < m.size(); ++i) {
      EXPECT_EQ(m[i]["role"], i % 2 ? "assistant" : "user");
      EXPECT_EQ(m[i]["content"], i % 2 ? r.outputs[i / 2].generated_text : convs[0].turns[i / 2].prompt);
    }
  }
  // joined by "\n\n" (the plain template): no glued word; turn 2 reuses 32 + 4 words
  EXPECT_EQ(r.outputs[1].prompt_len, 69);
  EXPECT_EQ(r.outputs[1].cached_tokens, 36);
  EXPECT_EQ(r.outputs[2].cached_tokens, 72);
}

TEST(ServeBenchConversationRunner, StopsAtTheContextLimitInsteadOfSending) {
  FakeOpenAiServer server(cache_server());
  // From the server's usage: turn 2 is 33 + 4 + 32 = 69 tokens, + 4 output fits 100;
  // turn 3 is 68 + 4 + 32 = 104, + 4 does not.
  sb::ConversationRunResult r =
      sb::run_conversations(options_for(server, "/v1/completions"), conversations(2, 4), {}, run_options(100));
  EXPECT_EQ(r.outputs.size(), 4u);
  EXPECT_EQ(r.stopped_early, 2);
  EXPECT_EQ(r.ended_by_failure, 0);
  EXPECT_EQ(server.requests(), 4);
  EXPECT_EQ(r.outputs[1].prompt_len, 68);  // the server's count replaced the estimate
  for (const auto& o : r.outputs) EXPECT_TRUE(o.success) << o.error;
}

TEST(ServeBenchConversationRunner, AFailedTurnEndsItsConversation) {
  FakeServerConfig cfg = cache_server();
  cfg.fail_every = 2;
  FakeOpenAiServer server(cfg);
  sb::ConversationRunOptions ro = run_options();
  ro.max_concurrency = 1;
  int last_done = -1, last_total = -1;
  ro.progress = [&](int done, int, int total, double) {
    last_done = done;
    last_total = total;
  };
  sb::ConversationRunResult r = sb::run_conversations(options_for(server, "/v1/completions"), conversations(2, 3), {}, ro);
  ASSERT_EQ(r.outputs.size(), 4u);  // c0: ok, failed; c1: ok, failed
  EXPECT_EQ(r.ended_by_failure, 2);
  EXPECT_EQ(r.turn_of, (std::vector<int>{1, 2, 1, 2}));
  EXPECT_FALSE(r.outputs[1].success);
  EXPECT_CONTAINS(r.outputs[1].error, "HTTP 400");
  EXPECT_EQ(last_done, 4);
  EXPECT_EQ(last_total, 6);
}

TEST(ServeBenchConversationRunner, ConcurrencyLimitAndThinkTime) {
  FakeOpenAiServer server(cache_server());
  sb::ConversationRunOptions ro = run_options();
  ro.max_concurrency = 2;
  ro.think_time_s = 0.2;
  sb::ConversationRunResult r =
      sb::run_conversations(options_for(server, "/v1/completions"), conversations(4, 2), {}, ro);
  ASSERT_EQ(r.outputs.size(), 8u);
  EXPECT_LE(server.max_in_flight(), 2);
  for (size_t i = 0; i < r.outputs.size(); i += 2) {
    const auto& t1 = r.outputs[i];
    const auto& t2 = r.outputs[i + 1];
    EXPECT_GE(t2.start_s, t1.start_s + t1.latency_s + 0.2 - 1e-3) << i;
  }
  // two slots, each running two conversations of two turns with one think time each
  EXPECT_GE(r.duration_s, 0.4);
}

TEST(ServeBenchConversationRunner, ConversationsStartAtTheirArrivals) {
  FakeOpenAiServer server(cache_server());
  sb::ConversationRunResult r = sb::run_conversations(options_for(server, "/v1/completions"), conversations(2, 1),
                                                      {0.0, 0.3}, run_options());
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_GE(r.outputs[1].start_s, 0.3 - 1e-3);
}
