// POST /v1/completions and /v1/chat/completions: parse (openai_protocol.h), submit
// the n * prompts sequences, and write their events as the response (response_stream.h),
// streamed or at the end. See http_server.h for the behaviour.
#include <xxhash.h>

#include <cmath>
#include <cstdio>

#include "moe/core/logging.h"
#include "moe/serve/client_socket.h"
#include "moe/serve/http_server_impl.h"
#include "moe/serve/request_guard.h"

namespace moe::serve {
namespace {

// The text echo writes for a prompt: its text, or its token ids decoded.
std::string prompt_text(const GenerationService& service, const SeqRequest& seq) {
  if (seq.prompt_token_ids.empty()) return seq.prompt;
  auto text = service.detokenize(seq.prompt_token_ids);
  if (text.ok()) return std::move(text).value();
  std::string out;  // a service without detokenize: the tokens' bytes
  for (int id : seq.prompt_token_ids) out += service.token_bytes(id);
  return out;
}

// The prefix-cache salt of a request: with API keys configured, a tag of the caller's
// key (XXH3-128 of it: the key itself never reaches the engine, its journal or the disk
// tier) before the request's own cache_salt, so tenants never share cached KV and
// cannot learn from timing whether another tenant sent a prompt.
std::string tenant_salt(const std::string& key, const std::string& salt) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  char tag[40];
  std::snprintf(tag, sizeof(tag), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string("tenant:") + tag + "\n" + salt;
}

}  // namespace

// The rate-limit key: per API key; without keys configured, per client address (a
// made-up bearer token must not buy a fresh bucket).
std::string HttpServer::Impl::limiter_key(const httplib::Request& req) const {
  return options.api_keys.empty() ? "addr:" + req.remote_addr : "key:" + bearer_token(req);
}

// 429 with Retry-After when `key` may not spend `cost` tokens now (charged when it may).
bool HttpServer::Impl::over_limit(const std::string& key, int64_t cost, httplib::Response& res) {
  if (!limiter.enabled()) return false;
  const auto d = limiter.try_acquire(key, cost);
  if (d.allowed) return false;
  const int64_t secs = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(d.retry_after_seconds)));
  res.set_header("Retry-After", std::to_string(secs));
  send_error(res, make_error(429, "rate limit exceeded; retry after " + std::to_string(secs) + " s", "",
                             "rate_limit_exceeded"));
  return true;
}

// An invalid request (after authentication) counts against the client's request rate:
// 429 once the client is over it, else the request's own error.
void HttpServer::Impl::reject(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  if (over_limit(limiter_key(req), 0, res)) return;
  send_error(res, e);
}

void HttpServer::Impl::handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const std::string prompt_param = chat ? "messages" : "prompt";
  if (draining) return send_error(res, make_error(503, "the server is shutting down"));
  if (auto e = check_auth(req)) {
    res.set_header("WWW-Authenticate", "Bearer");
    return send_error(res, *e);
  }
  if (req.body.size() > options.max_body_bytes) {
    return reject(req, res, make_error(413, "the request body is larger than " + std::to_string(options.max_body_bytes) +
                                                " bytes"));
  }
  OpenAiRequest r;
  if (auto e = parse_request(endpoint, req.body, limits, &r)) return reject(req, res, *e);
  // A prompt longer in bytes than any prompt that fits the context is refused before it
  // is tokenized (a 1 MB prompt took 1-2 s of CPU and 140 MB to tokenize).
  auto too_long = [&](const std::string& text) -> std::optional<ApiError> {
    if (prompt_byte_limit == 0 || text.size() <= prompt_byte_limit) return std::nullopt;
    return make_error(400, "this model's maximum context length is " + std::to_string(context) + " tokens, and the " +
                               prompt_param + " has " + std::to_string(text.size()) + " bytes, more than any " +
                               std::to_string(context) + "-token text (" + std::to_string(prompt_byte_limit) +
                               " bytes)", prompt_param, "context_length_exceeded");
  };
  if (chat) {
    auto prompt = options.chat_template.render(r.messages);
    if (!prompt.ok()) return reject(req, res, make_error(400, prompt.status().message(), "messages"));
    r.seq.prompt = std::move(prompt).value();
    if (auto e = too_long(r.seq.prompt)) return reject(req, res, *e);
    if (options.chat_template.renders_special_tokens()) {
      // The rendered text already holds BOS and the role markers: no second BOS.
      auto ids = service.tokenize(r.seq.prompt, /*add_special_tokens=*/false);
      if (!ids.ok()) {
        return reject(req, res, make_error(ids.status().code() == StatusCode::kInvalidArgument ? 400 : 500,
                                           "tokenizing the chat prompt: " + ids.status().message(), "messages"));
      }
      if (ids.value().empty()) {
        return reject(req, res, make_error(400, "messages: the chat template rendered an empty prompt", "messages"));
      }
      r.seq.prompt_token_ids = std::move(ids).value();
    }
  }
  std::vector<SeqRequest> seqs = sequence_requests(r);
  if (!options.api_keys.empty()) {
    const std::string key = bearer_token(req);
    for (SeqRequest& s : seqs) s.cache_salt = tenant_salt(key, s.cache_salt);
  }
  for (const SeqRequest& s : seqs) {
    if (auto e = too_long(s.prompt)) return reject(req, res, *e);
  }
  int64_t cost = 0;  // rate-limit tokens: every sequence's prompt and max_tokens
  for (SeqRequest& s : seqs) {
    const int prompt_tokens = s.prompt_token_ids.empty() ? service.count_tokens(s.prompt)
                                                         : static_cast<int>(s.prompt_token_ids.size());
    if (chat && !r.max_tokens_given) {
      s.max_tokens = std::max(1, std::min(limits.max_tokens_limit, context - prompt_tokens));
    }
    cost += static_cast<int64_t>(prompt_tokens) + s.max_tokens;
  }
  if (over_limit(limiter_key(req), cost, res)) return;

  ResponseShape shape;
  shape.choices = static_cast<int>(seqs.size());
  shape.n = r.n;
  shape.logprobs = r.logprobs;
  shape.token_text = [svc = &service](int id) { return svc->token_bytes(id); };
  if (r.echo) {
    for (const SeqRequest& s : seqs) shape.echo.push_back(prompt_text(service, s));
  }
  // One channel for all the choices; each sequence's sink tags its events with its choice.
  auto channel = std::make_shared<EventChannel>();
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int choice = static_cast<int>(i);
    auto submitted = service.submit(std::move(seqs[i]),
                                    [channel, choice](SeqEvent&& ev) { channel->push(std::move(ev), choice); });
    if (!submitted.ok()) {
      channel->close();
      for (uint64_t id : ids) service.cancel(id);  // all or nothing
      const Status& st = submitted.status();
      const int status = st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kFailedPrecondition
                             ? 400
                         : st.code() == StatusCode::kUnavailable ? 503
                                                                 : 500;
      // The field the engine's message is about (`param`; it used to be null).
      return send_error(res, make_error(status, st.message(), param_of_engine_error(st.message(), endpoint),
                                        is_context_length_error(st.message()) ? "context_length_exceeded" : ""));
    }
    ids.push_back(submitted.value());
  }
  metrics.observe_request_params(r.n, r.seq.max_tokens);
  for (uint64_t id : ids) add_active(id, channel);
  ResponseMeta meta{make_response_id(chat ? "chatcmpl-" : "cmpl-"), unix_seconds(), limits.served_model_name};
  auto pending = std::make_shared<PendingResponse>(
      std::move(ids), channel,
      ResponseStream(endpoint, r.stream, r.include_usage, std::move(meta), &metrics, arrival, std::move(shape)));
  if (!r.stream) return answer_when_done(*pending, req, res);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, pending](size_t, httplib::DataSink& sink) { return pump(*pending, sink); },
      [this, pending](bool) { release(*pending); });
}

// A non-streamed request: waits here for its final event, so that the status (200, or
// 503 for an engine error) is decided at the end. Meanwhile the client's socket is
// probed every poll interval: one that went away gets its request cancelled.
void HttpServer::Impl::answer_when_done(PendingResponse& p, const httplib::Request& req, httplib::Response& res) {
  const int fd = find_client_socket(req.remote_addr, req.remote_port, req.local_port);
  std::string body;
  while (!p.body.finished()) {
    p.events.clear();
    const bool open = p.channel->wait_pop(&p.events, std::chrono::milliseconds(options.client_poll_ms));
    observe_final(p.events);
    if (!p.events.empty()) {
      body += p.body.on_events(p.events);
    } else if (!open) {
      body += p.body.on_closed();
    }
    if (!p.body.finished() && fd >= 0 && !client_connected(fd)) {
      release(p);  // cancels the request
      res.status = 499;  // never seen: the client is gone (nginx's "client closed request")
      return;
    }
  }
  release(p);
  res.status = p.body.http_status();
  res.set_content(body, kJson);
}

// One call of a streamed response's content-provider loop: waits up to client_poll_ms
// for events, writes what they produce, and returns false to abandon the response (the
// client is gone).
bool HttpServer::Impl::pump(PendingResponse& p, httplib::DataSink& sink) {
  std::string out;
  if (!p.begun) {
    p.begun = true;
    out = p.body.begin();
  }
  if (out.empty()) {
    p.events.clear();
    const bool open = p.channel->wait_pop(&p.events, std::chrono::milliseconds(options.client_poll_ms));
    observe_final(p.events);
    if (!p.events.empty()) {
      out = p.body.on_events(p.events);
    } else if (!open) {
      out = p.body.on_closed();
    }
  }
  // A stream may write nothing for a while (a request waiting for room, a long prompt):
  // check the client every poll interval whatever happens.
  const Clock::time_point now = Clock::now();
  if (!p.body.finished() && now - p.last_client_check >= std::chrono::milliseconds(options.client_poll_ms)) {
    p.last_client_check = now;
    if (!sink.is_writable()) return false;  // the client went away; release() cancels the request
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (p.body.finished()) sink.done();
  return true;
}

// Cancels the choices still running (the client went away, the server stopped, or
// another choice failed) and forgets the request.
void HttpServer::Impl::release(PendingResponse& p) {
  const int unfinished = p.body.unfinished_choices();
  for (size_t i = 0; i < p.ids.size(); ++i) {
    if (!p.body.choice_finished(static_cast<int>(i))) service.cancel(p.ids[i]);
  }
  if (unfinished > 0) {
    for (int i = 0; i < unfinished; ++i) metrics.count_finished("abort");
    MOE_LOG_INFO("serve: request {} cancelled ({} of {} choices unfinished)", p.ids.front(), unfinished, p.ids.size());
  }
  for (uint64_t id : p.ids) remove_active(id);
}

}  // namespace moe::serve
