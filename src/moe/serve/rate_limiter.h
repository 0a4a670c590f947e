// Per-key rate limits as token buckets: requests per second and tokens per minute.
//
//   requests: capacity max(1, rps), refilled at rps per second, one per request;
//   tokens:   capacity tpm, refilled at tpm / 60 per second, charged prompt + max_tokens
//             at admission (what the request may use, not what it ends up using).
// A request passes when both buckets hold what it costs (a token cost above the
// capacity passes once the bucket is full, leaving it in debt), and is then charged to
// both; otherwise nothing is charged and the answer says after how many seconds it
// would pass. A limit of 0 is off. Buckets of keys idle long enough to be full again
// are forgotten when the number of keys held reaches 10000 (then twice the number left).
//
// Thread-safe (one mutex). The clock is injectable for tests.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

namespace moe::serve {

struct RateLimits {
  double requests_per_second = 0;  // 0 = unlimited
  double tokens_per_minute = 0;    // 0 = unlimited
};

class RateLimiter {
 public:
  using Clock = std::function<double()>;  // monotonic seconds
  // `clock` defaults to std::chrono::steady_clock.
  explicit RateLimiter(RateLimits limits, Clock clock = nullptr);

  struct Decision {
    bool allowed = true;
    double retry_after_seconds = 0;  // > 0 when not allowed
  };
  // Admits (and charges) one request of `tokens` for `key`, or says when to retry.
  Decision try_acquire(const std::string& key, int64_t tokens);
  bool enabled() const { return limits_.requests_per_second > 0 || limits_.tokens_per_minute > 0; }

 private:
  struct Bucket {
    double level = 0;
    double capacity = 0;
    double rate_per_second = 0;
    void refill(double dt);
  };
  struct KeyState {
    Bucket requests, tokens;
    double last_seconds = 0;
  };
  KeyState& state(const std::string& key, double now);

  const RateLimits limits_;
  Clock clock_;
  std::mutex mu_;
  std::unordered_map<std::string, KeyState> keys_;
  size_t next_prune_size_ = 10000;
};

}  // namespace moe::serve
