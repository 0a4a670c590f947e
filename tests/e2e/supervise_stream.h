// Helpers of the `moe serve --supervise` end-to-end tests: a streamed completion that
// calls back on its first chunk (to inject a fault mid-stream), /health's worker pids,
// and one Prometheus counter from /metrics.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace moe::testing {

struct SupervisedStream {
  int status = 0;
  std::string text, finish_reason, error;
  int chunks = 0;
  int done = 0;  // data: [DONE] lines
};

inline SupervisedStream stream_request(int port, const nlohmann::json& body,
                                       const std::function<void()>& on_first_chunk = nullptr) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  nlohmann::json b = body;
  b["stream"] = true;
  req.body = b.dump();
  SupervisedStream out;
  std::string buf;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      const std::string event = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        ++out.done;
        continue;
      }
      auto j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) out.error += j["error"].dump();
      if (!j.contains("choices") || j["choices"].empty()) continue;
      if (++out.chunks == 1 && on_first_chunk) on_first_chunk();
      out.text += j["choices"][0].value("text", "");
      if (j["choices"][0]["finish_reason"].is_string()) out.finish_reason = j["choices"][0]["finish_reason"];
    }
    return true;
  };
  auto res = cli.send(req);
  out.status = res ? res->status : -1;
  return out;
}

// GET /health's JSON (null if no answer).
inline nlohmann::json health_json(int port) {
  httplib::Client cli("127.0.0.1", port);
  auto r = cli.Get("/health");
  if (!r) return nullptr;
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j;
}

inline std::vector<int64_t> worker_pids(int port) {
  const nlohmann::json h = health_json(port);
  if (!h.is_object() || !h.contains("worker_pids")) return {};
  return h["worker_pids"].get<std::vector<int64_t>>();
}

// The value of an unlabelled series in /metrics (-1 if absent).
inline double metric_value(int port, const std::string& name) {
  httplib::Client cli("127.0.0.1", port);
  auto r = cli.Get("/metrics");
  if (!r) return -1;
  const std::string key = "\n" + name + " ";
  const size_t at = r->body.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(r->body.substr(at + key.size()));
}

}  // namespace moe::testing
