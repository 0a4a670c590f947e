// The supervisor's tokenizer path: SupervisedService::tokenize / detokenize / token_bytes
// forwarded over the worker protocol (/tokenize, /detokenize, /vocab_bytes) to a fake
// worker group (fake_worker.h), with the worker's errors coming back by code, the
// vocabulary's bytes fetched once and cached, and a wait while the group is relaunched.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <iterator>
#include <thread>

#include <httplib.h>

#include "moe/supervisor/supervised_service.h"
#include "moe/supervisor/worker_client.h"
#include "moe/supervisor/worker_protocol.h"
#include "supervisor/fake_worker.h"

namespace moe::supervisor {
namespace {

using testing::FakeLauncher;
using testing::token_text;

SupervisorOptions fast_options() {
  SupervisorOptions o;
  o.liveness_timeout_seconds = 1;
  o.probe_interval_seconds = 0.05;
  o.recovery_timeout_seconds = 10;
  o.max_restarts = 3;
  o.startup_timeout_seconds = 5;
  o.control_timeout_seconds = 2;
  return o;
}

TEST(WorkerProtocolTokenizeTest, RepliesRoundTripWithTheirStatusCode) {
  auto ids = decode_ids_reply(encode_ids_reply(std::vector<int>{1, 2, 300}));
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  ASSERT_TRUE(ids->ok());
  EXPECT_EQ(ids->value(), (std::vector<int>{1, 2, 300}));
  auto err = decode_text_reply(encode_text_reply(invalid_argument("token id 7 is bad")));
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err->status().message(), "token id 7 is bad");
  EXPECT_FALSE(decode_ids_reply("[1,2]").ok());
  EXPECT_FALSE(decode_ids_reply(R"({"ok":"x"})").ok());
  EXPECT_FALSE(decode_ids_reply(R"({"error":{"code":99,"message":"?"}})").ok());
  EXPECT_FALSE(decode_text_reply(R"({"neither":1})").ok());
}

TEST(WorkerProtocolTokenizeTest, VocabBytesCarryArbitraryBytes) {
  const std::vector<std::string> tokens = {"", "a", std::string("\xe4\xb8", 2), std::string("\x00\xff", 2), " hi"};
  auto back = decode_vocab_bytes(encode_vocab_bytes(tokens));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value(), tokens);
  EXPECT_EQ(encode_vocab_bytes({std::string("\x0a\xfe", 2)}), R"({"tokens":["0afe"]})");
  auto bad = decode_vocab_bytes(R"({"tokens":["0g"]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tokens[0]"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(decode_vocab_bytes(R"({"tokens":["abc"]})").ok());
}

TEST(WorkerProtocolMetricsTest, FinalEventTimingsAndStepHistogramCrossTheChannel) {
  SeqEvent e;
  e.finished = true;
  e.finish_reason = "length";
  e.queue_seconds = 0.125;
  e.prefill_seconds = 0.5;
  e.decode_seconds = 2.25;
  auto back = decode_event(encode_event(e));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->queue_seconds, 0.125);
  EXPECT_EQ(back->prefill_seconds, 0.5);
  EXPECT_EQ(back->decode_seconds, 2.25);
  EXPECT_FALSE(decode_event(R"({"finished":true,"finish_reason":"stop","decode_seconds":"x"})").ok());

  ServiceSnapshot s;
  s.iteration_tokens.assign(std::size(kIterationTokenBounds) + 1, 0);
  s.iteration_tokens[3] = 7;
  s.iteration_tokens_sum = 200;
  auto snap = decode_snapshot(encode_snapshot(s));
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  EXPECT_EQ(snap->iteration_tokens, s.iteration_tokens);
  EXPECT_EQ(snap->iteration_tokens_sum, 200);
  EXPECT_EQ(snap->preemptions, 0);
  auto bad = decode_snapshot(R"({"iteration_tokens":[1,2]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("iteration_tokens"), std::string::npos);
}

class SupervisedTokenizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = SupervisedService::start(launcher_, fast_options());
    ASSERT_TRUE(s.ok()) << s.status().message();
    service_ = std::move(s).value();
  }
  FakeLauncher launcher_{3};
  std::unique_ptr<SupervisedService> service_;
};

TEST_F(SupervisedTokenizeTest, TokenizeAndDetokenizeAreTheWorkersAnswers) {
  auto with = service_->tokenize("Hi!", true);
  ASSERT_TRUE(with.ok()) << with.status().message();
  EXPECT_EQ(with.value(), (std::vector<int>{1, 'H', 'i', '!'}));
  auto without = service_->tokenize("Hi!", false);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without.value(), (std::vector<int>{'H', 'i', '!'}));
  auto text = service_->detokenize({5, 17, 999});
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text.value(), token_text(5) + token_text(17) + token_text(999));
  // The worker's InvalidArgument comes back as such (an HTTP 400 upstream), not retried.
  auto bad = service_->detokenize({5, 1000});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("1000"), std::string::npos) << bad.status().message();
  EXPECT_EQ(launcher_.launches(), 1);
}

TEST_F(SupervisedTokenizeTest, TokenBytesComeFromOneFetchOfTheVocabulary) {
  EXPECT_EQ(service_->token_bytes(42), token_text(42));
  auto& fake = launcher_.group(0)->fake;
  const int after_first = fake.token_bytes_calls.load();
  EXPECT_EQ(after_first, 1000);  // the whole vocabulary, once
  for (int id = 0; id < 1000; ++id) {
    EXPECT_EQ(service_->token_bytes(id), id >= 3 ? token_text(id) : "") << id;
  }
  EXPECT_EQ(service_->token_bytes(-1), "");
  EXPECT_EQ(service_->token_bytes(1000), "");
  EXPECT_EQ(fake.token_bytes_calls.load(), after_first);  // served from the cache
}

TEST_F(SupervisedTokenizeTest, WaitsForARelaunchedGroup) {
  launcher_.group(0)->crash();
  // Answered by the relaunched group (or by the first one if it still answered).
  auto ids = service_->tokenize("ab", false);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  EXPECT_EQ(ids.value(), (std::vector<int>{'a', 'b'}));
}

TEST(WorkerEndpointTokenizeTest, MalformedBodiesAre400) {
  testing::ResumableFake fake;
  WorkerEndpoint endpoint(fake);
  ASSERT_TRUE(endpoint.start().ok());
  httplib::Client cli("127.0.0.1", endpoint.port());
  for (const char* body : {"{}", R"({"text":5})", R"({"text":"a","add_special_tokens":"yes"})", "not json"}) {
    auto res = cli.Post("/tokenize", body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
  }
  for (const char* body : {"{}", R"({"ids":[1,"x"]})", R"({"ids":3})"}) {
    auto res = cli.Post("/detokenize", body, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body;
  }
  WorkerClient client(endpoint.port(), 2);
  auto vocab = client.vocab_bytes();
  ASSERT_TRUE(vocab.ok()) << vocab.status().message();
  ASSERT_EQ(vocab->size(), 1000u);
  EXPECT_EQ((*vocab)[7], token_text(7));
  endpoint.stop();
}

}  // namespace
}  // namespace moe::supervisor
