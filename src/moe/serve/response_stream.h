// Turns one request's SeqEvents into its HTTP response body: SSE chunks for a streamed
// request, one JSON object for a non-streamed one (openai_protocol.h formats), and
// records its latencies and finish reason in ServerMetrics. No I/O: the HTTP server
// writes what it returns.
//
// Not thread-safe: one instance per request, used by the worker thread writing it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "moe/serve/event_channel.h"
#include "moe/serve/openai_protocol.h"
#include "moe/serve/server_metrics.h"

namespace moe::serve {

class ResponseStream {
 public:
  // `metrics` may be null; otherwise it must outlive this object. `arrival`: when the
  // request arrived (TTFT and E2E latency are measured from it).
  ResponseStream(Endpoint endpoint, bool stream, bool include_usage, ResponseMeta meta, ServerMetrics* metrics,
                 std::chrono::steady_clock::time_point arrival);

  // Bytes to send first (the chat role chunk when streaming; else empty).
  std::string begin();
  // Bytes to send for these events (streamed: their chunks; non-streamed: the whole
  // JSON once the final event is among them, else nothing). Events after the final one
  // are ignored.
  std::string on_events(std::vector<TimedEvent>& events);
  // The channel closed before the final event (the server is stopping): streamed, an
  // error event and [DONE]; non-streamed, a 503 error JSON (http_status()).
  std::string on_closed();

  bool finished() const { return finished_; }
  // Non-streamed only, once finished: the response's HTTP status: 200, or 503 when the
  // request ended in an engine error ("error") or the server stopped first (the body is
  // then an OpenAI error JSON; the client may retry).
  int http_status() const { return http_status_; }
  const std::string& finish_reason() const { return finish_reason_; }

 private:
  std::string finish(const SeqEvent& last);
  std::string error_event(const std::string& message) const;
  // Streamed: an SSE error event and [DONE]; non-streamed: a 503 error JSON.
  std::string fail(const std::string& message);

  const Endpoint endpoint_;
  const bool stream_, include_usage_;
  const ResponseMeta meta_;
  ServerMetrics* const metrics_;
  const std::chrono::steady_clock::time_point arrival_;
  std::chrono::steady_clock::time_point last_token_at_{};
  bool got_token_ = false;
  bool finished_ = false;
  int http_status_ = 200;
  std::string text_;  // non-streamed: the whole output so far
  std::string finish_reason_;
};

}  // namespace moe::serve
