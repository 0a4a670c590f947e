#include "moe/serve/rate_limiter.h"

#include <algorithm>
#include <chrono>

namespace moe::serve {
namespace {

constexpr size_t kMaxIdleKeys = 10000;

}  // namespace

RateLimiter::RateLimiter(RateLimits limits, Clock clock) : limits_(limits), clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
  }
}

void RateLimiter::Bucket::refill(double dt) {
  if (dt > 0) level = std::min(capacity, level + dt * rate_per_second);
}

RateLimiter::KeyState& RateLimiter::state(const std::string& key, double now) {
  auto it = keys_.find(key);
  if (it != keys_.end()) return it->second;
  if (keys_.size() >= next_prune_size_) {
    // Forget keys whose buckets have refilled: they behave exactly like new ones.
    for (auto k = keys_.begin(); k != keys_.end();) {
      KeyState& s = k->second;
      const double dt = now - s.last_seconds;
      s.requests.refill(dt);
      s.tokens.refill(dt);
      s.last_seconds = now;
      const bool full = s.requests.level >= s.requests.capacity && s.tokens.level >= s.tokens.capacity;
      k = full ? keys_.erase(k) : std::next(k);
    }
    next_prune_size_ = std::max(kMaxIdleKeys, 2 * keys_.size());  // amortised O(1) per new key
  }
  KeyState s;
  s.requests.capacity = std::max(1.0, limits_.requests_per_second);
  s.requests.rate_per_second = limits_.requests_per_second;
  s.requests.level = s.requests.capacity;
  s.tokens.capacity = limits_.tokens_per_minute;
  s.tokens.rate_per_second = limits_.tokens_per_minute / 60.0;
  s.tokens.level = s.tokens.capacity;
  s.last_seconds = now;
  return keys_.emplace(key, s).first->second;
}

RateLimiter::Decision RateLimiter::try_acquire(const std::string& key, int64_t tokens) {
  if (!enabled()) return {};
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_();
  KeyState& s = state(key, now);
  const double dt = now - s.last_seconds;
  s.requests.refill(dt);
  s.tokens.refill(dt);
  s.last_seconds = std::max(s.last_seconds, now);

  Decision d;
  auto need = [&](const Bucket& b, double cost) {
    const double want = std::min(cost, b.capacity);  // a cost above capacity waits for a full bucket
    if (b.level >= want) return;
    d.allowed = false;
    d.retry_after_seconds = std::max(d.retry_after_seconds, (want - b.level) / b.rate_per_second);
  };
  if (limits_.requests_per_second > 0) need(s.requests, 1.0);
  if (limits_.tokens_per_minute > 0) need(s.tokens, static_cast<double>(std::max<int64_t>(tokens, 0)));
  if (!d.allowed) return d;
  if (limits_.requests_per_second > 0) s.requests.level -= 1.0;
  if (limits_.tokens_per_minute > 0) s.tokens.level -= static_cast<double>(std::max<int64_t>(tokens, 0));
  return d;
}

}  // namespace moe::serve
