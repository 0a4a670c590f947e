// Progress of a long command on stderr: on a terminal one line rewritten in place
// ("save: 45% (120.3 / 260.0 MB)"), at most 5 times a second; otherwise (a log file, a
// pipe) one line per 10% step. Not thread-safe: call from one thread.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace moe::cli {

class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool enabled = true) : enabled_(enabled), tty_(::isatty(2) == 1) {}
  ~ProgressPrinter() { finish(); }

  void update(const std::string& what, uint64_t done, uint64_t total) {
    if (!enabled_ || total == 0) return;
    if (what != what_) {
      finish();
      what_ = what;
      last_step_ = -1;
    }
    const int pct = static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total));
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
      if (done < total && now - last_print_ < std::chrono::milliseconds(200)) return;
      std::fprintf(stderr, "\r%s: %3d%% (%.1f / %.1f MB)", what.c_str(), pct, static_cast<double>(done) / 1e6,
                   static_cast<double>(total) / 1e6);
      open_line_ = true;
    } else {
      const int step = pct / 10;
      if (step == last_step_) return;
      last_step_ = step;
      std::fprintf(stderr, "%s: %d%% (%.1f / %.1f MB)\n", what.c_str(), pct, static_cast<double>(done) / 1e6,
                   static_cast<double>(total) / 1e6);
    }
    last_print_ = now;
  }

  // Ends the in-place line, if any.
  void finish() {
    if (open_line_) std::fputc('\n', stderr);
    open_line_ = false;
  }

 private:
  bool enabled_;
  bool tty_;
  bool open_line_ = false;
  int last_step_ = -1;
  std::string what_;
  std::chrono::steady_clock::time_point last_print_{};
};

}  // namespace moe::cli
