#include "moe/serve/thread_pool.h"

#include <algorithm>

namespace moe::serve {

GrowingThreadPool::GrowingThreadPool(size_t min_threads, size_t max_threads, std::chrono::milliseconds idle_exit)
    : min_threads_(min_threads), max_threads_(std::max<size_t>(1, std::max(min_threads, max_threads))),
      idle_exit_(idle_exit) {}

GrowingThreadPool::~GrowingThreadPool() { shutdown(); }

void GrowingThreadPool::reap_locked(std::vector<std::thread>* to_join) {
  for (auto it : exited_) {
    to_join->push_back(std::move(*it));
    threads_.erase(it);
  }
  exited_.clear();
}

void GrowingThreadPool::enqueue(std::function<void()> fn) {
  std::vector<std::thread> to_join;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reap_locked(&to_join);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && threads_.size() < max_threads_ && !shutdown_) {
      threads_.emplace_back();
      auto self = std::prev(threads_.end());
      *self = std::thread([this, self] { worker(self); });
    }
  }
  cv_.notify_one();
  for (auto& t : to_join) t.join();  // they have left worker(): joins at once
}

void GrowingThreadPool::worker(std::list<std::thread>::iterator self) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    const bool woke = cv_.wait_for(lock, idle_exit_, [&] { return !jobs_.empty() || shutdown_; });
    --idle_;
    if (!woke && threads_.size() - exited_.size() > min_threads_) {
      exited_.push_back(self);  // joined by a later enqueue() or shutdown()
      return;
    }
    if (jobs_.empty()) {
      if (shutdown_) return;
      continue;
    }
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    fn();
    lock.lock();
  }
}

void GrowingThreadPool::shutdown() {
  std::list<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
  // Workers finish the queued jobs first; new threads are no longer started, so the
  // list only shrinks from here.
  for (;;) {
    std::thread t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      exited_.clear();
      if (threads_.empty()) break;
      t = std::move(threads_.front());
      threads_.pop_front();
    }
    if (t.joinable()) t.join();
  }
}

size_t GrowingThreadPool::num_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size() - exited_.size();
}

}  // namespace moe::serve
