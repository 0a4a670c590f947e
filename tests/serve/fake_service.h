// A deterministic GenerationService for testing the HTTP layer without a model.
//
// Tokens are characters: count_tokens(text) = 1 (BOS) + text.size(); tokenize() gives
// the bytes (plus BOS id 1 with add_special_tokens). A request's
// output echoes its prompt one character (one token) per step: text "abc" gives
// "a", "b", "c", then finish "stop" (EOS) if max_tokens was not reached first
// ("length"). Token-id prompts echo "<id> " per token. Steps run every `step_delay_ms`
// on a background thread; `first_token_delay_ms` delays the first token; with `hold` set no
// token is produced until it is cleared. Cancelled requests end with "abort"; a prompt
// starting with "FAIL" ends with "error" after one token. submit() answers like the
// Scheduler: InvalidArgument when prompt + max_tokens exceeds `context`, Unavailable
// after shutdown(); shutdown(grace) lets requests run for `grace`, then aborts them.
// health() reports what set_health() set. Events carry `cached_tokens`;
// reset_prefix_cache() counts its calls.
// Logprobs (SeqRequest::logprobs = k >= 0): generated token number t (0-based) gets
// logprob -(t + 1) / 8 and top entries j = 0..k-1 of id 'A' + j with logprob -(j + 1) / 4;
// prompt_logprobs (k >= 0): the first event lists every prompt token (BOS = 1, then
// the characters' codes or the ids), logprob 0 for the first and -1 for the others,
// with the same top entries (none for the first). token_bytes(id): the character `id`
// for id < 128, "<id>" otherwise (BOS 1 and EOS 2 are special: empty).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "moe/generation_service.h"

namespace moe::serve::testing {

class FakeService final : public GenerationService {
 public:
  explicit FakeService(int context = 256) {
    info_.model_dir = "/models/fake-model";
    info_.model_type = "mixtral";
    info_.vocab_size = 1000;
    info_.max_context = context;
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeService() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Milliseconds between steps, and before a request's first token.
  std::atomic<int> step_delay_ms{1};
  std::atomic<int> first_token_delay_ms{0};

  void set_hold(bool hold) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = hold;
    }
    cv_.notify_all();
  }
  void shutdown(std::chrono::milliseconds grace) {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    abort_at_ = std::chrono::steady_clock::now() + grace;
  }

  StatusOr<uint64_t> submit(SeqRequest request, SeqSink sink) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return Status(StatusCode::kUnavailable, "shutting down");
    if (request.prompt.empty() && request.prompt_token_ids.empty()) return invalid_argument("empty prompt");
    if (request.max_tokens < 1) return invalid_argument("max_tokens < 1");
    Req r;
    r.sink = std::move(sink);
    r.max_tokens = request.max_tokens;
    if (request.prompt_token_ids.empty()) {
      r.prompt_tokens = count_tokens(request.prompt);
      for (char c : request.prompt) r.pieces.push_back(std::string(1, c));
      r.fail = request.prompt.rfind("FAIL", 0) == 0;
    } else {
      r.prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
      for (int id : request.prompt_token_ids) r.pieces.push_back(std::to_string(id) + " ");
    }
    if (r.prompt_tokens + request.max_tokens > info_.max_context) {
      return invalid_argument("prompt (" + std::to_string(r.prompt_tokens) + " tokens) + max_tokens (" +
                              std::to_string(request.max_tokens) + ") exceeds the context of " +
                              std::to_string(info_.max_context) + " tokens");
    }
    r.logprobs = request.logprobs;
    if (request.prompt_logprobs >= 0) {
      std::vector<int> ids = {1};
      if (request.prompt_token_ids.empty()) {
        for (char c : request.prompt) ids.push_back(static_cast<unsigned char>(c));
      } else {
        ids = request.prompt_token_ids;
      }
      for (size_t i = 0; i < ids.size(); ++i) {
        TokenLogprob lp{ids[i], i == 0 ? 0.0f : -1.0f, {}};
        if (i > 0) lp.top = top_entries(request.prompt_logprobs);
        r.prompt_logprobs.push_back(std::move(lp));
      }
    }
    r.start = std::chrono::steady_clock::now();
    last_request_ = request;
    requests_.push_back(request);
    const uint64_t id = next_id_++;
    reqs_[id] = std::move(r);
    ++submitted_;
    cv_.notify_all();
    return id;
  }

  void cancel(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.insert(id);
    auto it = reqs_.find(id);
    if (it != reqs_.end()) it->second.cancelled = true;
    cv_.notify_all();
  }

  ServiceSnapshot snapshot() const override {
    std::lock_guard<std::mutex> lock(mu_);
    ServiceSnapshot s;
    s.running = static_cast<int>(reqs_.size());
    s.waiting = 0;
    s.kv_blocks_total = 100;
    s.kv_blocks_used = static_cast<int64_t>(reqs_.size());
    s.kv_block_size = 16;
    s.steps = steps_;
    s.prompt_tokens_total = 7;
    s.generation_tokens_total = generated_;
    s.moe_layers = {0, 1};
    s.expert_tokens = {{5, 6}, {7, 8}};
    return s;
  }
  const ModelInfo& model_info() const override { return info_; }
  // health() answers what set_health() last set (default "ok").
  ServiceHealth health() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return health_;
  }
  void set_health(ServiceHealth h) {
    std::lock_guard<std::mutex> lock(mu_);
    health_ = std::move(h);
  }
  int count_tokens(const std::string& text) const override {
    ++count_tokens_calls;
    return 1 + static_cast<int>(text.size());
  }
  mutable std::atomic<int> count_tokens_calls{0};  // how often count_tokens ran (tokenizing)
  // Tokens are bytes, as in count_tokens: tokenize gives BOS (1) then each byte's value;
  // detokenize joins token_bytes (below) and refuses ids outside [0, vocab_size).
  StatusOr<std::vector<int>> tokenize(const std::string& text, bool add_special_tokens) const override {
    std::vector<int> ids;
    if (add_special_tokens) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  StatusOr<std::string> detokenize(const std::vector<int>& ids) const override {
    std::string text;
    for (int id : ids) {
      if (id < 0 || id >= info_.vocab_size) return invalid_argument("token id " + std::to_string(id) + " is out of range");
      text += token_bytes(id);
    }
    return text;
  }

  std::set<uint64_t> cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  int in_flight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(reqs_.size());
  }
  int submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  SeqRequest last_request() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_request_;
  }
  // Every request submitted, in order.
  std::vector<SeqRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  // Every event reports this many cached prompt tokens (usage.prompt_tokens_details).
  std::atomic<int> cached_tokens{0};
  std::atomic<int> prefix_cache_resets{0};
  Status reset_prefix_cache() override {
    ++prefix_cache_resets;
    return ok_status();
  }
  std::string token_bytes(int id) const override {
    if (id == 1 || id == 2 || id < 0) return "";
    return id < 128 ? std::string(1, static_cast<char>(id)) : "<" + std::to_string(id) + ">";
  }
  static std::vector<std::pair<int, float>> top_entries(int k) {
    std::vector<std::pair<int, float>> top;
    for (int j = 0; j < k; ++j) top.emplace_back('A' + j, -(j + 1) / 4.0f);
    return top;
  }

 private:
  struct Req {
    SeqSink sink;
    std::vector<std::string> pieces;
    int max_tokens = 0, prompt_tokens = 0, done = 0, logprobs = -1;
    std::vector<TokenLogprob> prompt_logprobs;
    bool cancelled = false, fail = false;
    std::chrono::steady_clock::time_point start;
  };

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      cv_.wait_for(lock, std::chrono::milliseconds(step_delay_ms.load()));
      if (quit_) break;
      const auto now = std::chrono::steady_clock::now();
      const bool abort_all = shutting_down_ && now >= abort_at_;
      for (auto it = reqs_.begin(); it != reqs_.end();) {
        Req& r = it->second;
        SeqEvent ev;
        ev.prompt_tokens = r.prompt_tokens;
        ev.cached_tokens = cached_tokens.load();
        if (r.cancelled || abort_all) {
          ev.finished = true;
          ev.finish_reason = "abort";
        } else if (hold_ || now - r.start < std::chrono::milliseconds(first_token_delay_ms.load())) {
          ++it;
          continue;
        } else if (r.fail && r.done == 1) {
          ev.finished = true;
          ev.finish_reason = "error";
          ev.error = "injected failure";
        } else if (r.done >= static_cast<int>(r.pieces.size())) {
          ev.finished = true;
          ev.finish_reason = "stop";
          ev.token_ids = {2};  // EOS
          ++r.done;
        } else {
          ev.text = r.pieces[r.done];
          ev.token_ids = {static_cast<int>(static_cast<unsigned char>(ev.text[0]))};
          ++r.done;
          ++generated_;
          if (r.done >= r.max_tokens) {
            ev.finished = true;
            ev.finish_reason = "length";
          }
        }
        ev.completion_tokens = r.done;
        if (r.logprobs >= 0) {
          for (size_t i = 0; i < ev.token_ids.size(); ++i) {
            const int t = r.done - static_cast<int>(ev.token_ids.size()) + static_cast<int>(i);
            ev.logprobs.push_back({ev.token_ids[i], -(t + 1) / 8.0f, top_entries(r.logprobs)});
          }
        }
        if (!r.prompt_logprobs.empty()) ev.prompt_logprobs = std::move(r.prompt_logprobs);
        r.prompt_logprobs.clear();
        const bool finished = ev.finished;
        r.sink(std::move(ev));
        it = finished ? reqs_.erase(it) : std::next(it);
      }
      ++steps_;
    }
    for (auto& [id, r] : reqs_) {
      SeqEvent ev;
      ev.finished = true;
      ev.finish_reason = "abort";
      r.sink(std::move(ev));
    }
  }

  ModelInfo info_;
  ServiceHealth health_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::map<uint64_t, Req> reqs_;
  std::set<uint64_t> cancelled_;
  SeqRequest last_request_;
  std::vector<SeqRequest> requests_;
  uint64_t next_id_ = 1;
  int submitted_ = 0;
  int64_t steps_ = 0, generated_ = 0;
  bool hold_ = false, quit_ = false, shutting_down_ = false;
  std::chrono::steady_clock::time_point abort_at_{};
};

}  // namespace moe::serve::testing
