// PhaseTimer: the durations of consecutive phases of one operation (Engine::open's
// start-up), for one log line such as
//   "start-up: open files 2 ms, config 0.4 ms, weight scan 31 ms, ..., total 412 ms".
// Not thread-safe: one thread marks the phases.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moe/core/clock.h"

namespace moe {

class PhaseTimer {
 public:
  // The first phase starts now (clock.now_seconds()); `clock` must outlive the timer.
  explicit PhaseTimer(const Clock& clock = system_clock()) : clock_(clock), start_(clock.now_seconds()), last_(start_) {}

  // Ends the phase that ran since the previous mark (or construction) and names it.
  // Marks of a name already seen add to that phase (which keeps its first place).
  void mark(std::string_view name) {
    const double now = clock_.now_seconds();
    const double took = now - last_;
    last_ = now;
    for (auto& [n, s] : phases_) {
      if (n == name) {
        s += took;
        return;
      }
    }
    phases_.emplace_back(std::string(name), took);
  }

  // Seconds of phase `name` so far (0 if never marked).
  double seconds(std::string_view name) const {
    for (const auto& [n, s] : phases_) {
      if (n == name) return s;
    }
    return 0;
  }
  // Seconds since construction, up to the last mark.
  double total_seconds() const { return last_ - start_; }

  // "<name> <ms> ms, ..., total <ms> ms", phases in the order first marked; milliseconds
  // with one decimal under 10 ms, whole ones above.
  std::string summary() const {
    std::string out;
    for (const auto& [n, s] : phases_) out += n + " " + format_ms(s) + ", ";
    return out + "total " + format_ms(total_seconds());
  }

  // "0.4 ms", "12 ms".
  static std::string format_ms(double seconds) {
    const double ms = seconds * 1e3;
    char buf[32];
    std::snprintf(buf, sizeof(buf), ms < 10 ? "%.1f ms" : "%.0f ms", ms);
    return buf;
  }

 private:
  const Clock& clock_;
  double start_;
  double last_;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace moe
