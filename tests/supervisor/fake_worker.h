// In-process fake worker groups for the supervisor's tests: a GenerationService that
// implements resume_token_ids (ResumableFake), served by a real WorkerEndpoint, started
// by a FakeLauncher whose groups a test can crash, freeze or make report "stalled".
//
// ResumableFake's output is a pure function of the request: token i of a request is
// expected_token(prompt, seed, i), with text "t<token> ". One token per running request
// per step (every step_ms), finish "length" at max_tokens. A resumed request starts at
// index resume_token_ids.size() and counts the resumed tokens as completion tokens, as the
// contract says. submit(): InvalidArgument for a prompt starting "BAD", for an empty
// prompt, and (reject_resume) for any resumed request.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moe/generation_service.h"
#include "moe/supervisor/worker_endpoint.h"
#include "moe/supervisor/worker_group.h"

namespace moe::supervisor::testing {

inline int expected_token(const std::string& prompt, uint64_t seed, int i) {
  uint64_t h = 1469598103934665603ull;
  for (char c : prompt) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return 3 + static_cast<int>((h + seed * 7919 + static_cast<uint64_t>(i) * 31) % 997);
}
inline std::string token_text(int token) { return "t" + std::to_string(token) + " "; }

class ResumableFake final : public GenerationService {
 public:
  explicit ResumableFake(int step_ms = 2) : step_ms_(step_ms) {
    info_.model_dir = "/models/fake";
    info_.model_type = "mixtral";
    info_.vocab_size = 1000;
    info_.max_context = 256;
    thread_ = std::thread([this] { loop(); });
  }
  ~ResumableFake() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::atomic<bool> reject_resume{false};
  std::atomic<bool> frozen{false};     // no steps; health() blocks (no answer)
  std::atomic<bool> hold{false};       // no steps; health() answers
  std::atomic<bool> fail_steps{false};  // the next step ends every request with "error"
  std::atomic<bool> report_stalled{false};

  StatusOr<uint64_t> submit(SeqRequest r, SeqSink sink) override {
    if (r.prompt.empty()) return invalid_argument("empty prompt");
    if (r.prompt.rfind("BAD", 0) == 0) return invalid_argument("bad prompt: " + r.prompt);
    if (!r.resume_token_ids.empty() && reject_resume) return invalid_argument("resume refused (test)");
    if (static_cast<int>(r.resume_token_ids.size()) >= r.max_tokens) {
      return invalid_argument("resume_token_ids: as many as max_tokens");
    }
    std::lock_guard<std::mutex> lock(mu_);
    Req q;
    q.request = r;
    q.sink = std::move(sink);
    q.done = static_cast<int>(r.resume_token_ids.size());
    const uint64_t id = next_id_++;
    requests_seen_.push_back(r);
    reqs_[id] = std::move(q);
    return id;
  }
  void cancel(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reqs_.find(id);
    if (it != reqs_.end()) it->second.cancelled = true;
    ++cancels_;
  }
  ServiceSnapshot snapshot() const override {
    std::lock_guard<std::mutex> lock(mu_);
    ServiceSnapshot s;
    s.running = static_cast<int>(reqs_.size());
    s.steps = steps_;
    s.generation_tokens_total = 1000 + steps_;
    return s;
  }
  ServiceHealth health() const override {
    for (int i = 0; i < 1000 && frozen; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ServiceHealth h;
    if (report_stalled) {
      h.state = "stalled";
      h.detail = "step running for 99 s (test)";
    }
    return h;
  }
  const ModelInfo& model_info() const override { return info_; }
  int count_tokens(const std::string& text) const override { return 1 + static_cast<int>(text.size()); }
  // Tokens: each byte of the text is a token of that value (BOS = 1 first with special
  // tokens); token t's bytes are token_text(t) for t in [3, 1000), none for BOS/EOS.
  StatusOr<std::vector<int>> tokenize(const std::string& text, bool add_special_tokens) const override {
    std::vector<int> ids;
    if (add_special_tokens) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  StatusOr<std::string> detokenize(const std::vector<int>& ids) const override {
    std::string text;
    for (int id : ids) {
      if (id < 0 || id >= info_.vocab_size) return invalid_argument("token id " + std::to_string(id) + " out of range");
      text += token_bytes(id);
    }
    return text;
  }
  std::string token_bytes(int id) const override {
    token_bytes_calls.fetch_add(1);
    return id >= 3 && id < info_.vocab_size ? token_text(id) : "";
  }
  mutable std::atomic<int> token_bytes_calls{0};

  std::vector<SeqRequest> requests_seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_seen_;
  }
  int cancels() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancels_;
  }
  int64_t steps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return steps_;
  }

 private:
  struct Req {
    SeqRequest request;
    SeqSink sink;
    int done = 0;
    bool cancelled = false;
  };
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      cv_.wait_for(lock, std::chrono::milliseconds(step_ms_));
      if (quit_ || frozen || hold) continue;
      for (auto it = reqs_.begin(); it != reqs_.end();) {
        Req& q = it->second;
        SeqEvent ev;
        ev.prompt_tokens = 1 + static_cast<int>(q.request.prompt.size());
        if (q.cancelled) {
          ev.finished = true;
          ev.finish_reason = "abort";
        } else if (fail_steps) {
          ev.finished = true;
          ev.finish_reason = "error";
          ev.error = "injected engine failure";
        } else {
          const int t = expected_token(q.request.prompt, q.request.sampling.seed.value_or(0), q.done);
          ev.token_ids = {t};
          ev.text = token_text(t);
          ++q.done;
          if (q.done >= q.request.max_tokens) {
            ev.finished = true;
            ev.finish_reason = "length";
          }
        }
        ev.completion_tokens = q.done;
        const bool fin = ev.finished;
        q.sink(std::move(ev));
        it = fin ? reqs_.erase(it) : std::next(it);
      }
      ++steps_;
    }
    for (auto& [id, q] : reqs_) {
      SeqEvent ev;
      ev.finished = true;
      ev.finish_reason = "abort";
      q.sink(std::move(ev));
    }
  }

  const int step_ms_;
  ModelInfo info_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::map<uint64_t, Req> reqs_;
  std::vector<SeqRequest> requests_seen_;
  uint64_t next_id_ = 1;
  int64_t steps_ = 0;
  int cancels_ = 0;
  bool quit_ = false;
};

// A group: a ResumableFake behind a real WorkerEndpoint. crash() = the process died.
class FakeGroup final : public WorkerHandle {
 public:
  explicit FakeGroup(int step_ms) : fake(step_ms), endpoint(fake) {}
  Status start() { return endpoint.start(); }
  int port() const override { return endpoint.port(); }
  std::vector<int64_t> pids() const override { return {static_cast<int64_t>(::getpid()), 4242}; }
  std::string exit_reason() override { return exited_ ? "killed by signal 9 (test)" : ""; }
  void kill() override {
    exited_ = true;
    fake.frozen = false;  // a frozen /health handler would hold up the endpoint's stop
    endpoint.stop();
  }
  void crash() { kill(); }

  ResumableFake fake;
  WorkerEndpoint endpoint;

 private:
  std::atomic<bool> exited_{false};
};

// Keeps every group it launched (alive for the test's lifetime, so a test can inspect a
// killed group's fake). Launches numbered from 1; fail_from: that launch and later ones
// fail (0 = never); block_launches: launch() waits until it is cleared.
class FakeLauncher final : public WorkerLauncher {
 public:
  explicit FakeLauncher(int step_ms = 2) : step_ms_(step_ms) {}

  std::atomic<int> fail_from{0};
  std::atomic<bool> block_launches{false};
  std::atomic<bool> reject_resume{false};  // groups launched from now on refuse replays

  StatusOr<std::unique_ptr<WorkerHandle>> launch(double, const std::atomic<bool>* cancel) override {
    while (block_launches && !(cancel != nullptr && cancel->load())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const int n = ++launches_;
    if (fail_from > 0 && n >= fail_from) return Status(StatusCode::kUnavailable, "injected start failure");
    auto g = std::make_unique<FakeGroup>(step_ms_);
    g->fake.reject_resume = reject_resume.load();
    if (Status st = g->start(); !st.ok()) return st;
    {
      std::lock_guard<std::mutex> lock(mu_);
      groups_.push_back(g.get());
    }
    return std::unique_ptr<WorkerHandle>(new Proxy(std::move(g), this));
  }

  int launches() const { return launches_; }
  FakeGroup* group(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return i < groups_.size() ? groups_[i] : nullptr;
  }
  ~FakeLauncher() override {
    for (auto& g : keep_) g->kill();
  }

 private:
  // The supervisor owns the proxy; the group itself lives until the launcher goes.
  class Proxy final : public WorkerHandle {
   public:
    Proxy(std::unique_ptr<FakeGroup> g, FakeLauncher* owner) : g_(g.get()) {
      std::lock_guard<std::mutex> lock(owner->mu_);
      owner->keep_.push_back(std::move(g));
    }
    ~Proxy() override { g_->kill(); }
    int port() const override { return g_->port(); }
    std::vector<int64_t> pids() const override { return g_->pids(); }
    std::string exit_reason() override { return g_->exit_reason(); }
    void kill() override { g_->kill(); }

   private:
    FakeGroup* g_;
  };

  const int step_ms_;
  std::atomic<int> launches_{0};
  std::mutex mu_;
  std::vector<FakeGroup*> groups_;
  std::vector<std::unique_ptr<FakeGroup>> keep_;
};

}  // namespace moe::supervisor::testing
