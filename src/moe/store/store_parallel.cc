#include "moe/store/store_parallel.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace moe {

Status run_parallel(size_t n, int threads, const std::string& label, uint64_t total, const StoreProgressFn& progress,
                    const std::function<Status(size_t, std::atomic<uint64_t>&)>& work) {
  std::atomic<uint64_t> done{0};
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  Status first_error;
  size_t finished_workers = 0;
  const size_t workers = std::min(n, static_cast<size_t>(std::max(threads, 1)));

  auto loop = [&] {
    while (!failed.load()) {
      const size_t i = next.fetch_add(1);
      if (i >= n) break;
      Status st = work(i, done);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed.exchange(true)) first_error = std::move(st);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    ++finished_workers;
    cv.notify_all();
  };
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (size_t t = 0; t < workers; ++t) pool.emplace_back(loop);
  {
    std::unique_lock<std::mutex> lock(mu);
    while (finished_workers < workers) {
      cv.wait_for(lock, std::chrono::milliseconds(100));
      if (progress && finished_workers < workers) {
        lock.unlock();
        progress(label, done.load(), total);
        lock.lock();
      }
    }
  }
  for (auto& t : pool) t.join();
  if (progress && !failed.load()) progress(label, done.load(), total);
  return first_error;
}

}  // namespace moe
