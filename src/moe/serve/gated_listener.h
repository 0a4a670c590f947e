// The HTTP server's httplib::Server with its connection handling replaced (slow clients):
// accepted sockets go to a ConnectionGate (connection_gate.h) instead of a worker, and
// a worker serves a connection only once a whole request head has arrived; after each
// response the worker waits at most 100 ms for the next whole head of a kept-alive
// connection, then hands it back to the gate, so no worker waits long on a slow or idle
// client. Requests are read and answered by httplib's own process_request, on a
// stream whose reads of one request share one deadline (read_timeout from its head's
// arrival), not a timeout per read. Internal to src/moe/serve.
#pragma once

#include <sys/socket.h>

#include <memory>

#include <httplib.h>

#include "moe/serve/connection_gate.h"
#include "moe/serve/thread_pool.h"
#include "moe/status.h"

namespace moe::serve {

class Listener final : public httplib::Server {
 public:
  ~Listener() override;
  // httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG is compiled into
  // Debian's library), so a burst of connections would wait for SYN retransmits (1 s and
  // more). listen() again on the bound socket raises the backlog.
  void raise_backlog();
  // Before listen_after_bind(): starts the gate and the workers (at most max_threads
  // connections served at once; more wait in a queue). Uses the read/write/keep-alive
  // settings already set on this server.
  Status start_gate(const GateOptions& gate, size_t max_threads);
  // After stop() and the listener thread's join: closes waiting connections, joins workers.
  void stop_gate();
  ConnectionGate::Counters gate_counters() const;

 private:
  bool process_and_close_socket(socket_t sock) override;  // the accept path: to the gate
  void serve(socket_t sock);  // a worker: the requests whose heads are there

  std::unique_ptr<ConnectionGate> gate_;
  std::unique_ptr<GrowingThreadPool> workers_;
};

// httplib runs its task queue's jobs on worker threads; the accept path's job here is
// only ConnectionGate::admit (no blocking call), so it runs inline on the accept thread.
class InlineTaskQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace moe::serve
