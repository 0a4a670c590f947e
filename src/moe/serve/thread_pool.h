// The HTTP server's worker threads: an httplib::TaskQueue that grows on demand.
//
// httplib runs one connection per task for the connection's whole life, so an idle
// keep-alive connection holds a worker until its keep-alive timeout, and a streamed
// response holds one until it ends. httplib's own pool has a fixed, small size (8 on
// this machine): a few hundred idle connections would stall everyone else. This pool
// starts a thread whenever a task arrives and no thread is idle, up to `max_threads`
// (beyond that tasks wait in FIFO order); threads idle for `idle_exit` exit, down to
// `min_threads`.
//
// Thread-safe. shutdown() runs the queued tasks, then joins every thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace moe::serve {

class GrowingThreadPool final : public httplib::TaskQueue {
 public:
  GrowingThreadPool(size_t min_threads, size_t max_threads,
                    std::chrono::milliseconds idle_exit = std::chrono::seconds(30));
  ~GrowingThreadPool() override;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  size_t num_threads() const;  // alive now

 private:
  void worker(std::list<std::thread>::iterator self);
  void reap_locked(std::vector<std::thread>* to_join);

  const size_t min_threads_, max_threads_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;
  std::vector<std::list<std::thread>::iterator> exited_;  // finished, not yet joined
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace moe::serve
