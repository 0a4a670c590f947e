// The OpenAI-compatible HTTP front end (cpp-httplib) over a GenerationService.
//
// Routes:
//   POST /v1/completions, POST /v1/chat/completions   generation, also streamed (SSE)
//   GET  /v1/models                                    the served model
//   GET  /health                                       200 {"status":"ok"}; else 503 with
//                                                      {"status": "shutting_down" (draining),
//                                                      or GenerationService::health()'s state
//                                                      ("stalled", "failed", "recovering") and
//                                                      "detail"}; under the supervisor also
//                                                      "worker_pids": [pid of rank 0, ...]
//   GET  /metrics                                      Prometheus text format (no auth)
//   POST /tokenize, POST /detokenize                   vLLM's (tokenize_handler.h; auth as /v1/*)
// CORS (cors.h), off by default: preflights from allowed origins get 204, responses to
// them Access-Control-Allow-Origin.
// Other paths: 404; another method on a known path: 405 with Allow. Errors are OpenAI
// error JSON (openai_protocol.h). With api_keys, /v1/* needs "Authorization: Bearer
// KEY" (401 otherwise). Rate limits (rate_limiter.h) answer 429 with Retry-After
// (whole seconds), per API key (per client address when no keys are configured). Bodies above
// max_body_bytes: 413. Failures of GenerationService::submit(): InvalidArgument -> 400,
// Unavailable -> 503, others -> 500.
//
// A request is n * prompts sequences (openai_protocol.h sequence_requests: choice
// p * n + j is sample j of prompt p, seeded seed + j), submitted together (all or
// none: a failed submit cancels those already queued) and answered as one response
// (response_stream.h); rate limits charge every sequence's prompt and max_tokens.
// Responses are written as the request's events arrive (a per-request EventChannel fed
// by the SeqSink, which never blocks). Streamed: SSE chunks, then "data: [DONE]".
// Non-streamed: the worker waits for the final event and then answers, so the status
// is decided at the end: 200 with the JSON object, or 503 with an OpenAI error JSON when
// the request ended in an engine error ("error") or the server stopped first; one
// aborted by shutdown gets its partial text with finish_reason "abort". Meanwhile the
// worker probes the client's socket every poll interval (client_socket.h). A client
// that went away (for either kind) gets its request cancelled
// (GenerationService::cancel: every unfinished choice). A streamed request that fails
// (any of its choices) gets an SSE error event (type service_unavailable), then
// [DONE], and its other choices are cancelled.
//
// Connections wait for each request's whole head in a gate (connection_gate.h: one
// epoll thread, no worker; a head deadline of header_timeout_seconds; at most
// max_connections_per_client per client address), so slow or idle clients do not
// starve others; only then does a worker of a thread pool that grows on demand
// (thread_pool.h) serve the request, and a kept-alive connection goes back to the gate
// after its response; idle connections close after keep_alive_timeout_seconds. SIGPIPE is ignored process-wide from start() on (writes to
// a closed socket must fail, not kill the server).
//
// Shutdown: drain() makes /health answer 503 and new generation requests 503 while
// requests in flight continue (the engine's own shutdown decides how long); stop() then
// closes the listener, ends responses still waiting (events already produced are sent,
// their requests cancelled) and waits for every connection's worker. The destructor
// calls stop().
//
// Thread-safety: start/drain/stop from any thread; stop() and the destructor must not
// run concurrently with each other.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "moe/generation_service.h"
#include "moe/serve/chat_template.h"
#include "moe/serve/cors.h"
#include "moe/serve/rate_limiter.h"
#include "moe/serve/server_metrics.h"
#include "moe/status.h"

namespace moe::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0 = a free port (see HttpServer::port())
  std::vector<std::string> api_keys;     // empty = no authentication
  std::string served_model_name;         // empty = the model directory's last component
  size_t max_body_bytes = 1 << 20;       // request bodies above: 413
  int max_tokens_limit = 0;              // max_tokens above: 400; 0 = the model's context
  int max_n = 16;                        // `n` above: 400; >= 1
  RateLimits rate_limits;                // 0 = off
  RateLimiter::Clock rate_limit_clock;   // tests; default steady_clock
  ChatTemplate chat_template;            // default: plain
  int read_timeout_seconds = 10;         // a request that stalls this long mid-read is dropped
  int write_timeout_seconds = 10;        // a client that does not read for this long is dropped
  int keep_alive_timeout_seconds = 5;    // idle keep-alive connections close after this
  // Slow clients (connection_gate.h): a request head must arrive whole within
  // this (a deadline, not per read; kept alive: from its first byte), else the
  // connection is closed; clients waiting for their heads hold no worker thread.
  double header_timeout_seconds = 10;
  // Connections one client address may hold at once (waiting or served); more are
  // answered 429 and closed. 0 = no cap.
  size_t max_connections_per_client = 1024;
  size_t max_threads = 2048;             // connections served at once; more wait in a queue
  int client_poll_ms = 50;               // how often a waiting response checks its client
  CorsOptions cors;                      // no allowed origins = CORS off
};

class HttpServer {
 public:
  // `service` is not owned and must outlive the server.
  HttpServer(GenerationService& service, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and serves on a background thread. InvalidArgument for bad options
  // (max_tokens_limit < 0, max_body_bytes 0, max_n < 1, bad CORS lists); Unavailable when the address cannot be
  // bound (in use, bad host). Call once.
  Status start();
  int port() const;  // the bound port (after start())
  const std::string& served_model_name() const;

  void drain();     // /health 503, new generation requests 503; idempotent
  bool draining() const;
  void stop();      // drain, close the listener, end waiting responses, join; idempotent

  ServerMetrics& metrics();

  struct Impl;  // implementation detail (http_server.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::serve
