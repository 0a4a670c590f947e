// The journal delivers each token once and in order, drops a stale attempt's events,
// resumes from exactly the delivered tokens, and never calls a sink before open().
#include "moe/supervisor/request_journal.h"

#include <gtest/gtest.h>

#include <thread>

namespace moe::supervisor {
namespace {

struct Sink {
  std::vector<SeqEvent> events;
  SeqSink fn() {
    return [this](SeqEvent&& e) { events.push_back(std::move(e)); };
  }
};

SeqEvent tokens(std::vector<int> ids, bool finished = false) {
  SeqEvent e;
  e.token_ids = std::move(ids);
  e.prompt_tokens = 3;
  e.finished = finished;
  if (finished) e.finish_reason = "length";
  return e;
}

TEST(RequestJournalTest, HoldsEventsUntilOpened) {
  RequestJournal j;
  Sink s;
  SeqRequest r;
  r.prompt = "p";
  const uint64_t id = j.add(r, s.fn());
  auto a = j.begin_attempt(id);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(a->replay);
  EXPECT_TRUE(j.deliver(id, a->number, tokens({1, 2})));
  EXPECT_TRUE(s.events.empty());
  j.open(id);
  ASSERT_EQ(s.events.size(), 1u);
  EXPECT_TRUE(j.deliver(id, a->number, tokens({3})));
  EXPECT_EQ(s.events.size(), 2u);
}

TEST(RequestJournalTest, FinishedBeforeOpenIsDeliveredAtOpenThenForgotten) {
  RequestJournal j;
  Sink s;
  const uint64_t id = j.add(SeqRequest{}, s.fn());
  EXPECT_TRUE(j.finish(id, "error", "boom"));
  EXPECT_EQ(j.size(), 0u);
  j.open(id);
  ASSERT_EQ(s.events.size(), 1u);
  EXPECT_EQ(s.events[0].finish_reason, "error");
  EXPECT_EQ(s.events[0].error, "boom");
  EXPECT_TRUE(j.unfinished().empty());
}

TEST(RequestJournalTest, ReplayResumesFromTheDeliveredTokensAndDropsStaleEvents) {
  RequestJournal j;
  Sink s;
  SeqRequest r;
  r.prompt = "p";
  r.max_tokens = 10;
  const uint64_t id = j.add(r, s.fn());
  j.open(id);
  auto first = j.begin_attempt(id);
  ASSERT_TRUE(first);
  EXPECT_TRUE(j.deliver(id, first->number, tokens({7, 8})));
  EXPECT_TRUE(j.detach(id));
  EXPECT_EQ(j.unattached(), std::vector<uint64_t>{id});
  EXPECT_FALSE(j.deliver(id, first->number, tokens({9})));  // the dead group's late event
  auto second = j.begin_attempt(id);
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->replay);
  EXPECT_EQ(second->request.resume_token_ids, (std::vector<int>{7, 8}));
  EXPECT_EQ(second->request.prompt, "p");
  EXPECT_TRUE(j.unattached().empty());
  EXPECT_TRUE(j.deliver(id, second->number, tokens({9, 10}, true)));
  EXPECT_EQ(j.size(), 0u);
  std::vector<int> all;
  for (const SeqEvent& e : s.events) all.insert(all.end(), e.token_ids.begin(), e.token_ids.end());
  EXPECT_EQ(all, (std::vector<int>{7, 8, 9, 10}));
  EXPECT_FALSE(j.finish(id, "error", "late"));  // one final event only
  EXPECT_EQ(s.events.size(), 2u);
}

TEST(RequestJournalTest, FinishFillsTheCountsAndEndsTheRequestOnce) {
  RequestJournal j;
  Sink s;
  const uint64_t id = j.add(SeqRequest{}, s.fn());
  j.open(id);
  auto a = j.begin_attempt(id);
  j.deliver(id, a->number, tokens({1, 2, 3}));
  EXPECT_TRUE(j.mark_cancelled(id));
  EXPECT_TRUE(j.cancelled(id));
  EXPECT_TRUE(j.unattached().empty());  // cancelled: never resubmitted
  EXPECT_TRUE(j.finish(id, "abort", ""));
  EXPECT_FALSE(j.finish(id, "abort", ""));
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[1].finish_reason, "abort");
  EXPECT_EQ(s.events[1].completion_tokens, 3);
  EXPECT_EQ(s.events[1].prompt_tokens, 3);
  EXPECT_FALSE(j.begin_attempt(id).has_value());
  EXPECT_FALSE(j.mark_cancelled(id));
}

TEST(RequestJournalTest, DeadlinesKeepTheEarliestAndClear) {
  RequestJournal j;
  Sink s;
  const uint64_t a = j.add(SeqRequest{}, s.fn());
  const uint64_t b = j.add(SeqRequest{}, s.fn());
  const auto now = RequestJournal::Clock::now();
  j.set_deadline(a, now + std::chrono::seconds(1));
  j.set_deadline(a, now + std::chrono::seconds(5));  // keeps the earlier one
  j.set_deadline(b, now + std::chrono::seconds(5));
  EXPECT_TRUE(j.overdue(now).empty());
  EXPECT_EQ(j.overdue(now + std::chrono::seconds(2)), std::vector<uint64_t>{a});
  j.clear_deadline(a);
  EXPECT_EQ(j.overdue(now + std::chrono::seconds(6)), std::vector<uint64_t>{b});
  j.remove(b);
  EXPECT_TRUE(j.overdue(now + std::chrono::seconds(6)).empty());
  EXPECT_EQ(j.unfinished(), std::vector<uint64_t>{a});
}

TEST(RequestJournalTest, ConcurrentDeliveriesKeepEveryTokenOnceInOrder) {
  RequestJournal j;
  Sink s;
  const uint64_t id = j.add(SeqRequest{}, s.fn());
  j.open(id);
  auto a = j.begin_attempt(id);
  std::thread producer([&] {
    for (int i = 0; i < 2000; ++i) j.deliver(id, a->number, tokens({i}));
  });
  std::thread detacher([&] {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    j.detach(id);
  });
  producer.join();
  detacher.join();
  // Whatever was delivered before the detach is a gap-free prefix; nothing after.
  const std::vector<int> d = j.delivered(id);
  for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d[i], static_cast<int>(i));
  EXPECT_EQ(s.events.size(), d.size());
}

}  // namespace
}  // namespace moe::supervisor
