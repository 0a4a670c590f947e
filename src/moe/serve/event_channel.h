// The per-request queue between the scheduler thread (producer: the SeqSink) and the
// HTTP worker thread that writes the response (consumer).
//
// push() never blocks beyond a short critical section (the scheduler's sinks must not
// wait on clients). Each event is stamped with its arrival time for latency metrics.
// Thread-safe; shared-owned (the sink may outlive the HTTP handler, e.g. the final
// "abort" event after a client disconnected).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "moe/generation_service.h"

namespace moe::serve {

struct TimedEvent {
  SeqEvent event;
  std::chrono::steady_clock::time_point at;
  int choice = 0;  // which of the request's sequences (response choice index) sent it
};

class EventChannel {
 public:
  // `choice`: the response choice the event belongs to (one channel serves all of a
  // request's sequences).
  void push(SeqEvent&& event, int choice = 0) {
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      queue_.push_back({std::move(event), now, choice});
    }
    cv_.notify_one();
  }

  // Waits up to `timeout` for events and moves every queued one to `out` (appended).
  // Returns false when the channel was closed and nothing is left to read.
  bool wait_pop(std::vector<TimedEvent>* out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || closed_; });
    if (queue_.empty()) return !closed_;
    while (!queue_.empty()) {
      out->push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return true;
  }

  // No more events: wakes the consumer; later push()es are dropped.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TimedEvent> queue_;
  bool closed_ = false;
};

}  // namespace moe::serve
