// Continuous batching (src/moe/scheduler.h): many requests in one batch, with
// chunked prefill and paged KV blocks, give bitwise the tokens each gets alone and the
// tokens Engine::generate gives (batch-invariant kernels); admission waits for KV room;
// cancel, stop strings, shutdown and bad requests.
#include "moe/scheduler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "running_scheduler.h"
#include "test_util.h"

namespace moe {
namespace {

struct Outcome {
  std::vector<int> tokens;
  std::string text;
  std::string finish_reason, error;
  int prompt_tokens = 0, completion_tokens = 0, events = 0;
  bool done = false;
};

// Collects events per request; wait() blocks until a request has finished.
class Collector {
 public:
  SeqSink sink(int key) {
    return [this, key](SeqEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      Outcome& o = out_[key];
      EXPECT_FALSE(o.done) << "event after the final one";
      o.tokens.insert(o.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      o.text += ev.text;
      ++o.events;
      o.prompt_tokens = ev.prompt_tokens;
      o.completion_tokens = ev.completion_tokens;
      if (ev.finished) {
        o.done = true;
        o.finish_reason = ev.finish_reason;
        o.error = ev.error;
        cv_.notify_all();
      }
    };
  }
  Outcome wait(int key) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(120), [&] { return out_[key].done; })) << key;
    return out_[key];
  }
  Outcome peek(int key) {
    std::lock_guard<std::mutex> lock(mu_);
    return out_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Outcome> out_;
};

using Running = testing::RunningScheduler;
using testing::settled;

std::unique_ptr<Engine> open_engine(const std::string& dir, bool invariant = true) {
  EngineOptions o;
  o.model_dir = dir;
  o.batch_invariant = invariant;
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return std::move(e).value();
}

SeqRequest greedy(const std::string& prompt, int max_tokens) {
  SeqRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

const std::vector<std::string> kPrompts = {
    "ROMEO:",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "KING RICHARD III:\nNow is the winter of our discontent made glorious summer by this sun of York;",
    "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?",
    "To be, or not to be",
    "MENENIUS:\nI tell you, friends, most charitable care have the patricians of you.",
    "A",
    "HAMLET:\nWhat a piece of work is a man! how noble in reason! how infinite in faculty!",
};

// Each prompt alone through Engine::generate and through the scheduler, then all
// together (several with seeded sampling) in small steps that force chunked prefill
// next to decodes: tokens identical in all three.
void check_batch_invariance(const std::string& model_dir) {
  auto engine = open_engine(model_dir);
  std::vector<std::vector<int>> alone;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    GenerateRequest g;
    g.prompt = kPrompts[i];
    g.max_tokens = 12 + static_cast<int>(i) * 3;
    g.sampling.temperature = i % 3 == 2 ? 0.9f : 0.0f;
    g.sampling.seed = 100 + i;
    g.ignore_eos = true;
    auto r = engine->generate(g);
    ASSERT_TRUE(r.ok()) << r.status().message();
    alone.push_back(r->output_token_ids);
  }
  auto make = [&](size_t i) {
    SeqRequest r = greedy(kPrompts[i], 12 + static_cast<int>(i) * 3);
    r.sampling.temperature = i % 3 == 2 ? 0.9f : 0.0f;
    r.sampling.seed = 100 + i;
    r.ignore_eos = true;
    return r;
  };
  {
    // One at a time through the scheduler.
    Running run(engine.get(), SchedulerOptions{});
    Collector c;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      ASSERT_TRUE(run.sched->submit(make(i), c.sink(static_cast<int>(i))).ok());
      EXPECT_EQ(c.wait(static_cast<int>(i)).tokens, alone[i]) << "alone through the scheduler, prompt " << i;
    }
  }
  {
    // All at once; a 9-token budget splits the long prompts into chunks that share
    // steps with other requests' decodes.
    SchedulerOptions o;
    o.max_num_seqs = 8;
    o.max_num_batched_tokens = 9;
    o.kv_block_size = 4;
    Running run(engine.get(), o);
    Collector c;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      ASSERT_TRUE(run.sched->submit(make(i), c.sink(static_cast<int>(i))).ok());
    }
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      Outcome o2 = c.wait(static_cast<int>(i));
      EXPECT_EQ(o2.tokens, alone[i]) << "batched, prompt " << i;
      EXPECT_EQ(o2.finish_reason, "length");
      EXPECT_EQ(o2.completion_tokens, static_cast<int>(alone[i].size()));
    }
    ServiceSnapshot snap = settled(*run.sched, [](const ServiceSnapshot& s) { return s.kv_blocks_used == 0; });
    EXPECT_EQ(snap.kv_blocks_used, 0);
    EXPECT_EQ(snap.requests_finished, static_cast<int64_t>(kPrompts.size()));
    int64_t generated = 0;
    for (const auto& a : alone) generated += static_cast<int64_t>(a.size());
    EXPECT_EQ(snap.generation_tokens_total, generated);
    int64_t routed = 0;
    for (const auto& layer : snap.expert_tokens) {
      for (int64_t t : layer) routed += t;
    }
    EXPECT_GT(routed, 0);
  }
}

TEST(Scheduler, BatchedEqualsAloneTinyMixtral) { check_batch_invariance(testing::tiny_model_dir()); }
// Qwen3-MoE: q/k norm, dense layers between MoE layers, head_dim != hidden / heads.
TEST(Scheduler, BatchedEqualsAloneQwen3) {
  check_batch_invariance(testing::source_dir() + "/tests/data/models/random-qwen3-moe");
}
// Qwen2-MoE: q/k/v biases, shared expert with its sigmoid gate.
TEST(Scheduler, BatchedEqualsAloneQwen2) {
  check_batch_invariance(testing::source_dir() + "/tests/data/models/random-qwen2-moe");
}

TEST(Scheduler, TextEqualsGenerateAndStreamsInPieces) {
  auto engine = open_engine(testing::tiny_model_dir());
  GenerateRequest g;
  g.prompt = kPrompts[1];
  g.max_tokens = 40;
  g.sampling.temperature = 0;
  auto ref = engine->generate(g);
  ASSERT_TRUE(ref.ok());
  Running run(engine.get(), SchedulerOptions{});
  Collector c;
  ASSERT_TRUE(run.sched->submit(greedy(g.prompt, 40), c.sink(0)).ok());
  Outcome o = c.wait(0);
  EXPECT_EQ(o.text, ref->text);
  EXPECT_EQ(o.finish_reason, ref->finish_reason);
  EXPECT_GT(o.events, 5);  // streamed, not one lump
  EXPECT_EQ(o.prompt_tokens, static_cast<int>(ref->prompt_token_ids.size()));
}

TEST(Scheduler, StopStringCutsTheText) {
  auto engine = open_engine(testing::tiny_model_dir());
  GenerateRequest g;
  g.prompt = kPrompts[0];
  g.max_tokens = 40;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  auto ref = engine->generate(g);
  ASSERT_TRUE(ref.ok());
  ASSERT_GT(ref->text.size(), 20u);
  // A stop string from the middle of the greedy text (3 bytes, likely spanning tokens).
  const std::string stop = ref->text.substr(10, 3);
  const size_t at = ref->text.find(stop);
  Running run(engine.get(), SchedulerOptions{});
  Collector c;
  SeqRequest r = greedy(g.prompt, 40);
  r.stop = {"never-appears", stop};
  r.ignore_eos = true;
  ASSERT_TRUE(run.sched->submit(r, c.sink(0)).ok());
  Outcome o = c.wait(0);
  EXPECT_EQ(o.finish_reason, "stop");
  EXPECT_EQ(o.text, ref->text.substr(0, at));
}

TEST(Scheduler, WaitsForKvBlocksAndRejectsWhatCanNeverFit) {
  auto engine = open_engine(testing::tiny_model_dir());
  SchedulerOptions o;
  o.kv_block_size = 16;
  o.kv_cache_tokens = 64;  // 4 blocks: one 40-token request at a time
  Running run(engine.get(), o);
  Collector c;
  for (int i = 0; i < 3; ++i) {
    SeqRequest r = greedy(kPrompts[4], 33);  // 7 prompt tokens + 33 = 40 -> 3 blocks
    ASSERT_TRUE(run.sched->submit(r, c.sink(i)).ok());
  }
  for (int i = 0; i < 3; ++i) {
    Outcome out = c.wait(i);
    EXPECT_EQ(out.finish_reason == "length" || out.finish_reason == "stop", true) << out.finish_reason;
  }
  auto too_big = run.sched->submit(greedy(kPrompts[4], 60), c.sink(9));
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("never fit"), std::string::npos) << too_big.status().message();
  EXPECT_EQ(settled(*run.sched, [](const ServiceSnapshot& s) { return s.kv_blocks_used == 0; }).kv_blocks_used, 0);
}

TEST(Scheduler, CancelFreesBlocksAndEndsWithAbort) {
  auto engine = open_engine(testing::tiny_model_dir());
  Running run(engine.get(), SchedulerOptions{});
  Collector c;
  SeqRequest r = greedy(kPrompts[0], 400);
  r.ignore_eos = true;
  auto id = run.sched->submit(r, c.sink(0));
  ASSERT_TRUE(id.ok());
  while (c.peek(0).tokens.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  run.sched->cancel(*id);
  Outcome o = c.wait(0);
  EXPECT_EQ(o.finish_reason, "abort");
  EXPECT_LT(o.completion_tokens, 400);
  EXPECT_EQ(settled(*run.sched, [](const ServiceSnapshot& s) { return s.kv_blocks_used == 0; }).kv_blocks_used, 0);
  run.sched->cancel(12345);  // unknown id: ignored
}

TEST(Scheduler, ShutdownFinishesInFlightThenRefuses) {
  auto engine = open_engine(testing::tiny_model_dir());
  auto s = Scheduler::create(engine.get(), SchedulerOptions{});
  ASSERT_TRUE(s.ok());
  Scheduler& sched = **s;
  Collector c;
  ASSERT_TRUE(sched.submit(greedy(kPrompts[0], 20), c.sink(0)).ok());
  sched.shutdown(30);
  auto late = sched.submit(greedy(kPrompts[0], 20), c.sink(1));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(sched.run().ok());  // returns once the accepted request is done
  Outcome o = c.wait(0);
  EXPECT_TRUE(o.finish_reason == "length" || o.finish_reason == "stop") << o.finish_reason;

  // Zero grace: in-flight requests are aborted.
  auto s2 = Scheduler::create(engine.get(), SchedulerOptions{});
  ASSERT_TRUE(s2.ok());
  SeqRequest r = greedy(kPrompts[0], 400);
  r.ignore_eos = true;
  ASSERT_TRUE((*s2)->submit(r, c.sink(2)).ok());
  (*s2)->shutdown(0);
  ASSERT_TRUE((*s2)->run().ok());
  EXPECT_EQ(c.wait(2).finish_reason, "abort");
}

TEST(Scheduler, BadRequestsAreRejectedWithTheReason) {
  auto engine = open_engine(testing::tiny_model_dir());
  auto s = Scheduler::create(engine.get(), SchedulerOptions{});
  ASSERT_TRUE(s.ok());
  Collector c;
  auto expect_bad = [&](SeqRequest r, const std::string& words) {
    auto id = (*s)->submit(std::move(r), c.sink(0));
    ASSERT_FALSE(id.ok()) << words;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(words), std::string::npos) << id.status().message();
  };
  expect_bad(greedy("", 5), "prompt is empty");
  expect_bad(greedy("ROMEO:", 0), "max_tokens");
  SeqRequest r = greedy("ROMEO:", 5);
  r.stop = {"a", "b", "c", "d", "e"};
  expect_bad(r, "stop strings");
  r.stop = {""};
  expect_bad(r, "must not be empty");
  r = greedy("ROMEO:", 5);
  r.sampling.top_p = 0;
  expect_bad(r, "top_p");
  r = greedy("ROMEO:", 5);
  r.prompt_token_ids = {1, 99999};
  expect_bad(r, "outside the vocabulary");
  expect_bad(greedy("ROMEO:", 510), "maximum context length is 512");

  SchedulerOptions bad;
  bad.max_num_batched_tokens = 4;
  bad.max_num_seqs = 8;
  EXPECT_FALSE(Scheduler::create(engine.get(), bad).ok());
  bad = SchedulerOptions{};
  bad.kv_cache_tokens = 3;
  EXPECT_FALSE(Scheduler::create(engine.get(), bad).ok());
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

// Without batch-invariant kernels (sgemm for prefill and batches of more than 4 rows),
// batched logits differ from the lone run's in the last bits. Greedy outputs may then
// part ways, but only where the lone run's top-2 logits were a near tie.
TEST(Scheduler, WithoutInvariantKernelsOutputsDifferOnlyAfterNearTies) {
  auto engine = open_engine(testing::tiny_model_dir(), /*invariant=*/false);
  std::vector<std::string> prompts;
  for (const std::string& p : kPrompts) {
    prompts.push_back(p);
    prompts.push_back(p + " and");
  }
  std::vector<std::vector<int>> alone;
  std::vector<std::vector<int>> prompt_ids;
  for (const std::string& p : prompts) {
    GenerateRequest g;
    g.prompt = p;
    g.max_tokens = 48;
    g.sampling.temperature = 0;
    g.ignore_eos = true;
    auto r = engine->generate(g);
    ASSERT_TRUE(r.ok());
    alone.push_back(r->output_token_ids);
    prompt_ids.push_back(r->prompt_token_ids);
  }
  SchedulerOptions o;
  o.max_num_batched_tokens = 64;
  Running run(engine.get(), o);
  Collector c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SeqRequest r = greedy(prompts[i], 48);
    r.ignore_eos = true;
    ASSERT_TRUE(run.sched->submit(r, c.sink(static_cast<int>(i))).ok());
  }
  int differing = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int> batched = c.wait(static_cast<int>(i)).tokens;
    ASSERT_EQ(batched.size(), alone[i].size());
    size_t j = 0;
    while (j < batched.size() && batched[j] == alone[i][j]) ++j;
    if (j == batched.size()) continue;
    ++differing;
    // The lone run's logits where the two first disagree.
    GenerateRequest g;
    g.prompt_token_ids = prompt_ids[i];
    g.prompt_token_ids.insert(g.prompt_token_ids.end(), alone[i].begin(), alone[i].begin() + static_cast<long>(j));
    g.max_tokens = 0;
    g.return_prompt_logits = true;
    auto r = engine->generate(g);
    ASSERT_TRUE(r.ok());
    std::vector<float> l = r->prompt_logits;
    std::partial_sort(l.begin(), l.begin() + 2, l.end(), std::greater<float>());
    EXPECT_LT(l[0] - l[1], 1e-3f) << "prompt " << i << " diverged at token " << j << " without a near tie";
  }
  std::printf("without batch-invariant kernels: %d of %zu greedy outputs differ from the lone run\n", differing,
              prompts.size());
}

}  // namespace
}  // namespace moe
