#include "moe/serve_bench/conversation_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace moe::serve_bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::duration to_duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

struct ConversationOutcome {
  std::vector<RequestOutput> outputs;
  bool stopped_early = false;
  bool failed = false;
};

ConversationOutcome run_one(const ClientOptions& o, const Conversation& conv, const ConversationRunOptions& run,
                            const TokenCounter& count, Clock::time_point t0, std::atomic<int>& done,
                            std::atomic<int>& failed) {
  ConversationOutcome out;
  const bool chat = is_chat_endpoint(o.endpoint);
  TurnPrompt turn;
  for (size_t k = 0; k < conv.turns.size(); ++k) {
    const SampleRequest& user = conv.turns[k];
    const RequestOutput* previous = k == 0 ? nullptr : &out.outputs.back();
    turn = k == 0 ? first_turn(user.prompt) : next_turn(turn, previous->generated_text, user.prompt);
    // Turn 1 is the message alone, counted when the messages were made.
    const int prompt_tokens = k == 0 ? user.prompt_len : estimate_turn_tokens(turn, user.prompt, chat, count, previous);
    if (prompt_tokens + user.output_len > run.max_model_len) {
      out.stopped_early = true;
      break;
    }
    if (k > 0 && run.think_time_s > 0) std::this_thread::sleep_for(to_duration(run.think_time_s));
    SampleRequest r;
    r.prompt = turn.prompt;
    r.messages = turn.messages;
    r.prompt_len = prompt_tokens;
    r.output_len = user.output_len;
    r.source_index = user.source_index;
    out.outputs.push_back(send_request(o, r, t0));
    if (!out.outputs.back().success) failed.fetch_add(1);
    done.fetch_add(1);
    if (!out.outputs.back().success) {
      out.failed = true;
      break;
    }
  }
  return out;
}

}  // namespace

ConversationRunResult run_conversations(const ClientOptions& o, const std::vector<Conversation>& conversations,
                                        const std::vector<double>& arrivals, const ConversationRunOptions& run) {
  const int n = static_cast<int>(conversations.size());
  TokenCounter count = run.count_tokens;
  if (!count) count = [](std::string_view t) { return estimate_tokens(t); };
  int planned = 0;
  for (const Conversation& c : conversations) planned += static_cast<int>(c.turns.size());

  std::vector<ConversationOutcome> outcomes(conversations.size());
  std::atomic<int> next{0}, done{0}, failed{0};
  const Clock::time_point t0 = Clock::now();

  std::mutex mu;
  std::condition_variable cv;
  bool all_done = false;
  std::thread ticker;
  if (run.progress) {
    ticker = std::thread([&] {
      const auto interval = to_duration(std::max(run.progress_interval_s, 0.01));
      Clock::time_point when = t0 + interval;
      std::unique_lock<std::mutex> lock(mu);
      while (!cv.wait_until(lock, when, [&] { return all_done; })) {
        when += interval;
        lock.unlock();
        run.progress(done.load(), failed.load(), planned, seconds(Clock::now() - t0));
        lock.lock();
      }
    });
  }

  // One worker per slot takes the next conversation in order and waits for its arrival.
  const int workers = run.max_concurrency > 0 ? std::min(run.max_concurrency, n) : n;
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (;;) {
        const int i = next.fetch_add(1);
        if (i >= n) return;
        const double at = static_cast<size_t>(i) < arrivals.size() ? arrivals[static_cast<size_t>(i)] : 0.0;
        std::this_thread::sleep_until(t0 + to_duration(at));
        outcomes[static_cast<size_t>(i)] =
            run_one(o, conversations[static_cast<size_t>(i)], run, count, t0, done, failed);
      }
    });
  }
  for (std::thread& t : pool) t.join();

  ConversationRunResult result;
  result.duration_s = seconds(Clock::now() - t0);
  {
    std::lock_guard<std::mutex> g(mu);
    all_done = true;
  }
  cv.notify_all();
  if (ticker.joinable()) ticker.join();
  if (run.progress) run.progress(done.load(), failed.load(), planned, result.duration_s);

  for (size_t i = 0; i < outcomes.size(); ++i) {
    ConversationOutcome& c = outcomes[i];
    if (c.stopped_early) ++result.stopped_early;
    if (c.failed) ++result.ended_by_failure;
    for (size_t k = 0; k < c.outputs.size(); ++k) {
      result.outputs.push_back(std::move(c.outputs[k]));
      result.conversation_of.push_back(conversations[i].index);
      result.turn_of.push_back(static_cast<int>(k) + 1);
    }
  }
  return result;
}

}  // namespace moe::serve_bench
