#include "moe/serve/response_stream.h"

namespace moe::serve {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

ResponseStream::ResponseStream(Endpoint endpoint, bool stream, bool include_usage, ResponseMeta meta,
                               ServerMetrics* metrics, std::chrono::steady_clock::time_point arrival)
    : endpoint_(endpoint), stream_(stream), include_usage_(include_usage), meta_(std::move(meta)), metrics_(metrics),
      arrival_(arrival) {}

std::string ResponseStream::begin() {
  if (stream_ && endpoint_ == Endpoint::kChatCompletions) return sse_event(chat_role_chunk_json(meta_, include_usage_));
  return "";
}

std::string ResponseStream::on_events(std::vector<TimedEvent>& events) {
  std::string out;
  for (TimedEvent& te : events) {
    if (finished_) break;
    const SeqEvent& ev = te.event;
    if (!ev.token_ids.empty() && metrics_) {
      if (!got_token_) {
        metrics_->ttft().observe(seconds(te.at - arrival_));
      } else {
        metrics_->inter_token().observe(seconds(te.at - last_token_at_));
      }
    }
    if (!ev.token_ids.empty()) {
      got_token_ = true;
      last_token_at_ = te.at;
    }
    if (stream_) {
      if (!ev.text.empty()) {
        out += sse_event(endpoint_ == Endpoint::kCompletions ? completion_chunk_json(meta_, ev.text, "", include_usage_)
                                                             : chat_chunk_json(meta_, ev.text, "", include_usage_));
      }
    } else {
      text_ += ev.text;
    }
    if (ev.finished) {
      if (metrics_) metrics_->e2e().observe(seconds(te.at - arrival_));
      out += finish(ev);
    }
  }
  return out;
}

std::string ResponseStream::error_event(const std::string& message) const {
  ApiError e;
  e.http_status = 503;
  e.type = error_type_for_status(503);
  e.message = message;
  return sse_event(error_json(e));
}

std::string ResponseStream::fail(const std::string& message) {
  if (stream_) {
    std::string out = error_event(message);
    out += kSseDone;
    return out;
  }
  http_status_ = 503;
  ApiError e;
  e.http_status = 503;
  e.type = error_type_for_status(503);
  e.message = message;
  return error_json(e);
}

std::string ResponseStream::finish(const SeqEvent& last) {
  finished_ = true;
  finish_reason_ = last.finish_reason;
  if (metrics_) metrics_->count_finished(last.finish_reason);
  const Usage usage{last.prompt_tokens, last.completion_tokens};
  if (last.finish_reason == "error") {
    return fail("generation failed: " + (last.error.empty() ? "engine error" : last.error));
  }
  if (!stream_) {
    return endpoint_ == Endpoint::kCompletions ? completion_json(meta_, text_, last.finish_reason, usage)
                                               : chat_completion_json(meta_, text_, last.finish_reason, usage);
  }
  std::string out = sse_event(endpoint_ == Endpoint::kCompletions
                                  ? completion_chunk_json(meta_, "", last.finish_reason, include_usage_)
                                  : chat_chunk_json(meta_, "", last.finish_reason, include_usage_));
  if (include_usage_) out += sse_event(usage_chunk_json(endpoint_, meta_, usage));
  out += kSseDone;
  return out;
}

std::string ResponseStream::on_closed() {
  if (finished_) return "";
  finished_ = true;
  finish_reason_ = "abort";
  if (metrics_) metrics_->count_finished("abort");
  return fail("the server stopped before the request finished");
}

}  // namespace moe::serve
