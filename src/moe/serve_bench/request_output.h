// What the benchmark client records for one request, and StreamRecorder, which
// builds that record from the timed events of an OpenAI SSE stream. Times are
// seconds; all of them are client-side (steady clock), as in vLLM's
// benchmarks/backend_request_func.py.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moe/serve_bench/sse.h"

namespace moe::serve_bench {

struct RequestOutput {
  bool success = false;
  std::string error;             // why it failed (HTTP status and body, transport error, ...)
  double start_s = 0.0;          // send time, from the start of the benchmark
  double ttft_s = 0.0;           // send -> first chunk with non-empty text
  double latency_s = 0.0;        // send -> end of the stream (E2EL)
  std::vector<double> itl_s;     // gaps between consecutive non-empty text chunks
  int prompt_len = 0;            // usage.prompt_tokens, else the client's estimate
  int output_tokens = -1;        // usage.completion_tokens; -1: the server sent no usage
  bool usage_reported = false;
  int cached_tokens = -1;        // usage.prompt_tokens_details.cached_tokens; -1: not reported
  int text_chunks = 0;           // chunks with non-empty text
  std::string generated_text;
  std::string finish_reason;
  int http_status = 0;
};

// Feeds on the body of a streaming response: `on_bytes(bytes, t)` with the time each
// read arrived (seconds since the request was sent), then `finish(t)` at the end of
// the body. The first chunk with non-empty text sets TTFT; each later one adds
// the gap since the previous one to the ITLs. The request succeeds when the stream
// carried at least one non-empty text chunk and no error payload.
class StreamRecorder {
 public:
  StreamRecorder(bool chat, int estimated_prompt_len);

  void on_bytes(std::string_view bytes, double t);
  void finish(double t);
  // A failure before or instead of a stream (transport error, HTTP error status).
  void fail(std::string error, double t);

  const RequestOutput& output() const { return out_; }
  RequestOutput take() { return std::move(out_); }

 private:
  void on_event(std::string_view data, double t);

  bool chat_;
  SseParser parser_;
  RequestOutput out_;
  double last_text_t_ = 0.0;
  bool saw_done_ = false;
  bool finished_ = false;
};

}  // namespace moe::serve_bench
