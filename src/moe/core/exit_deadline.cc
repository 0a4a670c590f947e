#include "moe/core/exit_deadline.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace moe {

ExitDeadline::ExitDeadline(std::string what, double seconds, int exit_code) {
  watchdog_ = std::thread([this, what = std::move(what), seconds, exit_code] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
    std::fprintf(stderr, "%s did not return within %g s; exiting\n", what.c_str(), seconds);
    std::fflush(stderr);
    ::_exit(exit_code);
  });
}

ExitDeadline::~ExitDeadline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_one();
  watchdog_.join();
}

}  // namespace moe
