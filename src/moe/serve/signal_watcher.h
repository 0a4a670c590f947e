// SignalWatcher: SIGTERM / SIGINT for a server's lifetime. The handler only write()s
// the signal number to a pipe (the one async-signal-safe thing to do); a watcher
// thread reads it and calls `on_first` for the first signal, `on_again` for any later
// one. Destroying the watcher restores the previous handlers.
// One watcher per process at a time (the pipe is process-wide). Not copyable. If the
// pipe cannot be made, no handler is installed (signals keep their old behaviour).
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace moe::serve {

class SignalWatcher {
 public:
  // Both callbacks run on the watcher thread.
  SignalWatcher(std::function<void()> on_first, std::function<void()> on_again);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  std::atomic<bool> quit_{false};
  std::thread thread_;
  struct sigaction old_term_ {}, old_int_ {};
};

}  // namespace moe::serve
