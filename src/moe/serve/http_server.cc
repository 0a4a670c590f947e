#include "moe/serve/http_server.h"

#include "moe/serve/http_server_impl.h"

#include <malloc.h>
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
#include "moe/serve/request_guard.h"
#include "moe/serve/response_stream.h"
#include "moe/serve/thread_pool.h"
#include "moe/serve/tokenize_handler.h"

namespace moe::serve {
namespace {

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
                             {"/detokenize", "POST"},
                             {"/reset_prefix_cache", "POST"}};

// A bounded set of `endpoint` label values.
std::string endpoint_label(const std::string& path) {
  for (const Route& r : kRoutes) {
    if (path == r.path) return path;
  }
  return "other";
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

std::string default_model_name(const std::string& model_dir) {
  std::string d = model_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}


}  // namespace

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
//
// Before routing, also: a request with a body method but neither Content-Length nor
// chunked Transfer-Encoding has an empty body (RFC 9112 6.3); httplib would read
// until the client closes (10 s of read timeout, then a 400), so it is given
// "Content-Length: 0".
void HttpServer::Impl::install_cors() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool body_method = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                             req.method == "DELETE" || req.method == "PRI";
    if (body_method && !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
      // `req` is httplib's own non-const Request, passed here as const.
      const_cast<httplib::Request&>(req).headers.emplace("Content-Length", "0");
    }
    if (!cors.enabled()) return httplib::Server::HandlerResponse::Unhandled;
    auto p = cors.preflight(req.method, req.get_header_value("Origin"),
                            req.get_header_value("Access-Control-Request-Method"),
                            req.get_header_value("Access-Control-Request-Headers"));
    if (!p) return httplib::Server::HandlerResponse::Unhandled;
    res.status = p->status;
    for (const auto& [k, v] : p->headers) res.set_header(k, v);
    if (!p->error.empty()) send_error(res, make_error(p->status, p->error));
    return httplib::Server::HandlerResponse::Handled;
  });
  if (!cors.enabled()) return;
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
  // vLLM's: forgets the cached prefixes (200, empty body), behind the API key.
  svr.Post("/reset_prefix_cache", [this](const httplib::Request& req, httplib::Response& res) {
    if (auto e = check_auth(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      return send_error(res, *e);
    }
    const Status st = service.reset_prefix_cache();
    if (st.ok()) {
      res.status = 200;
      return;
    }
    send_error(res, make_error(st.code() == StatusCode::kUnimplemented ? 501 : 503, st.message()));
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
    metrics.set_connection_gate(svr.gate_counters());
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
    if (req.body.size() >= kTrimBodyBytes) ask_trim();
  });
}

void HttpServer::Impl::ask_trim() {
  {
    std::lock_guard<std::mutex> lock(trim_mu);
    trim_asked = Clock::now();
    trim_pending = true;
  }
  trim_cv.notify_all();
}

void HttpServer::Impl::run_trimmer() {
  std::unique_lock<std::mutex> lock(trim_mu);
  while (!trim_stop) {
    trim_cv.wait(lock, [&] { return trim_stop || trim_pending; });
    if (trim_stop) break;
    // Quiet for kTrimQuiet since the last large request ended: its body is freed by now.
    if (trim_cv.wait_until(lock, trim_asked + kTrimQuiet, [&] { return trim_stop; })) break;
    if (Clock::now() < trim_asked + kTrimQuiet) continue;
    trim_pending = false;
    lock.unlock();
    ::malloc_trim(0);
    lock.lock();
  }
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
  if (!(m.options.header_timeout_seconds > 0 && std::isfinite(m.options.header_timeout_seconds))) {
    return invalid_argument("header_timeout_seconds must be a finite number > 0");
  }
  if (m.options.max_n < 1) return invalid_argument("max_n must be >= 1 (got " + std::to_string(m.options.max_n) + ")");
  m.limits.served_model_name =
      m.options.served_model_name.empty() ? default_model_name(info.model_dir) : m.options.served_model_name;
  m.limits.max_tokens_limit = m.options.max_tokens_limit > 0 ? m.options.max_tokens_limit : std::max(1, m.context);
  m.limits.vocab_size = info.vocab_size;
  m.prompt_byte_limit = prompt_byte_bound(m.context, longest_token_bytes(m.service, info.vocab_size));
  m.limits.max_n = m.options.max_n;
  m.metrics.set_model_name(m.limits.served_model_name, m.context);

  auto cors = CorsPolicy::create(m.options.cors);
  if (!cors.ok()) return cors.status();
  m.cors = std::move(cors).value();

  ::signal(SIGPIPE, SIG_IGN);
  m.install_routes();
  m.install_cors();
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
  // Slow clients wait in the gate without a worker (gated_listener.h).
  GateOptions gate;
  gate.header_timeout_seconds = m.options.header_timeout_seconds;
  gate.keep_alive_timeout_seconds = m.options.keep_alive_timeout_seconds;
  gate.max_connections_per_client = m.options.max_connections_per_client;
  MOE_RETURN_IF_ERROR(m.svr.start_gate(gate, std::max<size_t>(1, m.options.max_threads)));
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
  m.trimmer = std::thread([&m] { m.run_trimmer(); });
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
  m.svr.stop_gate();
  {
    std::lock_guard<std::mutex> lock(m.trim_mu);
    m.trim_stop = true;
  }
  m.trim_cv.notify_all();
  if (m.trimmer.joinable()) m.trimmer.join();
}

}  // namespace moe::serve
