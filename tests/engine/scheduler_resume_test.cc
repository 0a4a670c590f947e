// SeqRequest.resume_token_ids (a request replayed after a failure): resuming an
// uninterrupted run after k of its N tokens (k = 1, N/2, N-1, and every k whose event
// held text back) gives the same remaining tokens, and the
// text the original run's events carried for its first k tokens followed by the resumed
// run's text equals the uninterrupted text byte for byte, greedy and seeded, also when
// the k-th token ends inside a held-back partial UTF-8 character or a held-back stop
// string prefix. Plus the validation of resume_token_ids.
#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "moe/scheduler.h"
#include "test_util.h"

namespace moe {
namespace {

struct Event {
  std::vector<int> tokens;
  std::string text;
};

struct Run {  // one request's events
  std::vector<Event> events;
  std::string finish_reason, error;
  int completion_tokens = 0, prompt_tokens = 0;
  std::vector<int> tokens() const {
    std::vector<int> out;
    for (const Event& e : events) out.insert(out.end(), e.tokens.begin(), e.tokens.end());
    return out;
  }
  std::string text() const {
    std::string out;
    for (const Event& e : events) out += e.text;
    return out;
  }
  // The text the events carried up to and including the one with the k-th token.
  std::string text_through(size_t k) const {
    std::string out;
    size_t seen = 0;
    for (const Event& e : events) {
      if (seen >= k) break;
      out += e.text;
      seen += e.tokens.size();
    }
    EXPECT_EQ(seen, k) << "an event carried several tokens";
    return out;
  }
};

class Service {
 public:
  explicit Service(Engine* engine) {
    auto s = Scheduler::create(engine, SchedulerOptions{.max_num_seqs = 4, .max_num_batched_tokens = 7,
                                                        .kv_block_size = 4});
    EXPECT_TRUE(s.ok()) << s.status().message();
    sched_ = std::move(s).value();
    loop_ = std::thread([this] { (void)sched_->run(); });
  }
  ~Service() {
    sched_->shutdown(0);
    loop_.join();
  }
  Scheduler& sched() { return *sched_; }

  // Submits and waits for the final event.
  StatusOr<Run> run(SeqRequest req) {
    std::mutex mu;
    std::condition_variable cv;
    Run out;
    bool done = false;
    auto id = sched_->submit(std::move(req), [&](SeqEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (!ev.token_ids.empty() || !ev.text.empty()) out.events.push_back({ev.token_ids, ev.text});
      out.completion_tokens = ev.completion_tokens;
      out.prompt_tokens = ev.prompt_tokens;
      if (ev.finished) {
        out.finish_reason = ev.finish_reason;
        out.error = ev.error;
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

std::unique_ptr<Engine> open_tiny() {
  EngineOptions o;
  o.model_dir = testing::tiny_model_dir();
  auto e = Engine::open(o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return std::move(e).value();
}

SeqRequest request(float temperature, int max_tokens) {
  SeqRequest r;
  r.prompt = "KING RICHARD III:\nNow is the winter of our discontent";
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = 4321;
  r.ignore_eos = true;
  return r;
}

// Resumes `base` after k = 1, N/2, N-1 and each k in `more` (each k-th token's event
// held text back): same tokens, and the original text up to k plus the resumed text
// equals the whole text.
void check_resumes(Service& svc, const SeqRequest& base, const Run& full, std::vector<size_t> more = {}) {
  const std::vector<int> all = full.tokens();
  ASSERT_EQ(static_cast<int>(all.size()), base.max_tokens);
  more.insert(more.end(), {1, all.size() / 2, all.size() - 1});
  for (size_t k : more) {
    ASSERT_GE(k, 1u);
    ASSERT_LT(k, all.size());
    SeqRequest r = base;
    r.resume_token_ids.assign(all.begin(), all.begin() + static_cast<long>(k));
    auto resumed = svc.run(r);
    ASSERT_TRUE(resumed.ok()) << resumed.status().message();
    EXPECT_EQ(resumed->finish_reason, full.finish_reason) << "k " << k;
    EXPECT_EQ(resumed->completion_tokens, full.completion_tokens) << "k " << k;
    EXPECT_EQ(resumed->prompt_tokens, full.prompt_tokens) << "k " << k;
    std::vector<int> joined = r.resume_token_ids;
    const std::vector<int> rest = resumed->tokens();
    EXPECT_EQ(rest.size(), all.size() - k) << "events carry only the new tokens, k " << k;
    joined.insert(joined.end(), rest.begin(), rest.end());
    EXPECT_EQ(joined, all) << "k " << k;
    EXPECT_EQ(full.text_through(k) + resumed->text(), full.text()) << "k " << k;
  }
}

// The k (1-based token counts) after whose event some text was held back.
std::vector<size_t> held_back_boundaries(const Run& full, const std::function<bool(const std::string&, size_t)>& held) {
  std::vector<size_t> out;
  std::string so_far;
  for (size_t i = 0; i + 1 < full.events.size(); ++i) {
    so_far += full.events[i].text;
    if (held(so_far, i)) out.push_back(i + 1);
  }
  return out;
}

TEST(SchedulerResume, GreedyPrefixes) {
  auto engine = open_tiny();
  Service svc(engine.get());
  const SeqRequest base = request(0.0f, 24);
  auto full = svc.run(base);
  ASSERT_TRUE(full.ok()) << full.status().message();
  ASSERT_EQ(full->finish_reason, "length");
  EXPECT_FALSE(full->text().empty());
  check_resumes(svc, base, *full);
}

// A stop string whose first byte is common in the text: that byte is held back at the
// end of many events, so resume boundaries fall inside a held-back stop prefix.
TEST(SchedulerResume, GreedyWithHeldBackStopPrefix) {
  auto engine = open_tiny();
  Service svc(engine.get());
  SeqRequest base = request(0.0f, 24);
  base.stop = {"eQ#"};
  auto full = svc.run(base);
  ASSERT_TRUE(full.ok()) << full.status().message();
  ASSERT_EQ(full->finish_reason, "length");
  // After these events a trailing 'e' was held back (the text so far stops right
  // before an 'e' that the event's own token produced).
  const std::string text = full->text();
  const std::vector<size_t> held = held_back_boundaries(*full, [&](const std::string& so_far, size_t i) {
    return so_far.size() < text.size() && text[so_far.size()] == 'e' &&
           !full->events[i + 1].text.empty() &&
           full->events[i + 1].text[0] == 'e' && full->events[i + 1].text.size() > 1;
  });
  EXPECT_FALSE(held.empty()) << "the text never had an 'e' held back; the case is not exercised";
  check_resumes(svc, base, *full, held);
}

// Seeded sampling at a very high temperature (near uniform) draws byte-fallback tokens,
// some of which end an event inside a partial UTF-8 character (held back: an event with
// a token and no text). The first seed whose run has such an event is resumed after
// every prefix: same tokens, same text.
TEST(SchedulerResume, SeededPrefixesIncludingPartialCharacters) {
  auto engine = open_tiny();
  Service svc(engine.get());
  SeqRequest base;
  moe::Run full;
  std::vector<size_t> textless;
  for (uint64_t seed = 1; seed <= 20 && textless.empty(); ++seed) {
    base = request(3.0f, 40);
    base.sampling.seed = seed;
    base.sampling.top_k = 0;  // every token a candidate, byte tokens included
    base.sampling.top_p = 1.0f;
    auto r = svc.run(base);
    ASSERT_TRUE(r.ok()) << r.status().message();
    full = *r;
    textless = held_back_boundaries(full, [&](const std::string&, size_t i) { return full.events[i].text.empty(); });
  }
  ASSERT_FALSE(textless.empty()) << "no seed gave an event that held its text back; the case is not exercised";
  // Resume inside the held-back character and right after it.
  std::vector<size_t> more = textless;
  for (size_t k : textless) {
    if (k + 1 < static_cast<size_t>(base.max_tokens)) more.push_back(k + 1);
  }
  check_resumes(svc, base, full, more);
  // And at temperature 0.8 (the usual regime).
  base = request(0.8f, 20);
  auto usual = svc.run(base);
  ASSERT_TRUE(usual.ok()) << usual.status().message();
  check_resumes(svc, base, *usual);
}

void expect_invalid(Service& svc, const SeqRequest& r, const std::string& needle) {
  auto st = svc.sched().submit(r, [](SeqEvent&&) { ADD_FAILURE() << "sink called for a refused request"; });
  ASSERT_FALSE(st.ok()) << needle;
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find(needle), std::string::npos) << st.status().message();
}

TEST(SchedulerResume, Validation) {
  auto engine = open_tiny();
  Service svc(engine.get());
  SeqRequest r = request(0.0f, 4);
  r.resume_token_ids = {100, 101, 102, 103};
  expect_invalid(svc, r, "resume_token_ids has 4 tokens, not fewer than max_tokens (4)");
  r.resume_token_ids = {100, 2048};
  expect_invalid(svc, r, "resume_token_ids[1] = 2048 is outside the vocabulary [0, 2048)");
  r.resume_token_ids = {-1};
  expect_invalid(svc, r, "resume_token_ids[0] = -1 is outside the vocabulary");
  r.ignore_eos = false;
  r.resume_token_ids = {100, 2, 101};  // 2 = </s> (config.json eos_token_id)
  expect_invalid(svc, r, "resume_token_ids[1] = 2 is an EOS token");
  r.ignore_eos = true;  // then EOS does not end the request: accepted
  auto ok = svc.run(r);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->finish_reason, "length");
  EXPECT_EQ(ok->completion_tokens, 4);
  EXPECT_EQ(ok->tokens().size(), 1u);
  // A stop string completed by the resumed tokens' text would have ended the request.
  SeqRequest g = request(0.0f, 12);
  auto full = svc.run(g);
  ASSERT_TRUE(full.ok());
  const std::string text = full->text();
  ASSERT_GE(text.size(), 6u);
  g.stop = {text.substr(2, 3)};
  g.resume_token_ids = full->tokens();
  g.resume_token_ids.pop_back();
  expect_invalid(svc, g, "completes the stop string \"" + text.substr(2, 3) + "\"");
  // prompt + max_tokens over the context (512) is refused as for any request.
  SeqRequest big = request(0.0f, 600);
  big.resume_token_ids = {100};
  expect_invalid(svc, big, "max_tokens");
}

}  // namespace
}  // namespace moe
