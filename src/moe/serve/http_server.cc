#include "moe/serve/http_server.h"

#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "moe/core/logging.h"
#include "moe/serve/client_socket.h"
#include "moe/serve/event_channel.h"
#include "moe/serve/openai_protocol.h"
#include "moe/serve/response_stream.h"
#include "moe/serve/thread_pool.h"
#include "moe/serve/tokenize_handler.h"

namespace moe::serve {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kJson = "application/json";

// httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG is compiled into
// Debian's library), so a burst of connections would wait for SYN retransmits (1 s and
// more). listen() again on the bound socket raises the backlog.
class Listener final : public httplib::Server {
 public:
  void raise_backlog() {
    const socket_t s = svr_sock_.load();
    if (s != INVALID_SOCKET) ::listen(s, SOMAXCONN);
  }
};

struct Route {
  const char* path;
  const char* allow;
};
constexpr Route kRoutes[] = {{"/v1/completions", "POST"},
                             {"/v1/chat/completions", "POST"},
                             {"/v1/models", "GET, HEAD"},
                             {"/health", "GET, HEAD"},
                             {"/metrics", "GET, HEAD"},
                             {"/tokenize", "POST"},
                             {"/detokenize", "POST"}};

// A bounded set of `endpoint` label values.
std::string endpoint_label(const std::string& path) {
  for (const Route& r : kRoutes) {
    if (path == r.path) return path;
  }
  return "other";
}

ApiError make_error(int status, std::string message, std::string param = "", std::string code = "") {
  ApiError e;
  e.http_status = status;
  e.type = error_type_for_status(status);
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(error_json(e), kJson);
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// "Bearer KEY" -> KEY (scheme case-insensitive); empty when absent or another scheme.
std::string bearer_token(const httplib::Request& req) {
  const std::string h = req.get_header_value("Authorization");
  if (h.size() < 7) return "";
  std::string scheme = h.substr(0, 7);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  if (scheme != "bearer ") return "";
  size_t start = 7;
  while (start < h.size() && h[start] == ' ') ++start;
  return h.substr(start);
}

std::string default_model_name(const std::string& model_dir) {
  std::string d = model_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One accepted generation request while its response is written.
struct PendingResponse {
  PendingResponse(uint64_t id, std::shared_ptr<EventChannel> channel, ResponseStream body)
      : id(id), channel(std::move(channel)), body(std::move(body)) {}
  const uint64_t id;
  const std::shared_ptr<EventChannel> channel;
  ResponseStream body;
  bool begun = false;
  std::vector<TimedEvent> events;
  Clock::time_point last_client_check = Clock::now();
};

}  // namespace

struct HttpServer::Impl {
  Impl(GenerationService& s, ServerOptions o)
      : service(s), options(std::move(o)), limiter(options.rate_limits, options.rate_limit_clock) {}

  GenerationService& service;
  ServerOptions options;
  ProtocolLimits limits;
  int context = 0;
  RateLimiter limiter;
  ServerMetrics metrics;
  CorsPolicy cors;
  Listener svr;
  std::thread thread;
  int port = -1;
  int64_t created = unix_seconds();
  std::atomic<bool> draining{false};
  bool started = false, stopped = false;

  // Requests whose responses are being written, for stop().
  std::mutex active_mu;
  std::condition_variable active_cv;
  std::map<uint64_t, std::shared_ptr<EventChannel>> active;
  bool channels_closed = false;

  void install_routes();
  void install_cors();
  // The engine's per-request timings of final events (vllm: metrics).
  void observe_final(const std::vector<TimedEvent>& events) {
    for (const TimedEvent& te : events) {
      if (te.event.finished) metrics.observe_finished(te.event);
    }
  }
  void handle_tokenizer(bool tokenize, const httplib::Request& req, httplib::Response& res);
  std::optional<ApiError> check_auth(const httplib::Request& req) const;
  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void answer_when_done(PendingResponse& p, const httplib::Request& req, httplib::Response& res);
  bool pump(PendingResponse& p, httplib::DataSink& sink);
  void release(PendingResponse& p);
  void add_active(uint64_t id, const std::shared_ptr<EventChannel>& channel);
  void remove_active(uint64_t id);
};

std::optional<ApiError> HttpServer::Impl::check_auth(const httplib::Request& req) const {
  if (options.api_keys.empty()) return std::nullopt;
  const std::string token = bearer_token(req);
  if (token.empty()) {
    return make_error(401, "missing API key: send the header 'Authorization: Bearer YOUR_KEY'", "",
                      "invalid_api_key");
  }
  bool ok = false;
  for (const std::string& key : options.api_keys) ok |= constant_time_equal(token, key);
  if (!ok) return make_error(401, "incorrect API key", "", "invalid_api_key");
  return std::nullopt;
}

void HttpServer::Impl::add_active(uint64_t id, const std::shared_ptr<EventChannel>& channel) {
  {
    std::lock_guard<std::mutex> lock(active_mu);
    active[id] = channel;
    if (!channels_closed) return;
  }
  channel->close();  // stop() already swept: end this one too
  service.cancel(id);
}

void HttpServer::Impl::remove_active(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(active_mu);
    active.erase(id);
  }
  active_cv.notify_all();
}

void HttpServer::Impl::handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const Clock::time_point arrival = Clock::now();
  const bool chat = endpoint == Endpoint::kChatCompletions;
  if (draining) return send_error(res, make_error(503, "the server is shutting down"));
  if (auto e = check_auth(req)) {
    res.set_header("WWW-Authenticate", "Bearer");
    return send_error(res, *e);
  }
  if (req.body.size() > options.max_body_bytes) {
    return send_error(res, make_error(413, "the request body is larger than " + std::to_string(options.max_body_bytes) +
                                               " bytes"));
  }
  OpenAiRequest r;
  if (auto e = parse_request(endpoint, req.body, limits, &r)) return send_error(res, *e);
  if (chat) {
    auto prompt = options.chat_template.render(r.messages);
    if (!prompt.ok()) return send_error(res, make_error(400, prompt.status().message(), "messages"));
    r.seq.prompt = std::move(prompt).value();
    if (options.chat_template.renders_special_tokens()) {
      // The rendered text already holds BOS and the role markers: no second BOS.
      auto ids = service.tokenize(r.seq.prompt, /*add_special_tokens=*/false);
      if (!ids.ok()) {
        return send_error(res, make_error(ids.status().code() == StatusCode::kInvalidArgument ? 400 : 500,
                                          "tokenizing the chat prompt: " + ids.status().message(), "messages"));
      }
      if (ids.value().empty()) return send_error(res, make_error(400, "messages: the chat template rendered an empty prompt", "messages"));
      r.seq.prompt_token_ids = std::move(ids).value();
    }
  }
  const int prompt_tokens = r.seq.prompt_token_ids.empty() ? service.count_tokens(r.seq.prompt)
                                                           : static_cast<int>(r.seq.prompt_token_ids.size());
  if (chat && !r.max_tokens_given) {
    r.seq.max_tokens = std::max(1, std::min(limits.max_tokens_limit, context - prompt_tokens));
  }
  if (limiter.enabled()) {
    // Per API key; without keys configured, per client address (a made-up bearer token
    // must not buy a fresh bucket).
    const std::string key = options.api_keys.empty() ? "addr:" + req.remote_addr : "key:" + bearer_token(req);
    const auto d = limiter.try_acquire(key, static_cast<int64_t>(prompt_tokens) + r.seq.max_tokens);
    if (!d.allowed) {
      const int64_t secs = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(d.retry_after_seconds)));
      res.set_header("Retry-After", std::to_string(secs));
      return send_error(res, make_error(429, "rate limit exceeded; retry after " + std::to_string(secs) + " s", "",
                                        "rate_limit_exceeded"));
    }
  }

  auto channel = std::make_shared<EventChannel>();
  const int max_tokens = r.seq.max_tokens;
  auto submitted = service.submit(std::move(r.seq), [channel](SeqEvent&& ev) { channel->push(std::move(ev)); });
  if (!submitted.ok()) {
    const Status& st = submitted.status();
    const int status = st.code() == StatusCode::kInvalidArgument || st.code() == StatusCode::kFailedPrecondition ? 400
                       : st.code() == StatusCode::kUnavailable                                                 ? 503
                                                                                                               : 500;
    return send_error(res, make_error(status, st.message()));
  }
  const uint64_t id = submitted.value();
  metrics.observe_request_params(/*n=*/1, max_tokens);
  add_active(id, channel);
  ResponseMeta meta{make_response_id(chat ? "chatcmpl-" : "cmpl-"), unix_seconds(), limits.served_model_name};
  auto pending = std::make_shared<PendingResponse>(
      id, channel, ResponseStream(endpoint, r.stream, r.include_usage, std::move(meta), &metrics, arrival));
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

void HttpServer::Impl::release(PendingResponse& p) {
  if (!p.body.finished()) {
    service.cancel(p.id);
    metrics.count_finished("abort");
    MOE_LOG_INFO("serve: request {} cancelled (client gone)", p.id);
  }
  remove_active(p.id);
}

// POST /tokenize and /detokenize (tokenize_handler.h), with the auth of /v1/*.
void HttpServer::Impl::handle_tokenizer(bool tokenize, const httplib::Request& req, httplib::Response& res) {
  if (auto e = check_auth(req)) {
    res.set_header("WWW-Authenticate", "Bearer");
    return send_error(res, *e);
  }
  const TokenizeContext ctx{&service, &options.chat_template, limits.served_model_name, context};
  const HandlerReply reply = tokenize ? handle_tokenize(ctx, req.body) : handle_detokenize(ctx, req.body);
  res.status = reply.status;
  res.set_content(reply.body, kJson);
}

// CORS (cors.h): preflights answered before routing; CORS headers added to every
// response just before it is written.
void HttpServer::Impl::install_cors() {
  if (!cors.enabled()) return;
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto p = cors.preflight(req.method, req.get_header_value("Origin"),
                            req.get_header_value("Access-Control-Request-Method"),
                            req.get_header_value("Access-Control-Request-Headers"));
    if (!p) return httplib::Server::HandlerResponse::Unhandled;
    res.status = p->status;
    for (const auto& [k, v] : p->headers) res.set_header(k, v);
    if (!p->error.empty()) send_error(res, make_error(p->status, p->error));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (res.has_header("Access-Control-Allow-Origin") || req.method == "OPTIONS") return;
    for (const auto& [k, v] : cors.response_headers(req.get_header_value("Origin"))) res.set_header(k, v);
  });
}

void HttpServer::Impl::install_routes() {
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { handle_tokenizer(true, req, res); });
  svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handle_tokenizer(false, req, res);
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kCompletions, req, res);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kChatCompletions, req, res);
  });
  svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (auto e = check_auth(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      return send_error(res, *e);
    }
    nlohmann::json model = {{"id", limits.served_model_name},
                            {"object", "model"},
                            {"created", created},
                            {"owned_by", "moe-engine"},
                            {"max_model_len", context}};
    nlohmann::json body = {{"object", "list"}, {"data", nlohmann::json::array({model})}};
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJson);
  });
  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    // The engine's state first (a failed engine is reported as such while draining).
    const ServiceHealth h = service.health();
    nlohmann::json body;
    if (!h.serving()) {
      body["status"] = h.state;
      if (!h.detail.empty()) body["detail"] = h.detail;
    } else {
      body["status"] = draining ? "shutting_down" : h.state;  // "degraded" still serves: 200
      if (!draining && !h.detail.empty()) body["detail"] = h.detail;
    }
    // Under the supervisor: the pid of each worker rank (for operators and chaos tests).
    if (!h.worker_pids.empty()) body["worker_pids"] = h.worker_pids;
    res.status = body["status"] == "ok" || body["status"] == "degraded" ? 200 : 503;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJson);
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(service.snapshot()), "text/plain; version=0.0.4; charset=utf-8");
  });
  // Another method on a known path: 405 with Allow.
  for (const Route& r : kRoutes) {
    const std::string allow = r.allow;
    auto not_allowed = [allow](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allow);
      send_error(res, make_error(405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " +
                                          allow + ")"));
    };
    const bool post = allow == "POST";
    if (post) {
      svr.Get(r.path, not_allowed);
    } else {
      svr.Post(r.path, not_allowed);
    }
    svr.Put(r.path, not_allowed);
    svr.Patch(r.path, not_allowed);
    svr.Delete(r.path, not_allowed);
    svr.Options(r.path, not_allowed);
  }
  // Errors httplib answers itself (no route: 404; body over the limit: 413; a request
  // it cannot parse: 400) get an OpenAI error body too.
  httplib::Server::HandlerWithResponse on_error = [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    switch (res.status) {
      case 404: message = "not found: " + req.method + " " + req.path; break;
      case 413: message = "the request body is too large"; break;
      default: message = "the request could not be processed (HTTP " + std::to_string(res.status) + ")";
    }
    send_error(res, make_error(res.status, message));
    return httplib::Server::HandlerResponse::Handled;
  };
  svr.set_error_handler(std::move(on_error));
  svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    MOE_LOG_ERROR("serve: {} {}: {}", req.method, req.path, what);
    send_error(res, make_error(500, "internal error: " + what));
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.count_http(endpoint_label(req.path), res.status);
  });
}

HttpServer::HttpServer(GenerationService& service, ServerOptions options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  Impl& m = *impl_;
  if (m.started) return failed_precondition("HttpServer::start called twice");
  const ModelInfo& info = m.service.model_info();
  m.context = info.max_context;
  if (m.options.max_tokens_limit < 0) {
    return invalid_argument("max_tokens_limit must be >= 0 (got " + std::to_string(m.options.max_tokens_limit) + ")");
  }
  if (m.options.max_body_bytes == 0) return invalid_argument("max_body_bytes must be > 0");
  m.limits.served_model_name =
      m.options.served_model_name.empty() ? default_model_name(info.model_dir) : m.options.served_model_name;
  m.limits.max_tokens_limit = m.options.max_tokens_limit > 0 ? m.options.max_tokens_limit : std::max(1, m.context);
  m.limits.vocab_size = info.vocab_size;
  m.metrics.set_model_name(m.limits.served_model_name, m.context);

  auto cors = CorsPolicy::create(m.options.cors);
  if (!cors.ok()) return cors.status();
  m.cors = std::move(cors).value();

  ::signal(SIGPIPE, SIG_IGN);
  m.install_routes();
  m.install_cors();
  const size_t max_threads = std::max<size_t>(1, m.options.max_threads);
  m.svr.new_task_queue = [max_threads] { return new GrowingThreadPool(std::min<size_t>(4, max_threads), max_threads); };
  m.svr.set_read_timeout(m.options.read_timeout_seconds, 0);
  m.svr.set_write_timeout(m.options.write_timeout_seconds, 0);
  m.svr.set_keep_alive_timeout(m.options.keep_alive_timeout_seconds);
  m.svr.set_keep_alive_max_count(1000);
  m.svr.set_payload_max_length(m.options.max_body_bytes);
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind the same
  // port and silently take half the connections: keep SO_REUSEADDR only (fast restarts).
  m.svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  int port = -1;
  errno = 0;
  if (m.options.port == 0) {
    port = m.svr.bind_to_any_port(m.options.host);
  } else if (m.svr.bind_to_port(m.options.host, m.options.port)) {
    port = m.options.port;
  }
  if (port <= 0) {
    // httplib reports no reason; errno is set when bind/listen failed, and stays 0 when
    // the host did not resolve to an address of this machine.
    const std::string why = errno != 0 ? std::strerror(errno) : "not an address of this machine";
    return Status(StatusCode::kUnavailable,
                  "cannot listen on " + m.options.host + ":" + std::to_string(m.options.port) + " (" + why + ")");
  }
  m.svr.raise_backlog();
  m.port = port;
  m.started = true;
  m.thread = std::thread([&m] {
    if (!m.svr.listen_after_bind()) MOE_LOG_ERROR("serve: the listener stopped with an error");
  });
  // stop() is a no-op until httplib marks itself running: wait for that.
  for (int i = 0; i < 5000 && !m.svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return ok_status();
}

int HttpServer::port() const { return impl_->port; }
const std::string& HttpServer::served_model_name() const { return impl_->limits.served_model_name; }
void HttpServer::drain() { impl_->draining = true; }
bool HttpServer::draining() const { return impl_->draining; }
ServerMetrics& HttpServer::metrics() { return impl_->metrics; }

void HttpServer::stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  m.draining = true;
  // End responses still waiting for events: what was produced is still sent, then
  // each gets its end (release() cancels the request). httplib cuts responses short
  // once the listener closes, so let them finish first (bounded by the write timeout).
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(m.active_mu);
    m.channels_closed = true;
    for (auto& [id, channel] : m.active) {
      channel->close();
      ids.push_back(id);
    }
  }
  for (uint64_t id : ids) m.service.cancel(id);
  {
    std::unique_lock<std::mutex> lock(m.active_mu);
    m.active_cv.wait_for(lock, std::chrono::seconds(m.options.write_timeout_seconds + 1),
                         [&] { return m.active.empty(); });
  }
  m.svr.stop();
  if (m.thread.joinable()) m.thread.join();
}

}  // namespace moe::serve
