#include "moe/serve/response_stream.h"

namespace moe::serve {
namespace {

using nlohmann::json;

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

ResponseStream::ResponseStream(Endpoint endpoint, bool stream, bool include_usage, ResponseMeta meta,
                               ServerMetrics* metrics, std::chrono::steady_clock::time_point arrival,
                               ResponseShape shape)
    : endpoint_(endpoint), stream_(stream), include_usage_(include_usage), meta_(std::move(meta)), metrics_(metrics),
      arrival_(arrival), shape_(std::move(shape)), choices_(static_cast<size_t>(std::max(1, shape_.choices))) {
  if (shape_.logprobs >= 0 && endpoint_ == Endpoint::kCompletions) {
    for (Choice& c : choices_) c.completion_lp.emplace(shape_.token_text);
  }
}

std::string ResponseStream::begin() {
  if (!stream_ || endpoint_ != Endpoint::kChatCompletions) return "";
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    out += sse_event(chat_role_chunk_json(meta_, static_cast<int>(i), include_usage_));
  }
  return out;
}

std::string ResponseStream::on_events(std::vector<TimedEvent>& events) {
  std::string out;
  for (const TimedEvent& te : events) {
    if (finished_) break;
    if (te.choice < 0 || static_cast<size_t>(te.choice) >= choices_.size()) continue;
    if (choices_[static_cast<size_t>(te.choice)].finished) continue;
    out += on_event(te.choice, te);
  }
  return out;
}

json ResponseStream::take_logprobs(Choice& c) {
  if (shape_.logprobs < 0) return nullptr;
  c.pending_lp = 0;
  if (c.completion_lp) return c.completion_lp->take();
  json content = std::move(c.chat_lp);
  c.chat_lp = json::array();
  return {{"content", std::move(content)}};
}

std::string ResponseStream::chunk(int index, const std::string& text, const std::string& finish_reason,
                                  json logprobs) {
  const ChoiceOut c{index, text, finish_reason, std::move(logprobs)};
  return sse_event(endpoint_ == Endpoint::kCompletions ? completion_chunk_json(meta_, c, include_usage_)
                                                       : chat_chunk_json(meta_, c, include_usage_));
}

std::string ResponseStream::on_event(int index, const TimedEvent& te) {
  Choice& c = choices_[static_cast<size_t>(index)];
  const SeqEvent& ev = te.event;
  if (!ev.token_ids.empty()) {
    if (metrics_) {
      if (!got_token_) {
        metrics_->ttft().observe(seconds(te.at - arrival_));
      } else if (c.got_token) {
        metrics_->inter_token().observe(seconds(te.at - c.last_token_at));
      }
    }
    got_token_ = c.got_token = true;
    c.last_token_at = te.at;
  }
  std::string text = ev.text;
  if (!c.started) {
    c.started = true;
    if (!shape_.echo.empty()) {
      text = shape_.echo[static_cast<size_t>(index)] + text;
      if (c.completion_lp && !ev.prompt_logprobs.empty()) {
        c.completion_lp->add(ev.prompt_logprobs, /*prompt=*/true);
        c.pending_lp += ev.prompt_logprobs.size();
      }
    }
  }
  if (shape_.logprobs >= 0 && !ev.logprobs.empty()) {
    if (c.completion_lp) {
      c.completion_lp->add(ev.logprobs, /*prompt=*/false);
    } else {
      for (json& e : chat_logprob_entries(ev.logprobs, shape_.token_text)) c.chat_lp.push_back(std::move(e));
    }
    c.pending_lp += ev.logprobs.size();
  }
  c.prompt_tokens = ev.prompt_tokens;
  c.completion_tokens = ev.completion_tokens;
  c.cached_tokens = ev.cached_tokens;
  std::string out;
  if (ev.finished && ev.finish_reason == "error") {
    c.finished = true;
    ++done_;
    if (metrics_) metrics_->count_finished("error");
    return fail("generation failed: " + (ev.error.empty() ? "engine error" : ev.error));
  }
  if (stream_) {
    if (!text.empty() || (c.pending_lp > 0 && !ev.finished)) out += chunk(index, text, "", take_logprobs(c));
    if (ev.finished) out += chunk(index, "", ev.finish_reason, c.pending_lp > 0 ? take_logprobs(c) : json(nullptr));
  } else {
    c.text += text;
  }
  if (!ev.finished) return out;
  c.finished = true;
  c.finish_reason = ev.finish_reason;
  ++done_;
  if (metrics_) metrics_->count_finished(ev.finish_reason);
  if (done_ == static_cast<int>(choices_.size())) {
    if (metrics_) metrics_->e2e().observe(seconds(te.at - arrival_));
    out += finish_all();
  }
  return out;
}

Usage ResponseStream::usage() const {
  Usage u;
  const size_t n = static_cast<size_t>(std::max(1, shape_.n));
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (i % n == 0) {
      u.prompt_tokens += choices_[i].prompt_tokens;
      u.cached_tokens += choices_[i].cached_tokens;
    }
    u.completion_tokens += choices_[i].completion_tokens;
  }
  return u;
}

std::string ResponseStream::finish_all() {
  finished_ = true;
  if (!stream_) {
    std::vector<ChoiceOut> out;
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      out.push_back({static_cast<int>(i), c.text, c.finish_reason, take_logprobs(c)});
    }
    return endpoint_ == Endpoint::kCompletions ? completion_json(meta_, out, usage())
                                               : chat_completion_json(meta_, out, usage());
  }
  std::string out;
  if (include_usage_) out += sse_event(usage_chunk_json(endpoint_, meta_, usage()));
  out += kSseDone;
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
  finished_ = true;
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

std::string ResponseStream::on_closed() {
  if (finished_) return "";
  if (metrics_) {
    for (int i = 0; i < unfinished_choices(); ++i) metrics_->count_finished("abort");
  }
  done_ = static_cast<int>(choices_.size());
  return fail("the server stopped before the request finished");
}

}  // namespace moe::serve
