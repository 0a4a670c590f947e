// Turns one request's SeqEvents (from its n * prompts sequences, the choices) into
// its HTTP response body: SSE chunks for a streamed request, one JSON object for a
// non-streamed one (openai_protocol.h formats), and records its latencies and finish
// reasons in ServerMetrics. No I/O: the HTTP server writes what it returns.
//
// Choices: a streamed response interleaves the choices' chunks as their events come,
// each chunk naming its choice's index (the chat role chunk of every choice first);
// after the last choice finished, the usage chunk (with include_usage) and [DONE]. A
// non-streamed response lists the choices by index. usage: prompt tokens counted once
// per prompt (not per choice, as OpenAI and vLLM), completion tokens summed over choices.
// A choice that ends in an engine error ends the whole response: streamed, an SSE
// error event and [DONE]; non-streamed, a 503 error JSON. The caller then cancels the
// other choices' sequences (finished() is true).
//
// Not thread-safe: one instance per request, used by the worker thread writing it.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/serve/event_channel.h"
#include "moe/serve/openai_logprobs.h"
#include "moe/serve/openai_protocol.h"
#include "moe/serve/server_metrics.h"

namespace moe::serve {

// The choices of a response and what each carries.
struct ResponseShape {
  int choices = 1;                // sequences: n * prompts; TimedEvent::choice indexes them
  int n = 1;                      // choices per prompt (choice c answers prompt c / n)
  int logprobs = -1;              // >= 0: choices carry logprobs (from SeqEvent::logprobs)
  // Completions with echo: each choice's prompt text, written before its output (and
  // with logprobs, SeqEvent::prompt_logprobs before its tokens'). Empty: no echo.
  std::vector<std::string> echo{};
  TokenText token_text{};         // logprobs' token strings; required when logprobs >= 0
};

class ResponseStream {
 public:
  // `metrics` may be null; otherwise it must outlive this object. `arrival`: when the
  // request arrived (TTFT and E2E latency are measured from it).
  ResponseStream(Endpoint endpoint, bool stream, bool include_usage, ResponseMeta meta, ServerMetrics* metrics,
                 std::chrono::steady_clock::time_point arrival, ResponseShape shape = {});

  // Bytes to send first (the chat role chunks when streaming; else empty).
  std::string begin();
  // Bytes to send for these events (streamed: their chunks; non-streamed: the whole
  // JSON once every choice's final event is among them, else nothing). Events of a
  // finished choice, of an unknown choice, or after the response finished are ignored.
  std::string on_events(std::vector<TimedEvent>& events);
  // The channel closed before the final events (the server is stopping): streamed, an
  // error event and [DONE]; non-streamed, a 503 error JSON (http_status()).
  std::string on_closed();

  bool finished() const { return finished_; }
  // Choices that have not finished (their sequences still run): the caller cancels them.
  int unfinished_choices() const { return static_cast<int>(choices_.size()) - done_; }
  bool choice_finished(int choice) const { return choices_[static_cast<size_t>(choice)].finished; }
  // Non-streamed only, once finished: the response's HTTP status: 200, or 503 when a
  // choice ended in an engine error ("error") or the server stopped first (the body is
  // then an OpenAI error JSON; the client may retry).
  int http_status() const { return http_status_; }

 private:
  struct Choice {
    std::string text;  // non-streamed: the whole output so far (echo included)
    bool finished = false, started = false, got_token = false;
    std::string finish_reason;
    int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    std::optional<CompletionLogprobs> completion_lp;  // completions with logprobs
    nlohmann::json chat_lp = nlohmann::json::array();  // chat with logprobs: pending "content" entries
    size_t pending_lp = 0;                            // entries added since the last chunk took them
    std::chrono::steady_clock::time_point last_token_at{};
  };

  std::string on_event(int index, const TimedEvent& te);
  // The choice's logprobs since the last call (null without logprobs).
  nlohmann::json take_logprobs(Choice& c);
  std::string chunk(int index, const std::string& text, const std::string& finish_reason, nlohmann::json logprobs);
  std::string finish_all();
  std::string error_event(const std::string& message) const;
  // Streamed: an SSE error event and [DONE]; non-streamed, a 503 error JSON.
  std::string fail(const std::string& message);
  Usage usage() const;

  const Endpoint endpoint_;
  const bool stream_, include_usage_;
  const ResponseMeta meta_;
  ServerMetrics* const metrics_;
  const std::chrono::steady_clock::time_point arrival_;
  const ResponseShape shape_;
  std::vector<Choice> choices_;
  bool got_token_ = false;
  bool finished_ = false;
  int done_ = 0;
  int http_status_ = 200;
};

}  // namespace moe::serve
