#include "moe/supervisor/supervised_service.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "moe/core/logging.h"
#include "moe/supervisor/request_journal.h"
#include "moe/supervisor/worker_client.h"

namespace moe::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

bool is_bad_input(StatusCode c) {
  return c == StatusCode::kInvalidArgument || c == StatusCode::kFailedPrecondition || c == StatusCode::kOutOfRange;
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", s);
  return buf;
}

std::string format_pids(const std::vector<int64_t>& pids) {
  std::string s;
  for (size_t r = 0; r < pids.size(); ++r) {
    if (r > 0) s += ' ';
    s += std::to_string(pids[r]);
  }
  return s;
}

// submit() waiting for its request's reply line from the worker.
class ReplyWaiter {
 public:
  // Returns whether submit() was still waiting (it then handles a refusal itself).
  bool set(const StatusOr<uint64_t>& reply) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reply_) reply_ = reply;
    cv_.notify_all();
    return !abandoned_;
  }
  // The reply, or nullopt after `seconds` (then set() returns false from now on).
  std::optional<StatusOr<uint64_t>> wait(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, to_duration(seconds), [&] { return reply_.has_value(); });
    if (!reply_) abandoned_ = true;
    return reply_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<StatusOr<uint64_t>> reply_;
  bool abandoned_ = false;
};

}  // namespace

struct SupervisedService::State {
  enum class Mode { kServing, kRecovering, kFailed };

  State(WorkerLauncher& l, SupervisorOptions o) : launcher(l), options(o) {}

  WorkerLauncher& launcher;
  const SupervisorOptions options;
  ModelInfo info;
  RequestJournal journal;

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::unique_ptr<WorkerHandle> group;  // written by the monitor thread only (under mu)
  int port = 0;
  int generation = 1;
  Mode mode = Mode::kServing;
  std::string pending_failure;  // reported by an attempt, for the monitor
  std::string down_reason;      // while recovering or failed
  ServiceHealth worker_health;  // the last /health answer
  Clock::time_point last_answer = Clock::now();
  mutable ServiceSnapshot last_snapshot;
  int64_t worker_failures = 0, recoveries = 0, replayed = 0;
  std::vector<double> recovery_seconds;
  bool shutting_down = false, stopped = false;
  Clock::time_point abort_at{};
  std::atomic<bool> quit{false};

  struct Attempt {
    std::thread thread;
    std::shared_ptr<SubmitStream> stream;
    uint64_t id = 0;
    std::atomic<bool> done{false};
  };
  std::mutex attempts_mu;
  std::list<std::unique_ptr<Attempt>> attempts;
  std::thread monitor_thread, sweeper_thread;
  std::mutex seed_mu;
  std::mt19937_64 seeds{std::random_device{}()};

  void start_attempt(uint64_t id, const std::shared_ptr<ReplyWaiter>& waiter);
  void run_attempt(Attempt& self, uint64_t id, const RequestJournal::Attempt& a, int gen,
                   const std::shared_ptr<ReplyWaiter>& waiter);
  void report_failure(int gen, const std::string& reason);
  void abort_streams(std::optional<uint64_t> id);
  int serving_port() {  // the serving group's endpoint port; 0 while none serves (restarting)
    std::lock_guard<std::mutex> lock(mu);
    return mode == Mode::kServing ? port : 0;
  }
  void monitor();
  std::string probe();
  void recover(const std::string& reason);
  void give_up(const std::string& why);
  void sweeper();
  void join_attempts(bool all);
  void stop_all();
  void announce(const WorkerHandle& g, const char* what);
  template <typename F>
  auto with_worker(F call) const -> std::optional<decltype(call(std::declval<WorkerClient&>()))>;

  // Every token's bytes (token_bytes), fetched from the worker once.
  std::mutex vocab_mu;
  std::vector<std::string> vocab_bytes;
};

void SupervisedService::State::announce(const WorkerHandle& g, const char* what) {
  std::fprintf(stderr, "supervisor: worker group %s: rank pids %s (endpoint 127.0.0.1:%d)\n", what,
               format_pids(g.pids()).c_str(), g.port());
  std::fflush(stderr);
}

void SupervisedService::State::start_attempt(uint64_t id, const std::shared_ptr<ReplyWaiter>& waiter) {
  int gen = 0, worker_port = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (mode == Mode::kServing) {
      gen = generation;
      worker_port = port;
    }
  }
  if (worker_port == 0) {  // down: waits for the next group (or its deadline)
    journal.detach(id);
    journal.set_deadline(id, Clock::now() + to_duration(options.recovery_timeout_seconds));
    if (waiter) waiter->set(Status(StatusCode::kUnavailable, "the worker group is recovering"));
    return;
  }
  auto a = journal.begin_attempt(id);
  if (!a) {
    if (waiter) waiter->set(Status(StatusCode::kUnavailable, "finished"));
    return;
  }
  auto attempt = std::make_unique<Attempt>();
  attempt->stream = std::make_shared<SubmitStream>(worker_port, options.control_timeout_seconds);
  attempt->id = id;
  Attempt* self = attempt.get();
  std::lock_guard<std::mutex> lock(attempts_mu);
  attempts.push_back(std::move(attempt));
  self->thread = std::thread([this, self, id, a = std::move(*a), gen, waiter] {
    run_attempt(*self, id, a, gen, waiter);
    self->done = true;
  });
}

void SupervisedService::State::run_attempt(Attempt& self, uint64_t id, const RequestJournal::Attempt& a, int gen,
                                           const std::shared_ptr<ReplyWaiter>& waiter) {
  bool final_seen = false, refused_as_bad = false;
  std::string failure;
  const Status st = self.stream->run(
      a.request,
      [&](const StatusOr<uint64_t>& reply) {
        const bool taken = waiter != nullptr && waiter->set(reply);
        if (reply.ok()) {
          if (a.replay) {  // counted once a group takes it (not for a try at a dying group)
            std::lock_guard<std::mutex> lock(mu);
            ++replayed;
          }
          journal.clear_deadline(id);
          return journal.is_current(id, a.number);
        }
        if (is_bad_input(reply.status().code())) {
          refused_as_bad = true;
          // submit() returns the error itself when it still waits; otherwise (a replay, or
          // a request accepted while the group was down) the request ends here.
          if (!taken) journal.finish(id, "error", "the worker refused the request: " + reply.status().message());
        }
        return false;
      },
      [&](SeqEvent&& ev) {
        if (ev.finished && (ev.finish_reason == "error" || (ev.finish_reason == "abort" && !journal.cancelled(id)))) {
          failure = ev.finish_reason == "error" ? "the engine failed: " + ev.error
                                                : "the worker aborted request " + std::to_string(id) + " on its own";
          return false;
        }
        const bool finished = ev.finished;
        if (!journal.deliver(id, a.number, std::move(ev))) return false;  // stale, or finished
        final_seen = finished;
        return true;
      });
  if (final_seen || refused_as_bad) return;
  // Not finished on this group: it waits for a new attempt (the sweeper starts one once a
  // group serves), and the group is suspect. Unless a newer attempt has begun meanwhile.
  if (!journal.detach(id, a.number)) return;
  journal.set_deadline(id, Clock::now() + to_duration(options.recovery_timeout_seconds));
  report_failure(gen, failure.empty() ? "request " + std::to_string(id) + ": " + st.message() : failure);
}

void SupervisedService::State::report_failure(int gen, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu);
  if (gen != generation || mode != Mode::kServing || !pending_failure.empty()) return;
  pending_failure = reason;
  cv.notify_all();
}

void SupervisedService::State::abort_streams(std::optional<uint64_t> id) {
  std::lock_guard<std::mutex> lock(attempts_mu);
  for (auto& a : attempts) {
    if (!a->done && (!id || a->id == *id)) a->stream->abort();
  }
}

void SupervisedService::State::monitor() {
  while (!quit) {
    std::string reason;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, to_duration(options.probe_interval_seconds),
                  [&] { return quit.load() || !pending_failure.empty(); });
      if (quit) break;
      if (mode != Mode::kServing) continue;
      reason = std::exchange(pending_failure, "");
    }
    if (reason.empty()) reason = probe();
    if (!reason.empty()) recover(reason);
  }
}

std::string SupervisedService::State::probe() {
  // Only this thread replaces `group`: reading it without the lock is safe here.
  const std::string exited = group->exit_reason();
  if (!exited.empty()) return "its process " + exited;
  WorkerClient client(port, std::min(options.control_timeout_seconds, options.liveness_timeout_seconds));
  auto h = client.health();
  std::lock_guard<std::mutex> lock(mu);
  if (h.ok()) {
    last_answer = Clock::now();
    worker_health = h.value();
    if (worker_health.state == "stalled" || worker_health.state == "failed") {
      return "its /health says " + worker_health.state + " (" + worker_health.detail + ")";
    }
    return "";
  }
  const double silent = seconds_since(last_answer);
  if (silent >= options.liveness_timeout_seconds) {
    return "no answer to /health for " + format_seconds(silent) + " s (" + h.status().message() + ")";
  }
  return "";
}

void SupervisedService::State::recover(const std::string& reason) {
  const Clock::time_point t0 = Clock::now();
  std::unique_ptr<WorkerHandle> old;
  {
    std::lock_guard<std::mutex> lock(mu);
    mode = Mode::kRecovering;
    down_reason = "the worker group failed: " + reason;
    ++worker_failures;
    ++generation;
    old = std::move(group);
    port = 0;
    worker_health = ServiceHealth{};
    cv.notify_all();
  }
  MOE_LOG_WARN("supervisor: the worker group failed ({}); killing it and starting a new one", reason);
  const Clock::time_point deadline = t0 + to_duration(options.recovery_timeout_seconds);
  for (uint64_t id : journal.unfinished()) {
    journal.detach(id);
    journal.set_deadline(id, deadline);
  }
  abort_streams(std::nullopt);
  if (old) old->kill();
  old.reset();
  for (int failures = 1; !quit; ++failures) {
    auto g = launcher.launch(options.startup_timeout_seconds, &quit);
    if (g.ok()) {
      const size_t pending = journal.size();
      {
        std::lock_guard<std::mutex> lock(mu);
        group = std::move(g).value();
        port = group->port();
        mode = Mode::kServing;
        ++recoveries;
        recovery_seconds.push_back(seconds_since(t0));
        last_answer = Clock::now();
        down_reason.clear();
        pending_failure.clear();
        cv.notify_all();
      }
      MOE_LOG_WARN("supervisor: recovered in {} s; resuming {} requests", format_seconds(seconds_since(t0)), pending);
      announce(*group, "restarted");
      return;
    }
    MOE_LOG_ERROR("supervisor: starting a new worker group failed ({} of {}): {}", failures, options.max_restarts,
                  g.status().message());
    if (failures >= options.max_restarts) {
      give_up("the worker group failed (" + reason + ") and could not be restarted (" +
              std::to_string(failures) + " tries; the last: " + g.status().message() + ")");
      return;
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, to_duration(std::min(2.0, 0.2 * failures)), [&] { return quit.load(); });
  }
}

void SupervisedService::State::give_up(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu);
    mode = Mode::kFailed;
    down_reason = why;
    cv.notify_all();
  }
  MOE_LOG_ERROR("supervisor: giving up: {}", why);
  for (uint64_t id : journal.unfinished()) journal.finish(id, "error", why);
}

void SupervisedService::State::sweeper() {
  while (!quit) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return quit.load(); });
      if (quit) break;
    }
    const Clock::time_point now = Clock::now();
    std::string why;
    bool serving = false, abort_now = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      why = down_reason.empty() ? "the worker group failed" : down_reason;
      serving = mode == Mode::kServing;
      abort_now = shutting_down && now >= abort_at;
    }
    for (uint64_t id : journal.overdue(now)) {
      journal.finish(id, "error",
                     why + "; the request could not be resumed within " +
                         format_seconds(options.recovery_timeout_seconds) + " s");
      abort_streams(id);
    }
    if (abort_now) {
      for (uint64_t id : journal.unfinished()) {
        journal.finish(id, "abort", "");
        abort_streams(id);
      }
    } else if (serving) {
      for (uint64_t id : journal.unattached()) start_attempt(id, nullptr);
    }
    join_attempts(false);
    cv.notify_all();  // run() re-checks
  }
}

void SupervisedService::State::join_attempts(bool all) {
  std::list<std::unique_ptr<Attempt>> ended;
  {
    std::lock_guard<std::mutex> lock(attempts_mu);
    for (auto it = attempts.begin(); it != attempts.end();) {
      if (all || (*it)->done) {
        ended.push_back(std::move(*it));
        it = attempts.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& a : ended) {
    if (a->thread.joinable()) a->thread.join();
  }
}

void SupervisedService::State::stop_all() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped) return;
    stopped = true;
    quit = true;
    cv.notify_all();
  }
  if (monitor_thread.joinable()) monitor_thread.join();
  if (sweeper_thread.joinable()) sweeper_thread.join();
  for (uint64_t id : journal.unfinished()) journal.finish(id, "abort", "");
  abort_streams(std::nullopt);
  std::unique_ptr<WorkerHandle> g;
  {
    std::lock_guard<std::mutex> lock(mu);
    g = std::move(group);
    port = 0;
  }
  if (g) g->kill();
  join_attempts(true);
}

SupervisedService::SupervisedService(std::unique_ptr<State> state) : state_(std::move(state)) {}

SupervisedService::~SupervisedService() { state_->stop_all(); }

StatusOr<std::unique_ptr<SupervisedService>> SupervisedService::start(WorkerLauncher& launcher,
                                                                        SupervisorOptions o) {
  if (!(o.liveness_timeout_seconds > 0)) return invalid_argument("liveness timeout must be > 0 seconds");
  if (!(o.probe_interval_seconds > 0)) return invalid_argument("probe interval must be > 0 seconds");
  if (!(o.recovery_timeout_seconds > 0)) return invalid_argument("recovery timeout must be > 0 seconds");
  if (!(o.startup_timeout_seconds > 0)) return invalid_argument("start-up timeout must be > 0 seconds");
  if (!(o.control_timeout_seconds > 0)) return invalid_argument("control timeout must be > 0 seconds");
  if (o.max_restarts < 1) return invalid_argument("max restarts must be >= 1 (got " + std::to_string(o.max_restarts) + ")");
  auto state = std::make_unique<State>(launcher, o);
  MOE_ASSIGN_OR_RETURN(state->group, launcher.launch(o.startup_timeout_seconds, nullptr));
  state->port = state->group->port();
  auto info = WorkerClient(state->port, o.control_timeout_seconds).model_info();
  if (!info.ok()) return Status(info.status().code(), "the worker group's model info: " + info.status().message());
  state->info = std::move(info).value();
  state->announce(*state->group, "ready");
  State* s = state.get();
  state->monitor_thread = std::thread([s] { s->monitor(); });
  state->sweeper_thread = std::thread([s] { s->sweeper(); });
  return std::unique_ptr<SupervisedService>(new SupervisedService(std::move(state)));
}

Status SupervisedService::run() {
  State& s = *state_;
  Status result = ok_status();
  while (true) {
    const size_t left = s.journal.size();
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.mode == State::Mode::kFailed) {
      result = Status(StatusCode::kUnavailable, s.down_reason);
      break;
    }
    if (s.shutting_down && left == 0) break;
    s.cv.wait_for(lock, std::chrono::milliseconds(50));
  }
  s.stop_all();
  return result;
}

void SupervisedService::shutdown(double grace_seconds) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  const Clock::time_point at = Clock::now() + to_duration(std::max(0.0, grace_seconds));
  if (!s.shutting_down || at < s.abort_at) s.abort_at = at;
  s.shutting_down = true;
  s.cv.notify_all();
}

StatusOr<uint64_t> SupervisedService::submit(SeqRequest request, SeqSink sink) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.shutting_down || s.stopped) return Status(StatusCode::kUnavailable, "the server is shutting down");
    if (s.mode == State::Mode::kFailed) return Status(StatusCode::kUnavailable, s.down_reason);
  }
  if (request.sampling.temperature > 0 && !request.sampling.seed) {
    std::lock_guard<std::mutex> lock(s.seed_mu);
    request.sampling.seed = s.seeds();  // so that a replay samples the same tokens
  }
  const uint64_t id = s.journal.add(std::move(request), std::move(sink));
  auto waiter = std::make_shared<ReplyWaiter>();
  s.start_attempt(id, waiter);
  auto reply = waiter->wait(s.options.control_timeout_seconds);
  if (reply && !reply->ok() && is_bad_input(reply->status().code())) {
    s.journal.remove(id);
    return reply->status();
  }
  // Accepted by the worker, or kept for the next group (the worker is down, or did not
  // answer in time: the monitor decides whether it is dead).
  s.journal.open(id);
  return id;
}

void SupervisedService::cancel(uint64_t id) {
  State& s = *state_;
  if (!s.journal.mark_cancelled(id)) return;
  s.journal.finish(id, "abort", "");
  s.abort_streams(id);  // the worker cancels a request whose stream was cut
}

Status SupervisedService::reset_prefix_cache() {
  const int port = state_->serving_port();  // a restarting group's cache starts empty
  if (port == 0) return Status(StatusCode::kUnavailable, "the worker group is restarting");
  return WorkerClient(port, state_->options.control_timeout_seconds).reset_prefix_cache();
}

ServiceSnapshot SupervisedService::snapshot() const {
  State& s = *state_;
  const int port = s.serving_port();
  std::optional<ServiceSnapshot> fresh;
  if (port > 0) {
    auto w = WorkerClient(port, s.options.control_timeout_seconds).snapshot();
    if (w.ok()) fresh = std::move(w).value();
  }
  const int pending = static_cast<int>(s.journal.size());
  std::lock_guard<std::mutex> lock(s.mu);
  if (fresh) s.last_snapshot = std::move(*fresh);
  ServiceSnapshot out = s.last_snapshot;
  if (s.mode != State::Mode::kServing) {
    out.running = 0;
    out.waiting = pending;
  }
  out.worker_failures = s.worker_failures;
  out.recoveries = s.recoveries;
  out.replayed_requests = s.replayed;
  out.recovery_seconds = s.recovery_seconds;
  return out;
}

ServiceHealth SupervisedService::health() const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  ServiceHealth h;
  switch (s.mode) {
    case State::Mode::kServing:
      h = s.worker_health;
      if (s.group) h.worker_pids = s.group->pids();
      break;
    case State::Mode::kRecovering:
      h.state = "recovering";
      h.detail = s.down_reason;
      break;
    case State::Mode::kFailed:
      h.state = "failed";
      h.detail = s.down_reason;
      break;
  }
  return h;
}

const ModelInfo& SupervisedService::model_info() const { return state_->info; }

// Calls `call(client)` on the serving group; while it is down (or the call gets no
// answer) waits for it, up to the recovery timeout. nullopt when there was no answer.
template <typename F>
auto SupervisedService::State::with_worker(F call) const -> std::optional<decltype(call(std::declval<WorkerClient&>()))> {
  const Clock::time_point deadline = Clock::now() + to_duration(options.recovery_timeout_seconds);
  while (true) {
    int p = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (mode == Mode::kFailed || quit) break;
      if (mode == Mode::kServing) p = port;
    }
    if (p > 0) {
      WorkerClient client(p, options.control_timeout_seconds);
      auto r = call(client);
      if (r.ok() || is_bad_input(r.status().code()) || r.status().code() == StatusCode::kUnimplemented) return r;
    }
    if (Clock::now() >= deadline) break;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

int SupervisedService::count_tokens(const std::string& text) const {
  auto n = state_->with_worker([&](WorkerClient& c) { return c.count_tokens(text); });
  return n ? n->value() : 1 + static_cast<int>(text.size());
}

StatusOr<std::vector<int>> SupervisedService::tokenize(const std::string& text, bool add_special_tokens) const {
  auto ids = state_->with_worker([&](WorkerClient& c) { return c.tokenize(text, add_special_tokens); });
  if (!ids) return Status(StatusCode::kUnavailable, "tokenize: the worker group is not serving");
  return std::move(*ids);
}

StatusOr<std::string> SupervisedService::detokenize(const std::vector<int>& ids) const {
  auto text = state_->with_worker([&](WorkerClient& c) { return c.detokenize(ids); });
  if (!text) return Status(StatusCode::kUnavailable, "detokenize: the worker group is not serving");
  return std::move(*text);
}

std::string SupervisedService::token_bytes(int id) const {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.vocab_mu);
  if (s.vocab_bytes.empty()) {  // fetched once (the model is the same in every group)
    auto v = s.with_worker([](WorkerClient& c) { return c.vocab_bytes(); });
    if (v && v->ok()) s.vocab_bytes = std::move(*v).value();
  }
  return id >= 0 && static_cast<size_t>(id) < s.vocab_bytes.size() ? s.vocab_bytes[static_cast<size_t>(id)] : "";
}

}  // namespace moe::supervisor
