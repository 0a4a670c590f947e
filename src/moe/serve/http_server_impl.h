// HttpServer's implementation, shared by its source files: http_server.cc (routes,
// start/stop) and generation_handler.cc (POST /v1/completions and
// /v1/chat/completions). Internal to src/moe/serve.
#pragma once

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "moe/serve/cors.h"
#include "moe/serve/event_channel.h"
#include "moe/serve/gated_listener.h"
#include "moe/serve/http_server.h"
#include "moe/serve/openai_protocol.h"
#include "moe/serve/response_stream.h"

namespace moe::serve {

using Clock = std::chrono::steady_clock;
inline constexpr const char* kJson = "application/json";

inline ApiError make_error(int status, std::string message, std::string param = "", std::string code = "") {
  ApiError e;
  e.http_status = status;
  e.type = error_type_for_status(status);
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

inline void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(error_json(e), kJson);
}

// "Bearer KEY" -> KEY (scheme case-insensitive); empty when absent or another scheme.
inline std::string bearer_token(const httplib::Request& req) {
  const std::string h = req.get_header_value("Authorization");
  if (h.size() < 7) return "";
  std::string scheme = h.substr(0, 7);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  if (scheme != "bearer ") return "";
  size_t start = 7;
  while (start < h.size() && h[start] == ' ') ++start;
  return h.substr(start);
}

inline int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One accepted generation request while its response is written.
// ids[i] is the sequence of choice i.
struct PendingResponse {
  PendingResponse(std::vector<uint64_t> ids, std::shared_ptr<EventChannel> channel, ResponseStream body)
      : ids(std::move(ids)), channel(std::move(channel)), body(std::move(body)) {}
  const std::vector<uint64_t> ids;
  const std::shared_ptr<EventChannel> channel;
  ResponseStream body;
  bool begun = false;
  std::vector<TimedEvent> events;
  Clock::time_point last_client_check = Clock::now();
};

struct HttpServer::Impl {
  Impl(GenerationService& s, ServerOptions o)
      : service(s), options(std::move(o)), limiter(options.rate_limits, options.rate_limit_clock) {}

  GenerationService& service;
  ServerOptions options;
  ProtocolLimits limits;
  int context = 0;
  size_t prompt_byte_limit = 0;  // request_guard.h prompt_byte_bound; 0 = none
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

  // Gives the memory of large request bodies back to the system after a burst
  // (tools/probe/burst_rss.py: 64 x 1 MB prompts left 6.1 GB held): the logger of a
  // request with a body of kTrimBodyBytes or more asks; a thread waits until no such
  // request has ended for kTrimQuiet, then calls malloc_trim(0).
  static constexpr size_t kTrimBodyBytes = 256 << 10;
  static constexpr std::chrono::milliseconds kTrimQuiet{200};
  std::mutex trim_mu;
  std::condition_variable trim_cv;
  Clock::time_point trim_asked{};
  bool trim_pending = false, trim_stop = false;
  std::thread trimmer;
  void ask_trim();
  void run_trimmer();

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
  // Rate limiting (generation_handler.cc): invalid requests count too.
  std::string limiter_key(const httplib::Request& req) const;
  bool over_limit(const std::string& key, int64_t cost, httplib::Response& res);
  void reject(const httplib::Request& req, httplib::Response& res, const ApiError& e);
  void answer_when_done(PendingResponse& p, const httplib::Request& req, httplib::Response& res);
  bool pump(PendingResponse& p, httplib::DataSink& sink);
  void release(PendingResponse& p);
  void add_active(uint64_t id, const std::shared_ptr<EventChannel>& channel);
  void remove_active(uint64_t id);
};

}  // namespace moe::serve
