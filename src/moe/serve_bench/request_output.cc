#include "moe/serve_bench/request_output.h"

#include <utility>

namespace moe::serve_bench {

StreamRecorder::StreamRecorder(bool chat, int estimated_prompt_len) : chat_(chat) {
  out_.prompt_len = estimated_prompt_len;
}

void StreamRecorder::on_bytes(std::string_view bytes, double t) {
  if (finished_) return;
  parser_.feed(bytes, [&](std::string_view data) { on_event(data, t); });
}

void StreamRecorder::on_event(std::string_view data, double t) {
  if (!out_.error.empty()) return;  // keep the first error
  StatusOr<StreamChunk> parsed = parse_stream_chunk(data, chat_);
  if (!parsed.ok()) {
    out_.error = parsed.status().message();
    return;
  }
  const StreamChunk& c = *parsed;
  if (c.done) {
    saw_done_ = true;
    return;
  }
  if (!c.error.empty()) {
    out_.error = "error in stream: " + c.error;
    return;
  }
  if (!c.text.empty()) {
    if (out_.text_chunks == 0) {
      out_.ttft_s = t;
    } else {
      out_.itl_s.push_back(t - last_text_t_);
    }
    last_text_t_ = t;
    ++out_.text_chunks;
    out_.generated_text += c.text;
  }
  if (!c.finish_reason.empty()) out_.finish_reason = c.finish_reason;
  if (c.completion_tokens) {
    out_.output_tokens = *c.completion_tokens;
    out_.usage_reported = true;
  }
  if (c.prompt_tokens) out_.prompt_len = *c.prompt_tokens;
  if (c.cached_tokens) out_.cached_tokens = *c.cached_tokens;
}

void StreamRecorder::finish(double t) {
  if (finished_) return;
  parser_.finish([&](std::string_view data) { on_event(data, t); });
  finished_ = true;
  out_.latency_s = t;
  if (!out_.error.empty()) {
    out_.success = false;
  } else if (out_.text_chunks == 0) {
    out_.success = false;
    out_.error = saw_done_ ? "the stream ended without any text chunk (no TTFT)"
                           : "the stream ended without any text chunk or [DONE]";
  } else {
    out_.success = true;
  }
}

void StreamRecorder::fail(std::string error, double t) {
  if (finished_) return;
  finished_ = true;
  out_.success = false;
  out_.error = std::move(error);
  out_.latency_s = t;
}

}  // namespace moe::serve_bench
