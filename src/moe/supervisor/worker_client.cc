#include "moe/supervisor/worker_client.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "moe/supervisor/worker_protocol.h"

namespace moe::supervisor {
namespace {

void set_timeouts(httplib::Client& cli, double connect_seconds, double read_seconds) {
  const auto c = static_cast<int64_t>(connect_seconds * 1e6), r = static_cast<int64_t>(read_seconds * 1e6);
  cli.set_connection_timeout(static_cast<time_t>(c / 1000000), static_cast<time_t>(c % 1000000));
  cli.set_read_timeout(static_cast<time_t>(r / 1000000), static_cast<time_t>(r % 1000000));
  cli.set_write_timeout(static_cast<time_t>(c / 1000000) + 1, 0);
}

template <typename T>
StatusOr<T> internal_if_bad(StatusOr<T> decoded, const std::string& path) {
  if (decoded.ok()) return decoded;
  return internal_error("worker endpoint " + path + ": " + decoded.status().message());
}

}  // namespace

WorkerClient::WorkerClient(int port, double timeout_seconds) : port_(port), timeout_seconds_(timeout_seconds) {}

StatusOr<std::string> WorkerClient::call(const std::string& method, const std::string& path,
                                         const std::string& body) const {
  httplib::Client cli("127.0.0.1", port_);
  set_timeouts(cli, timeout_seconds_, timeout_seconds_);
  auto res = method == "GET" ? cli.Get(path.c_str()) : cli.Post(path.c_str(), body, "application/json");
  if (!res) {
    return Status(StatusCode::kUnavailable,
                  "worker endpoint 127.0.0.1:" + std::to_string(port_) + path + ": " + httplib::to_string(res.error()));
  }
  if (res->status != 200) {
    return internal_error("worker endpoint " + path + ": HTTP " + std::to_string(res->status) + ": " + res->body);
  }
  return res->body;
}

StatusOr<ServiceHealth> WorkerClient::health() const {
  MOE_ASSIGN_OR_RETURN(std::string body, call("GET", "/health", ""));
  return internal_if_bad(decode_health(body), "/health");
}

StatusOr<ServiceSnapshot> WorkerClient::snapshot() const {
  MOE_ASSIGN_OR_RETURN(std::string body, call("GET", "/snapshot", ""));
  return internal_if_bad(decode_snapshot(body), "/snapshot");
}

Status WorkerClient::reset_prefix_cache() const {
  MOE_ASSIGN_OR_RETURN(std::string body, call("POST", "/reset_prefix_cache", "{}"));
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return internal_error("worker endpoint /reset_prefix_cache: malformed answer: " + body);
  if (!j.contains("error")) return ok_status();
  const auto& e = j["error"];
  if (!e.is_object() || !e.contains("code") || !e["code"].is_number_integer() || !e.contains("message") ||
      !e["message"].is_string()) {
    return internal_error("worker endpoint /reset_prefix_cache: malformed error: " + body);
  }
  return Status(static_cast<StatusCode>(e["code"].get<int>()), e["message"].get<std::string>());
}

StatusOr<ModelInfo> WorkerClient::model_info() const {
  MOE_ASSIGN_OR_RETURN(std::string body, call("GET", "/info", ""));
  return internal_if_bad(decode_model_info(body), "/info");
}

StatusOr<int> WorkerClient::count_tokens(const std::string& text) const {
  const std::string req = nlohmann::json({{"text", text}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  MOE_ASSIGN_OR_RETURN(std::string body, call("POST", "/count_tokens", req));
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("count") || !j["count"].is_number_integer()) {
    return internal_error("worker endpoint /count_tokens: malformed answer: " + body);
  }
  return j["count"].get<int>();
}

StatusOr<std::vector<int>> WorkerClient::tokenize(const std::string& text, bool add_special_tokens) const {
  const std::string req = nlohmann::json({{"text", text}, {"add_special_tokens", add_special_tokens}})
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  MOE_ASSIGN_OR_RETURN(std::string body, call("POST", "/tokenize", req));
  MOE_ASSIGN_OR_RETURN(StatusOr<std::vector<int>> reply, internal_if_bad(decode_ids_reply(body), "/tokenize"));
  return reply;
}

StatusOr<std::string> WorkerClient::detokenize(const std::vector<int>& ids) const {
  MOE_ASSIGN_OR_RETURN(std::string body, call("POST", "/detokenize", nlohmann::json({{"ids", ids}}).dump()));
  MOE_ASSIGN_OR_RETURN(StatusOr<std::string> reply, internal_if_bad(decode_text_reply(body), "/detokenize"));
  return reply;
}

StatusOr<std::vector<std::string>> WorkerClient::vocab_bytes() const {
  MOE_ASSIGN_OR_RETURN(std::string body, call("GET", "/vocab_bytes", ""));
  return internal_if_bad(decode_vocab_bytes(body), "/vocab_bytes");
}

SubmitStream::SubmitStream(int port, double connect_timeout_seconds)
    : port_(port), connect_timeout_seconds_(connect_timeout_seconds) {}

SubmitStream::~SubmitStream() = default;

void SubmitStream::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  if (client_) client_->stop();
}

Status SubmitStream::run(const SeqRequest& request, const ReplyFn& on_reply, const EventFn& on_event) {
  httplib::Client* cli = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) {
      on_reply(Status(StatusCode::kUnavailable, "aborted before it was sent"));
      return Status(StatusCode::kUnavailable, "aborted before it was sent");
    }
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    cli = client_.get();
  }
  // A request may wait long in the worker's queue without an event: the stream has no
  // read deadline of its own (the supervisor's liveness probe decides when the group is
  // dead, and then kills it, which ends the stream).
  set_timeouts(*cli, connect_timeout_seconds_, 7 * 24 * 3600.0);
  cli->set_keep_alive(false);
  httplib::Request req;
  req.method = "POST";
  req.path = "/submit";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = encode_request(request);
  std::string buf, why;
  bool replied = false, final_seen = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      const std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!replied) {
        replied = true;
        auto reply = decode_submit_reply(line);
        if (!reply.ok()) {
          why = reply.status().message();
          on_reply(Status(StatusCode::kUnavailable, why));
          return false;
        }
        if (!on_reply(reply.value())) {
          why = reply.value().ok() ? "ended after the reply" : reply.value().status().message();
          return false;
        }
        continue;
      }
      auto event = decode_event(line);
      if (!event.ok()) {
        why = event.status().message();
        return false;
      }
      const bool finished = event.value().finished;
      if (!on_event(std::move(event).value())) {
        why = "ended by the supervisor";
        return false;
      }
      if (finished) {
        final_seen = true;
        return false;  // nothing may follow the final event
      }
    }
    return true;
  };
  auto res = cli->send(req);
  if (final_seen) return ok_status();
  if (why.empty()) {
    why = !res ? "the stream was cut (" + httplib::to_string(res.error()) + ")"
               : "the stream ended before its final event (HTTP " + std::to_string(res->status) + ")";
  }
  if (!replied) on_reply(Status(StatusCode::kUnavailable, "no reply to /submit: " + why));
  return Status(StatusCode::kUnavailable, why);
}

}  // namespace moe::supervisor
