#include "moe/serve/signal_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace moe::serve {
namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const char c = static_cast<char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &c, 1);
  errno = saved;
}

}  // namespace

SignalWatcher::SignalWatcher(std::function<void()> on_first, std::function<void()> on_again) {
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, &old_term_);
  ::sigaction(SIGINT, &sa, &old_int_);
  thread_ = std::thread([this, on_first = std::move(on_first), on_again = std::move(on_again)] {
    int signals = 0;
    while (!quit_) {
      pollfd p{g_signal_pipe[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char c;
      while (::read(g_signal_pipe[0], &c, 1) == 1) {
        if (c == 0) continue;  // wake-up from the destructor
        (signals++ == 0 ? on_first : on_again)();
      }
    }
  });
}

SignalWatcher::~SignalWatcher() {
  if (g_signal_pipe[0] < 0) return;
  quit_ = true;
  const char c = 0;
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &c, 1);
  if (thread_.joinable()) thread_.join();
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

}  // namespace moe::serve
