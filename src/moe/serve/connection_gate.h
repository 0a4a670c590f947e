// The HTTP server's front door against slow clients (tools/probe/slowloris.py found
// that about 2,100 sockets trickling request headers blocked the server, one worker each).
//
// Accepted connections, and kept-alive ones between requests, wait here without a
// worker thread: one epoll thread peeks (MSG_PEEK: nothing is consumed) at each as
// bytes arrive, and hands it to `on_ready` once a whole request head ("\r\n\r\n", or
// max_head_bytes, which httplib then refuses) is there. A connection is closed when:
//   - its request head is not complete header_timeout after it was accepted (a whole-
//     request deadline, not per read), or, kept alive, header_timeout after the first
//     byte of its next request;
//   - kept alive, it sends nothing for keep_alive_timeout;
//   - its client (peer IP address) already has max_connections_per_client connections
//     (waiting here or being served): answered "429 Too Many Requests" and closed at once.
// The accept path only registers the socket (no blocking call), so it is never starved.
//
// Thread-safety: admit/park/release from any thread; on_ready runs on the gate thread
// (it must not block: enqueue the work). stop() once, from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moe/status.h"

namespace moe::serve {

struct GateOptions {
  double header_timeout_seconds = 10;     // whole request head, from accept (see above)
  double keep_alive_timeout_seconds = 5;  // a kept-alive connection idle this long is closed
  size_t max_connections_per_client = 0;  // per peer IP address; 0 = no cap
  size_t max_head_bytes = 16384;          // a head this long is handed on as is
};

class ConnectionGate {
 public:
  using Ready = std::function<void(int fd)>;
  ConnectionGate(GateOptions options, Ready on_ready);
  ~ConnectionGate();
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Creates the epoll set and starts the gate thread. Internal error if epoll fails.
  Status start();
  // A freshly accepted connection: the gate owns `fd` until it hands it to on_ready
  // (or closes it). After stop(): closed at once.
  void admit(int fd);
  // A kept-alive connection back from its worker after a response (the worker must hold
  // no unread bytes of it). After stop(): closed at once.
  void park(int fd);
  // The worker is about to close `fd` (call before ::close): its client's count drops.
  void release(int fd);
  // Closes every waiting connection and joins the gate thread. Idempotent.
  void stop();

  struct Counters {
    uint64_t admitted = 0;
    uint64_t head_timeouts = 0;        // closed: no whole request head in time
    uint64_t idle_closed = 0;          // kept-alive connections closed after keep_alive_timeout
    uint64_t refused_per_client = 0;   // closed: over max_connections_per_client
    uint64_t waiting = 0;              // connections waiting here now (waiting())
  };
  Counters counters() const;
  size_t waiting() const;  // connections waiting here now

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiting {
    Clock::time_point deadline;
    bool kept_alive = false;  // waiting for the next request of a kept-alive connection
    bool got_bytes = false;
  };
  void run();
  void check(int fd, Clock::time_point now);
  void sweep(Clock::time_point now);
  void drop_locked(int fd);  // unregisters, forgets, closes (mu_ held)
  void add(int fd, bool kept_alive);

  const GateOptions options_;
  const Ready on_ready_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop() wakes the thread
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::map<int, Waiting> waiting_;          // fd -> its deadline
  std::map<int, std::string> client_of_;    // fd -> peer address, while the gate or a worker has it
  std::map<std::string, size_t> per_client_;
  Counters counters_;
  std::vector<char> peek_;  // the gate thread's peek buffer (max_head_bytes)
};

}  // namespace moe::serve
