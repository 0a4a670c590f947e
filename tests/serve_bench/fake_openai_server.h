// A tiny in-process OpenAI-compatible streaming server for the `moe bench serve`
// tests: GET /v1/models, POST /v1/completions and /v1/chat/completions answering
// max_tokens text chunks ("t0 ", "t1 ", ...) at known delays, then a usage chunk and
// [DONE]. It records the bodies and headers it got and the most requests in flight.
// With prefix_cache, it counts a prompt's tokens as its words + 1 (BOS) and reports as
// usage.prompt_tokens_details.cached_tokens the longest run of leading words it shares
// with an earlier request's prompt + answer (a chat's contents joined, as the plain
// template does).
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace moe::testing {

struct FakeServerConfig {
  int ttft_ms = 60;          // delay before the first text chunk
  int itl_ms = 20;           // delay between text chunks
  bool usage = true;         // send the usage chunk when asked for it
  int prompt_tokens = 7;     // reported in usage
  int fail_status = 0;       // non-zero: answer every request with this status
  int fail_every = 0;        // > 0: answer every fail_every-th request (1-based) with HTTP 400
  bool error_event = false;  // an {"error": ...} event after the first chunk
  int threads = 96;          // server worker threads
  int max_model_len = 512;   // reported by /v1/models; 0: not reported
  bool prefix_cache = false; // word-level prefix cache (above)
};

// Whitespace-separated words.
inline std::vector<std::string> fake_words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerConfig config = {}) : cfg_(config) {
    const int threads = cfg_.threads;
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      nlohmann::json model = {{"id", "fake-model"}, {"object", "model"}};
      if (cfg_.max_model_len > 0) model["max_model_len"] = cfg_.max_model_len;
      res.set_content(nlohmann::json({{"object", "list"}, {"data", {model}}}).dump(), "application/json");
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, false); });
    svr_.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, true); });
    // cpp-httplib (0.11.4, compiled) listens with a backlog of 5: a burst of dozens of
    // connections overflows the accept queue and some are reset. listen() again on the
    // same socket raises the backlog.
    int listen_fd = -1;
    svr_.set_socket_options([&listen_fd](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = sock;
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeOpenAiServer() {
    svr_.stop();
    thread_.join();
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_in_flight() const { return max_in_flight_.load(); }
  int requests() const { return requests_.load(); }
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard<std::mutex> g(mu_);
    return bodies_;
  }
  std::vector<std::string> auth_headers() const {
    std::lock_guard<std::mutex> g(mu_);
    return auth_;
  }

 private:
  static std::string event(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    const int n = ++requests_;
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    {
      std::lock_guard<std::mutex> g(mu_);
      bodies_.push_back(body);
      auth_.push_back(req.get_header_value("Authorization"));
    }
    if (cfg_.fail_status != 0 || (cfg_.fail_every > 0 && n % cfg_.fail_every == 0)) {
      res.status = cfg_.fail_status != 0 ? cfg_.fail_status : 400;
      res.set_content(R"({"error":{"message":"prompt too long","type":"invalid_request_error"}})", "application/json");
      return;
    }
    const int tokens = body.is_object() && body.contains("max_tokens") ? body["max_tokens"].get<int>() : 16;
    // The prefix cache: the prompt's words, and how many lead an earlier prompt + answer.
    std::string text;
    std::vector<std::string> words;
    int cached = 0;
    if (cfg_.prefix_cache && body.is_object()) {
      if (chat && body.contains("messages")) {
        for (const auto& m : body["messages"]) text += m.value("content", std::string()) + "\n\n";
      } else {
        text = body.value("prompt", std::string());
      }
      words = fake_words(text);
      std::lock_guard<std::mutex> g(mu_);
      for (const std::vector<std::string>& seen : seen_) {
        size_t k = 0;
        while (k < words.size() && k < seen.size() && words[k] == seen[k]) ++k;
        cached = std::max(cached, static_cast<int>(k));
      }
    }
    const bool usage = cfg_.usage && body.is_object() && body.contains("stream_options") &&
                       body["stream_options"].value("include_usage", false);
    const int now = ++in_flight_;
    int prev = max_in_flight_.load();
    while (now > prev && !max_in_flight_.compare_exchange_weak(prev, now)) {
    }
    FakeServerConfig cfg = cfg_;
    res.set_chunked_content_provider(
        "text/event-stream", [this, cfg, tokens, usage, chat, text, words, cached](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          bool ok = true;
          if (chat) ok = write(event({{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}}}}}}}));
          std::this_thread::sleep_for(std::chrono::milliseconds(cfg.ttft_ms));
          for (int i = 0; ok && i < tokens; ++i) {
            if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(cfg.itl_ms));
            std::string text = std::to_string(i);  // "t<i> ", appended: GCC 12's -Wrestrict misfires on "t" + s
            text.insert(text.begin(), 't');
            text += ' ';
            nlohmann::json choice = {{"index", 0}, {"finish_reason", i + 1 == tokens ? nlohmann::json("length") : nullptr}};
            if (chat) {
              choice["delta"] = {{"content", text}};
            } else {
              choice["text"] = text;
            }
            ok = write(event({{"choices", {choice}}}));
            if (ok && cfg.error_event && i == 0) ok = write(event({{"error", {{"message", "engine failure"}}}}));
          }
          if (cfg.prefix_cache) {
            std::string answered = text;  // the prompt and the answer streamed above
            for (int i = 0; i < tokens; ++i) {
              answered += 't';
              answered += std::to_string(i);
              answered += ' ';
            }
            std::vector<std::string> seen = fake_words(answered);
            std::lock_guard<std::mutex> g(mu_);
            seen_.push_back(std::move(seen));
          }
          if (ok && usage) {
            nlohmann::json u = {{"prompt_tokens", cfg.prompt_tokens}, {"completion_tokens", tokens}};
            if (cfg.prefix_cache) {
              u["prompt_tokens"] = static_cast<int>(words.size()) + 1;
              u["prompt_tokens_details"] = {{"cached_tokens", cached}};
            }
            ok = write(event({{"choices", nlohmann::json::array()}, {"usage", u}}));
          }
          if (ok) write("data: [DONE]\n\n");
          --in_flight_;
          sink.done();
          return true;
        });
  }

  FakeServerConfig cfg_;
  httplib::Server svr_;
  std::thread thread_;
  int port_ = -1;
  std::atomic<int> in_flight_{0}, max_in_flight_{0}, requests_{0};
  mutable std::mutex mu_;
  std::vector<nlohmann::json> bodies_;
  std::vector<std::string> auth_;
  std::vector<std::vector<std::string>> seen_;  // prefix_cache: earlier prompts + answers, in words
};

}  // namespace moe::testing
