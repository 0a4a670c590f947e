#include "moe/serve/serve_loop.h"

#include <cstdio>

#include "moe/serve/signal_watcher.h"

namespace moe::serve {

ServeLoopResult serve_until_shutdown(HttpServer& server, const ServedEngine& engine, const ServeLoopOptions& options) {
  ServeLoopResult result;
  SignalWatcher signals(
      [&] {
        std::fprintf(stderr, "shutting down: finishing requests in flight (up to %g s; signal again to abort them)\n",
                     options.shutdown_grace_seconds);
        server.drain();
        engine.shutdown(options.shutdown_grace_seconds);
      },
      [&] {
        std::fprintf(stderr, "aborting requests in flight\n");
        server.drain();
        engine.shutdown(0);
      });
  result.start = server.start();
  if (!result.start.ok()) return result;
  if (options.on_started) options.on_started(server);
  result.run = engine.run();  // until shutdown and every request is done
  server.stop();
  return result;
}

}  // namespace moe::serve
