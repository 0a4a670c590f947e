// Scheduler test helpers: greedy_request() and SeqResults, which collects a Scheduler's
// events per request: the token ids, the text, the prompt logprobs, the latest counts
// (prompt and cached tokens), and the final event's reason and error; an event after the
// final one fails the test; wait() blocks (up to 60 s, then the test fails) for the final
// event. Thread-safe (sinks run on the scheduler thread).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "moe/generation_service.h"

namespace moe::testing {

struct SeqResult {
  std::string finish_reason, error, text;
  std::vector<int> tokens;  // every token id of the request's events
  std::vector<TokenLogprob> prompt_logprobs;
  int prompt_tokens = 0, cached_tokens = -1;  // of the latest event (-1: no event yet)
  bool done = false;
};

class SeqResults {
 public:
  SeqSink sink(int key) {
    return [this, key](SeqEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      SeqResult& r = out_[key];
      EXPECT_FALSE(r.done) << "an event after the final one, request " << key;
      r.tokens.insert(r.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      r.text += ev.text;
      r.prompt_logprobs.insert(r.prompt_logprobs.end(), ev.prompt_logprobs.begin(), ev.prompt_logprobs.end());
      r.prompt_tokens = ev.prompt_tokens;
      r.cached_tokens = ev.cached_tokens;
      if (ev.finished) {
        r.done = true;
        r.finish_reason = ev.finish_reason;
        r.error = ev.error;
        cv_.notify_all();
      }
    };
  }
  SeqResult wait(int key) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(60), [&] { return out_[key].done; })) << key;
    return out_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, SeqResult> out_;
};

// A greedy request of exactly max_tokens tokens (EOS ignored).
inline SeqRequest greedy_request(const std::string& prompt, int max_tokens) {
  SeqRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

}  // namespace moe::testing
