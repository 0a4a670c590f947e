// The serving lifecycle of `moe serve` on rank 0: start the HTTP server, run the
// engine's step loop on the calling thread, and on SIGTERM / SIGINT drain (/health and
// new requests 503), let requests in flight finish for up to the grace period, then
// stop the server. A second signal aborts the requests in flight at once.
//
//   ServedEngine engine{[&] { return scheduler.run(); },
//                       [&](double grace) { scheduler.shutdown(grace); }};
//   ServeLoopResult r = serve_until_shutdown(server, engine, {.shutdown_grace_seconds = 30});
//
// Progress lines ("shutting down: ...", "aborting ...") go to stderr.
#pragma once

#include <functional>

#include "moe/serve/http_server.h"
#include "moe/status.h"

namespace moe::serve {

// The engine side of serving (a Scheduler): run() blocks until shutdown() was called
// and every request has finished; shutdown() is thread-safe and idempotent.
struct ServedEngine {
  std::function<Status()> run;
  std::function<void(double grace_seconds)> shutdown;
};

struct ServeLoopOptions {
  double shutdown_grace_seconds = 30;  // >= 0
  // Called once the server listens (e.g. to print its address), before run().
  std::function<void(const HttpServer&)> on_started{};
};

// `start`: the server's start() error (nothing ran); `run`: the engine loop's result.
struct ServeLoopResult {
  Status start;
  Status run;
};

// Blocks until the engine loop ends (after a signal, or an engine error). The server is
// stopped on return in every case. Installs SIGTERM/SIGINT handlers for its duration
// (signal_watcher.h): one serve loop per process at a time.
ServeLoopResult serve_until_shutdown(HttpServer& server, const ServedEngine& engine, const ServeLoopOptions& options);

}  // namespace moe::serve
