// The worker side of the supervisor's channel: what rank 0 of a supervised worker group
// runs instead of the OpenAI server (`moe serve --worker-endpoint DIR`, started by
// worker_group.h). WorkerEndpoint serves a GenerationService (the Scheduler) over HTTP on
// 127.0.0.1 with the routes and JSON forms of worker_protocol.h; SupervisorWatch ends a
// worker process whose supervisor is gone, so no worker group outlives it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "moe/generation_service.h"
#include "moe/status.h"

namespace moe::supervisor {

struct WorkerEndpointOptions {
  std::string host = "127.0.0.1";
  int port = 0;      // 0 = a free port (see WorkerEndpoint::port())
  int poll_ms = 50;  // how often a waiting /submit stream checks its supervisor connection
};

// Thread-safety: start() once; stop() from any thread (callers after the first wait for it
// to finish); the routes are served by a thread pool.
class WorkerEndpoint {
 public:
  // `service` is not owned and must outlive the endpoint.
  WorkerEndpoint(GenerationService& service, WorkerEndpointOptions options = {});
  ~WorkerEndpoint();  // stop()
  WorkerEndpoint(const WorkerEndpoint&) = delete;
  WorkerEndpoint& operator=(const WorkerEndpoint&) = delete;

  // Binds host:port and serves on a background thread. Unavailable when the address
  // cannot be bound. Call once.
  Status start();
  int port() const;  // the bound port (after start())
  // Stops at once, as a dying worker would: open /submit streams are cut without their
  // final event and their requests cancelled; the listener closes; joins. Idempotent.
  void stop();
  // Requests whose /submit stream is open (tests).
  int open_streams() const;

  struct Impl;  // implementation detail (worker_endpoint.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

// Polls every `interval_ms` whether process `supervisor_pid` still exists (and is not a
// zombie); when it is gone calls `on_gone` once (default: log and _exit(3), ending the
// worker at once: without its supervisor nobody reads its results). The destructor stops
// watching. supervisor_pid <= 0: watches nothing.
class SupervisorWatch {
 public:
  SupervisorWatch(pid_t supervisor_pid, int interval_ms = 250, std::function<void()> on_gone = nullptr);
  ~SupervisorWatch();
  SupervisorWatch(const SupervisorWatch&) = delete;
  SupervisorWatch& operator=(const SupervisorWatch&) = delete;

 private:
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

// True while process `pid` exists and is not a zombie (/proc/<pid>/stat).
bool process_alive(pid_t pid);

}  // namespace moe::supervisor
