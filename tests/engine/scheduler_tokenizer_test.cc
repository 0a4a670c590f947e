// The Scheduler's tokenizer methods (GenerationService::tokenize / detokenize /
// token_bytes) and the metrics it feeds: the final event's queue / prefill / decode
// timings and the tokens-per-step histogram of the snapshot, on the shipped model.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <iterator>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "moe/scheduler.h"
#include "test_util.h"

namespace moe {
namespace {

std::unique_ptr<Engine> open_engine() {
  EngineOptions o;
  o.model_dir = testing::tiny_model_dir();
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return std::move(e).value();
}

struct Final {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<SeqEvent> event;
  SeqSink sink() {
    return [this](SeqEvent&& ev) {
      if (!ev.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      event = std::move(ev);
      cv.notify_all();
    };
  }
  SeqEvent wait() {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return event.has_value(); }));
    return event.value_or(SeqEvent{});
  }
};

TEST(SchedulerTokenizerTest, TokenizeDetokenizeAndTokenBytes) {
  auto engine = open_engine();
  auto sched = Scheduler::create(engine.get(), SchedulerOptions{});
  ASSERT_TRUE(sched.ok()) << sched.status().message();
  Scheduler& s = *sched.value();
  for (const std::string text : {"ROMEO:", "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?", "a  b\tc"}) {
    auto with = s.tokenize(text, true);
    auto without = s.tokenize(text, false);
    ASSERT_TRUE(with.ok() && without.ok());
    EXPECT_EQ(static_cast<int>(with->size()), s.count_tokens(text)) << text;  // as submit() counts
    ASSERT_EQ(with->size(), without->size() + 1) << text;
    EXPECT_EQ(std::vector<int>(with->begin() + 1, with->end()), without.value()) << text;
    EXPECT_EQ(s.token_bytes(with->front()), "");  // BOS: special, no text
    auto back = s.detokenize(with.value());
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back.value(), text);  // BOS dropped, the text back
    std::string spelled;
    for (int id : without.value()) spelled += s.token_bytes(id);
    EXPECT_EQ(spelled, " " + text) << text;  // SentencePiece's leading space on the first piece
  }
  const int vocab = s.model_info().vocab_size;
  auto bad = s.detokenize({5, vocab});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(std::to_string(vocab)), std::string::npos) << bad.status().message();
  EXPECT_FALSE(s.detokenize({-1}).ok());
  EXPECT_EQ(s.token_bytes(-1), "");
  EXPECT_EQ(s.token_bytes(vocab), "");
}

TEST(SchedulerTokenizerTest, FinalEventTimingsAndTokensPerStep) {
  auto engine = open_engine();
  SchedulerOptions o;
  o.kv_block_size = 16;
  o.kv_cache_tokens = 64;  // room for one request at a time: the second waits
  // Each request's whole KV held from admission, so the second waits for the first (on
  // demand, both would run at once).
  o.reserve_max_tokens = true;
  o.enable_prefix_caching = false;
  auto created = Scheduler::create(engine.get(), o);
  ASSERT_TRUE(created.ok()) << created.status().message();
  Scheduler& s = *created.value();
  Status run_status;
  std::thread loop([&] { run_status = s.run(); });

  SeqRequest r;
  r.prompt = "KING RICHARD III:\nNow is the winter of our discontent";
  const int prompt_len = static_cast<int>(s.tokenize(r.prompt, true)->size());
  ASSERT_LT(prompt_len, 40);
  r.max_tokens = 64 - prompt_len;  // all 4 blocks: the second request must wait
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  SeqRequest r2 = r;
  r2.prompt = "ROMEO:";
  r2.max_tokens = 12;
  Final a, b;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(s.submit(r, a.sink()).ok());
  ASSERT_TRUE(s.submit(r2, b.sink()).ok());
  const SeqEvent ea = a.wait(), eb = b.wait();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.shutdown(0);
  loop.join();
  ASSERT_TRUE(run_status.ok()) << run_status.message();

  EXPECT_EQ(ea.finish_reason, "length");
  EXPECT_GE(ea.queue_seconds, 0);
  EXPECT_GT(ea.prefill_seconds, 0);
  EXPECT_GT(ea.decode_seconds, 0);
  EXPECT_LE(ea.queue_seconds + ea.prefill_seconds + ea.decode_seconds, wall);
  // The second waited for the first's KV blocks: queued at least while the first decoded.
  EXPECT_GE(eb.queue_seconds, 0.5 * ea.decode_seconds);
  EXPECT_GT(eb.decode_seconds, 0);
  EXPECT_LE(eb.queue_seconds + eb.prefill_seconds + eb.decode_seconds, wall);

  const ServiceSnapshot snap = s.snapshot();
  ASSERT_EQ(snap.iteration_tokens.size(), std::size(kIterationTokenBounds) + 1);
  EXPECT_EQ(std::accumulate(snap.iteration_tokens.begin(), snap.iteration_tokens.end(), int64_t{0}), snap.steps);
  // A prompt's step feeds the prompt; each later step feeds one token per request.
  const int64_t prompts = ea.prompt_tokens + eb.prompt_tokens;
  EXPECT_EQ(snap.prompt_tokens_total, prompts);
  EXPECT_EQ(snap.iteration_tokens_sum, prompts + (r.max_tokens - 1) + (12 - 1));
  // One request ran at a time: every decode step fed 1 token (bucket le=1).
  EXPECT_EQ(snap.iteration_tokens[0], (r.max_tokens - 1) + (12 - 1));
  EXPECT_EQ(snap.preemptions, 0);
}

}  // namespace
}  // namespace moe
