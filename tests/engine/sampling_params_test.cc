// The OpenAI surface's sampling parameters on the tiny model, through the Scheduler (and
// Engine::generate where it has them): each changes the output as specified, checked
// against independent runs (Engine::generate's logits for each prefix, processed by
// the formulas written out here): repetition_penalty changes greedy text; penalties and
// logit_bias pick the argmax of the hand-penalized reference logits; logit_bias +100
// forces a token; min_p 1 at temperature 1 is greedy; stop_token_ids end at the token
// without its text; logprobs and prompt_logprobs equal log_softmax of the reference
// logits (also under chunked prefill); a replay rebuilds the penalty state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "moe/scheduler.h"
#include "test_util.h"

namespace moe {
namespace {

struct Outcome {
  std::vector<int> tokens;
  std::string text, finish_reason;
  std::vector<TokenLogprob> logprobs, prompt_logprobs;
  int events_with_prompt_logprobs = 0;
};

class Service {
 public:
  Service(Engine* engine, int max_batched_tokens = 64) {
    auto s = Scheduler::create(engine, SchedulerOptions{.max_num_seqs = 4, .max_num_batched_tokens = max_batched_tokens,
                                                        .kv_block_size = 8});
    EXPECT_TRUE(s.ok()) << s.status().message();
    sched_ = std::move(s).value();
    loop_ = std::thread([this] { (void)sched_->run(); });
  }
  ~Service() {
    sched_->shutdown(0);
    loop_.join();
  }
  StatusOr<Outcome> run(SeqRequest req) {
    std::mutex mu;
    std::condition_variable cv;
    Outcome out;
    bool done = false;
    auto id = sched_->submit(std::move(req), [&](SeqEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(ev.logprobs.empty() || ev.logprobs.size() == ev.token_ids.size());
      out.tokens.insert(out.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      out.text += ev.text;
      out.logprobs.insert(out.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      if (!ev.prompt_logprobs.empty()) {
        ++out.events_with_prompt_logprobs;
        out.prompt_logprobs = ev.prompt_logprobs;
      }
      if (ev.finished) {
        out.finish_reason = ev.finish_reason;
        done = true;
        cv.notify_all();
      }
    });
    if (!id.ok()) return id.status();
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
    return out;
  }

 private:
  std::unique_ptr<Scheduler> sched_;
  std::thread loop_;
};

class SamplingParamsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions o;
    o.model_dir = testing::tiny_model_dir();
    o.batch_invariant = true;
    auto e = Engine::open(o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(e).value().release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  // The reference: the model's logits after `ids`, from an independent Engine::generate.
  static std::vector<float> logits_after(const std::vector<int>& ids) {
    GenerateRequest g;
    g.prompt_token_ids = ids;
    g.max_tokens = 0;
    g.return_prompt_logits = true;
    auto r = engine_->generate(g);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r->prompt_logits : std::vector<float>{};
  }
  static std::vector<double> log_softmax(const std::vector<float>& l) {
    double mx = -INFINITY, sum = 0;
    for (float v : l) mx = std::max(mx, static_cast<double>(v));
    for (float v : l) sum += std::exp(v - mx);
    std::vector<double> out;
    for (float v : l) out.push_back(v - mx - std::log(sum));
    return out;
  }
  static SeqRequest request(const std::vector<int>& prompt, int max_tokens) {
    SeqRequest r;
    r.prompt_token_ids = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    return r;
  }
  static std::vector<int> prompt_ids(const std::string& text) { return engine_->tokenize(text); }
  // One request through a scheduler of its own, stopped before returning: the engine
  // is never driven by two callers at once (reference runs use it in between).
  static StatusOr<Outcome> serve(SeqRequest r, int max_batched_tokens = 64) {
    Service svc(engine_, max_batched_tokens);
    return svc.run(std::move(r));
  }
  static Engine* engine_;
};
Engine* SamplingParamsTest::engine_ = nullptr;

TEST_F(SamplingParamsTest, RepetitionPenaltyChangesGreedyTextInBothPaths) {
  GenerateRequest g;
  g.prompt = "ROMEO:";
  g.max_tokens = 32;
  g.sampling.temperature = 0;
  g.ignore_eos = true;
  auto plain = engine_->generate(g);
  g.sampling.repetition_penalty = 2.0f;
  auto penalized = engine_->generate(g);
  ASSERT_TRUE(plain.ok() && penalized.ok());
  EXPECT_NE(plain->text, penalized->text);
  SeqRequest r = request(penalized->prompt_token_ids, 32);
  r.sampling.repetition_penalty = 2.0f;
  auto s = serve(r);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->tokens, penalized->output_token_ids);
}

// Every greedy token is the argmax of the reference logits with logit_bias and the
// penalties applied as written out here (vLLM's formulas).
TEST_F(SamplingParamsTest, PenalizedGreedyIsArgmaxOfHandPenalizedReferenceLogits) {
  const std::vector<int> prompt = prompt_ids("JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?");
  SeqRequest r = request(prompt, 14);
  r.sampling.repetition_penalty = 1.4f;
  r.sampling.frequency_penalty = 0.6f;
  r.sampling.presence_penalty = 0.5f;
  r.sampling.logit_bias = {{prompt[2], 1.5f}, {prompt[3], -2.0f}};
  auto s = serve(r);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->tokens.size(), 14u);
  std::vector<int> seq = prompt;
  for (size_t i = 0; i < s->tokens.size(); ++i) {
    std::vector<float> l = logits_after(seq);
    ASSERT_FALSE(l.empty());
    for (const auto& [id, bias] : r.sampling.logit_bias) l[static_cast<size_t>(id)] += bias;
    std::vector<int> count(l.size(), 0);
    std::vector<bool> seen(l.size(), false);
    for (int t : prompt) seen[static_cast<size_t>(t)] = true;
    for (size_t j = prompt.size(); j < seq.size(); ++j) {
      ++count[static_cast<size_t>(seq[j])];
      seen[static_cast<size_t>(seq[j])] = true;
    }
    for (size_t t = 0; t < l.size(); ++t) {
      if (seen[t]) l[t] = l[t] > 0 ? l[t] / 1.4f : l[t] * 1.4f;
      l[t] -= 0.6f * static_cast<float>(count[t]) + (count[t] > 0 ? 0.5f : 0.0f);
    }
    const int want = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(s->tokens[i], want) << "step " << i;
    seq.push_back(s->tokens[i]);
  }
  // Engine::generate honours the same parameters.
  GenerateRequest g;
  g.prompt_token_ids = prompt;
  g.max_tokens = 14;
  g.sampling = r.sampling;
  g.ignore_eos = true;
  auto e = engine_->generate(g);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->output_token_ids, s->tokens);
}

TEST_F(SamplingParamsTest, LogitBiasPlus100ForcesTheToken) {
  const std::vector<int> prompt = prompt_ids("ROMEO:");
  auto plain = serve(request(prompt, 6));
  ASSERT_TRUE(plain.ok());
  const int forced = prompt.back();
  ASSERT_NE(std::count(plain->tokens.begin(), plain->tokens.end(), forced), 6);
  for (float temperature : {0.0f, 1.0f}) {
    SeqRequest r = request(prompt, 6);
    r.sampling.temperature = temperature;
    r.sampling.seed = 4;
    r.sampling.logit_bias = {{forced, 100.0f}};
    auto s = serve(r);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->tokens, std::vector<int>(6, forced)) << "temperature " << temperature;
  }
}

TEST_F(SamplingParamsTest, MinPOneAtTemperatureOneEqualsGreedy) {
  const std::vector<int> prompt = prompt_ids("To be, or not to be");
  auto greedy = serve(request(prompt, 20));
  SeqRequest r = request(prompt, 20);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 1.0f;
  r.sampling.seed = 11;
  auto m = serve(r);
  r.sampling.min_p = 0.0f;  // without min_p the same seed samples something else
  auto sampled = serve(r);
  ASSERT_TRUE(greedy.ok() && m.ok() && sampled.ok());
  EXPECT_EQ(m->tokens, greedy->tokens);
  EXPECT_NE(sampled->tokens, greedy->tokens);
}

TEST_F(SamplingParamsTest, StopTokenIdsEndAtTheTokenWithoutItsText) {
  const std::vector<int> prompt = prompt_ids("ROMEO:");
  auto plain = serve(request(prompt, 20));
  ASSERT_TRUE(plain.ok());
  // A token that first occurs a few tokens in.
  size_t at = 3;
  while (std::find(plain->tokens.begin(), plain->tokens.begin() + static_cast<long>(at), plain->tokens[at]) !=
         plain->tokens.begin() + static_cast<long>(at)) {
    ++at;
  }
  ASSERT_LT(at, 19u);
  const int stop = plain->tokens[at];
  SeqRequest r = request(prompt, 20);
  r.stop_token_ids = {stop};
  auto s = serve(r);
  auto before = serve(request(prompt, static_cast<int>(at)));         // the tokens before it, ended by length
  auto through = serve(request(prompt, static_cast<int>(at) + 1));    // and with it
  ASSERT_TRUE(s.ok() && before.ok() && through.ok());
  EXPECT_EQ(s->finish_reason, "stop");
  EXPECT_EQ(s->tokens, through->tokens);
  EXPECT_EQ(s->tokens.back(), stop);
  EXPECT_EQ(s->text, before->text);
  EXPECT_NE(through->text, before->text);  // the stop token has text, which was not output
  // A replay whose resumed tokens include a stop token could not have happened.
  r.resume_token_ids = {plain->tokens.begin(), plain->tokens.begin() + static_cast<long>(at) + 1};
  auto bad = serve(r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("is in stop_token_ids"), std::string::npos) << bad.status().message();
}

TEST_F(SamplingParamsTest, LogprobsEqualLogSoftmaxOfTheReferenceLogits) {
  const std::vector<int> prompt = prompt_ids("First Citizen:\nBefore we proceed");
  SeqRequest r = request(prompt, 10);
  r.logprobs = 5;
  auto s = serve(r);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->logprobs.size(), 10u);
  EXPECT_EQ(s->events_with_prompt_logprobs, 0);
  std::vector<int> seq = prompt;
  for (size_t i = 0; i < 10; ++i) {
    const std::vector<double> ref = log_softmax(logits_after(seq));
    const TokenLogprob& lp = s->logprobs[i];
    EXPECT_EQ(lp.token_id, s->tokens[i]);
    EXPECT_NEAR(lp.logprob, ref[static_cast<size_t>(lp.token_id)], 1e-4) << i;
    std::vector<int> order(ref.size());
    for (size_t t = 0; t < ref.size(); ++t) order[t] = static_cast<int>(t);
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](int a, int b) { return ref[static_cast<size_t>(a)] > ref[static_cast<size_t>(b)]; });
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, s->tokens[i]);  // greedy: the most likely
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(lp.top[k].first, order[k]) << i << " " << k;
      EXPECT_NEAR(lp.top[k].second, ref[static_cast<size_t>(order[k])], 1e-4);
    }
    seq.push_back(s->tokens[i]);
  }
  r.logprobs = 0;  // the token's own logprob only
  auto bare = serve(r);
  ASSERT_TRUE(bare.ok());
  ASSERT_EQ(bare->logprobs.size(), 10u);
  EXPECT_TRUE(bare->logprobs[3].top.empty());
  EXPECT_FLOAT_EQ(bare->logprobs[3].logprob, s->logprobs[3].logprob);
}

TEST_F(SamplingParamsTest, PromptLogprobsEqualReferenceAlsoUnderChunkedPrefill) {
  const std::vector<int> prompt =
      prompt_ids("KING RICHARD III:\nNow is the winter of our discontent made glorious summer by this sun");
  ASSERT_GT(prompt.size(), 12u);
  SeqRequest r = request(prompt, 2);
  r.prompt_logprobs = 3;
  auto a = serve(r, 256);
  auto b = serve(r, 5);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->events_with_prompt_logprobs, 1);
  EXPECT_EQ(b->events_with_prompt_logprobs, 1);
  EXPECT_TRUE(a->logprobs.empty());
  ASSERT_EQ(a->prompt_logprobs.size(), prompt.size());
  ASSERT_EQ(b->prompt_logprobs.size(), prompt.size());
  EXPECT_EQ(a->prompt_logprobs[0].token_id, prompt[0]);
  EXPECT_EQ(a->prompt_logprobs[0].logprob, 0.0f);
  EXPECT_TRUE(a->prompt_logprobs[0].top.empty());
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::vector<double> ref =
        log_softmax(logits_after(std::vector<int>(prompt.begin(), prompt.begin() + static_cast<long>(i))));
    const TokenLogprob& x = a->prompt_logprobs[i];
    EXPECT_EQ(x.token_id, prompt[i]);
    EXPECT_NEAR(x.logprob, ref[static_cast<size_t>(prompt[i])], 1e-4) << i;
    EXPECT_NEAR(b->prompt_logprobs[i].logprob, x.logprob, 1e-4) << i;
    ASSERT_EQ(x.top.size(), 3u);
    ASSERT_EQ(b->prompt_logprobs[i].top.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(b->prompt_logprobs[i].top[k].first, x.top[k].first);
      EXPECT_NEAR(x.top[k].second, ref[static_cast<size_t>(x.top[k].first)], 1e-4);
    }
  }
  EXPECT_EQ(a->tokens, b->tokens);  // asking for prompt logprobs changes no token
  auto plain = serve(request(prompt, 2));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->tokens, a->tokens);
  EXPECT_EQ(plain->events_with_prompt_logprobs, 0);
}

// A replay (resume_token_ids) with penalties and seeded sampling continues as the
// uninterrupted run: the penalty counts include the resumed tokens.
TEST_F(SamplingParamsTest, ResumeRebuildsThePenaltyState) {
  const std::vector<int> prompt = prompt_ids("HAMLET:\nWhat a piece of work is a man!");
  SeqRequest r = request(prompt, 18);
  r.sampling.temperature = 0.9f;
  r.sampling.seed = 21;
  r.sampling.frequency_penalty = 1.2f;
  r.sampling.repetition_penalty = 1.5f;
  r.sampling.min_p = 0.05f;
  auto full = serve(r);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->tokens.size(), 18u);
  for (size_t k : {1u, 7u, 17u}) {
    SeqRequest resumed = r;
    resumed.resume_token_ids = {full->tokens.begin(), full->tokens.begin() + static_cast<long>(k)};
    auto rest = serve(resumed);
    ASSERT_TRUE(rest.ok()) << rest.status().message();
    EXPECT_EQ(rest->tokens, std::vector<int>(full->tokens.begin() + static_cast<long>(k), full->tokens.end())) << k;
  }
}

TEST_F(SamplingParamsTest, SchedulerRefusesBadValuesByName) {
  SeqRequest r = request(prompt_ids("ROMEO:"), 4);
  r.logprobs = 21;
  auto a = serve(r);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("logprobs"), std::string::npos);
  r.logprobs = -1;
  r.sampling.logit_bias = {{engine_->info().vocab_size, 1.0f}};
  auto b = serve(r);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("logit_bias"), std::string::npos);
  GenerateRequest g;
  g.prompt = "ROMEO:";
  g.sampling.min_p = 2.0f;
  auto c = engine_->generate(g);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("min_p"), std::string::npos);
}

}  // namespace
}  // namespace moe
