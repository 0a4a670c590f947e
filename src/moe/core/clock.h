// Clocks. `Clock` is the injectable time source of components that act on elapsed
// time (the EP session's idle heartbeat): the system clock by default, a ManualClock in
// tests so they need no sleeps. The free now_seconds() is for plain timing code.
// All times are seconds as double on a monotonic scale (not wall-clock dates).
#pragma once

#include <atomic>
#include <chrono>

namespace moe {

// Monotonic seconds from std::chrono::steady_clock (for timing code).
inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A monotonic time source. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double now_seconds() const = 0;
};

// steady_clock; system_clock() returns the process-wide instance.
class SystemClock final : public Clock {
 public:
  double now_seconds() const override { return moe::now_seconds(); }
};

// The process-wide SystemClock (never destroyed).
Clock& system_clock();

// Time that moves only when told (tests). Starts at `start_seconds`.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(double start_seconds = 0) : now_(start_seconds) {}
  double now_seconds() const override { return now_.load(); }
  void set(double seconds) { now_.store(seconds); }
  void advance(double seconds) { now_.fetch_add(seconds); }

 private:
  std::atomic<double> now_;
};

}  // namespace moe
