#include "moe/serve_bench/chaos_trial.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "moe/core/text_format.h"
#include "moe/serve_bench/chaos_process.h"

namespace moe::serve_bench {

using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kProc = "/proc";

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// GET `path` with short timeouts: the status (0: no answer) and body.
std::pair<int, std::string> http_get(const std::string& origin, const std::string& path, double timeout_s) {
  try {
    httplib::Client cli(origin);
    const auto whole = static_cast<time_t>(timeout_s);
    const auto usec = static_cast<time_t>((timeout_s - static_cast<double>(whole)) * 1e6);
    cli.set_connection_timeout(whole, usec);
    cli.set_read_timeout(whole, usec);
    auto res = cli.Get(path.c_str());
    if (!res) return {0, ""};
    return {res->status, res->body};
  } catch (const std::exception&) {
    return {0, ""};
  }
}

// Every process this harness started and has seen: pid -> the process (so that a
// reused pid is not mistaken for it).
class ProcessTracker {
 public:
  explicit ProcessTracker(pid_t server) : server_(server) {}
  void scan() {
    const std::vector<ProcInfo> procs = list_processes(kProc);
    std::lock_guard<std::mutex> lock(mu_);
    // Our own descendants (with the child-subreaper flag, orphans stay ours), and
    // anything left in the server's process group.
    for (const ProcInfo& p : descendants_of(procs, getpid())) seen_[p.pid] = p;
    for (const ProcInfo& p : procs) {
      if (p.pgid == server_) seen_[p.pid] = p;
    }
  }
  std::vector<ProcInfo> running() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ProcInfo> out;
    for (const auto& [pid, p] : seen_) {
      if (still_running(kProc, p)) out.push_back(p);
    }
    return out;
  }

 private:
  pid_t server_;
  mutable std::mutex mu_;
  std::map<pid_t, ProcInfo> seen_;
};

// Reaps children that were re-parented to this process (child subreaper), without
// blocking; never the server process itself (ChildProcess reaps it).
void reap_orphans(pid_t server) {
  for (const ProcInfo& p : descendants_of(list_processes(kProc), getpid())) {
    if (p.ppid == getpid() && p.pid != server && p.state == 'Z') waitpid(p.pid, nullptr, WNOHANG);
  }
}

struct Health {
  std::mutex mu;
  std::vector<std::pair<double, bool>> samples;  // (t, ok)
};

}  // namespace

StatusOr<std::vector<std::string>> expert_shard_files(const std::string& store_dir) {
  std::ifstream cur(store_dir + "/CURRENT");
  std::string manifest_name;
  if (!cur || !std::getline(cur, manifest_name) || manifest_name.empty()) {
    return not_found(store_dir + "/CURRENT: not readable (is --model an expert store? see moe ckpt convert)");
  }
  const std::string path = store_dir + "/" + manifest_name;
  std::ifstream in(path);
  if (!in) return not_found(path + ": not readable");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("shards") || !j["shards"].is_array()) return data_loss(path + ": no shard list");
  std::vector<std::string> out;
  for (const auto& s : j["shards"]) {
    if (!s.is_object() || s.value("kind", "") != "expert" || !s.contains("hash") || !s["hash"].is_string()) continue;
    const std::string hex = s["hash"].get<std::string>();
    if (hex.size() < 3) continue;
    out.push_back(store_dir + "/shards/" + hex.substr(0, 2) + "/" + hex + ".shard");
  }
  if (out.empty()) return data_loss(path + ": no expert shard");
  return out;
}

Status flip_byte(const std::string& path, long offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) return not_found(path + ": cannot open for writing");
  f.seekg(offset);
  char c = 0;
  if (!f.get(c)) return invalid_argument(path + ": no byte at offset " + std::to_string(offset));
  c = static_cast<char>(c ^ 0xFF);
  f.seekp(offset);
  f.put(c);
  f.flush();
  if (!f) return internal_error(path + ": cannot write byte " + std::to_string(offset));
  return Status();
}

ChaosTrial run_chaos_trial(const ChaosRunOptions& o, const std::vector<ChaosRequest>& requests, const FaultPlan& plan,
                           int trial_number, const ChaosLogFn& log) {
  ChaosTrial trial;
  trial.trial = trial_number;
  trial.fault = plan.kind;
  auto say = [&](const std::string& s) {
    if (log) log((trial_number > 0 ? "trial " + std::to_string(trial_number) : std::string("reference")) + ": " + s);
  };
  auto spawned = ChildProcess::spawn(o.server_command, o.log_path);
  if (!spawned.ok()) {
    trial.setup_error = spawned.status().message();
    return trial;
  }
  std::unique_ptr<ChildProcess> server = std::move(*spawned);
  ProcessTracker tracker(server->pid());
  const Clock::time_point t_start = Clock::now();
  int port = 0;
  while (port == 0 && since(t_start) < o.start_timeout_seconds && !server->exited()) {
    port = find_serving_port(server->output());
    tracker.scan();
    if (port == 0) sleep_s(0.05);
  }
  const std::string origin = "http://127.0.0.1:" + std::to_string(port);
  std::string model = "default";
  bool healthy = false;
  if (port != 0) {
    // Ready when /health answers 200 (bounded by the start-up timeout).
    while (!(healthy = http_get(origin, "/health", 2).first == 200) && since(t_start) < o.start_timeout_seconds &&
           !server->exited()) {
      sleep_s(0.05);
    }
    auto [status, body] = http_get(origin, "/v1/models", 5);
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (status == 200 && j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
      model = j["data"][0]["id"].get<std::string>();
    }
  }
  if (!healthy) {
    int status = 0;
    const bool ended = server->exited(&status);
    if (ended) server->wait_output_end(2);  // all it wrote (the reader may lag the exit)
    std::string out = server->output();
    if (out.size() > 2000) out = "..." + out.substr(out.size() - 2000);
    const std::string why = ended     ? "the server ended (" + describe_wait_status(status) + ")"
                            : port == 0 ? "no \"serving ... on http://HOST:PORT\" line within " +
                                              format_g(o.start_timeout_seconds) + " s"
                                        : "/health did not answer 200 within " + format_g(o.start_timeout_seconds) + " s";
    trial.setup_error = why + " before serving; its output:\n" + out;
    tracker.scan();
    server->kill_all(tracker.running());
    return trial;
  }
  say("serving on " + origin + " (pid " + std::to_string(server->pid()) + ", started in " +
      format_fixed(since(t_start), 1) + " s)");

  // The workload: `concurrency` workers take the next request until none is left.
  const int n = static_cast<int>(requests.size());
  trial.results.assign(requests.size(), ChaosResult{});
  std::atomic<int> next{0}, finished{0}, started{0};
  std::atomic<bool> abort{false};
  const Clock::time_point t0 = Clock::now();
  ChaosProgress progress;
  progress.last_byte_ns.store(t0.time_since_epoch().count());
  int64_t total_tokens = 0;
  for (const ChaosRequest& r : requests) total_tokens += r.stream ? r.max_tokens : 0;
  const double read_timeout = o.hang_seconds + 5;
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, o.concurrency); ++w) {
    workers.emplace_back([&] {
      for (;;) {
        const int i = next.fetch_add(1);
        if (i >= n) return;
        ChaosResult& r = trial.results[static_cast<size_t>(i)];
        if (abort.load()) {
          r.detail = "not sent: the trial was aborted after a hang";
        } else {
          started.fetch_add(1);
          r = send_chaos_request(origin, requests[static_cast<size_t>(i)], model, read_timeout, t0, &progress);
        }
        finished.fetch_add(1);
      }
    });
  }
  Health health;
  std::atomic<bool> health_stop{false};
  std::thread health_thread([&] {
    while (!health_stop.load()) {
      const bool ok = http_get(origin, "/health", 1).first == 200;
      {
        std::lock_guard<std::mutex> lock(health.mu);
        health.samples.emplace_back(since(t0), ok);
      }
      sleep_s(0.1);
    }
  });

  // Monitor: inject the fault, resume a stopped rank, watch for a hang.
  bool injected = false, resumed = false;
  pid_t target_pid = -1;
  double last_report = 0;
  double last_scan = -1;
  while (finished.load() < n) {
    const double now = since(t0);
    if (now - last_scan >= 0.1) {
      tracker.scan();
      last_scan = now;
    }
    const bool due = total_tokens > 0 ? static_cast<double>(progress.delivered_tokens.load()) >=
                                            plan.at_fraction * static_cast<double>(total_tokens)
                                      : finished.load() >= plan.at_fraction * n;
    if (!injected && plan.kind != "none" && due) {
      injected = true;
      trial.fault_at_s = now;
      if (plan.target >= o.num_ranks) {
        target_pid = server->pid();
        trial.target = "front end";
        trial.front_end = true;
      } else {
        const auto ranks = find_rank_pids(kProc, server->pid());
        auto it = ranks.find(plan.target);
        if (it != ranks.end()) target_pid = it->second;
        trial.target = "rank " + std::to_string(plan.target);
      }
      if (target_pid <= 0) {
        say("no process of rank " + std::to_string(plan.target) + " found: nothing injected");
        trial.target.clear();
      } else if (plan.kind == "stop") {
        ::kill(target_pid, SIGSTOP);
      } else {
        if (plan.kind == "corrupt") {
          Status s = flip_byte(plan.corrupt_file, plan.corrupt_offset);
          trial.corrupt_shard = plan.corrupt_file;
          if (!s.ok()) say("cannot corrupt: " + s.message());
        }
        ::kill(target_pid, SIGKILL);
      }
      const std::string what = plan.kind == "corrupt" ? "corrupt " + plan.corrupt_file + " (byte " +
                                                            std::to_string(plan.corrupt_offset) + "), then kill"
                                                      : plan.kind;
      say(what + " " + (trial.target.empty() ? "nothing" : trial.target + " (pid " + std::to_string(target_pid) + ")") +
          " at " + format_fixed(now, 2) + " s");
    }
    if (injected && plan.kind == "stop" && !resumed && target_pid > 0 && now >= trial.fault_at_s + o.stop_seconds) {
      ::kill(target_pid, SIGCONT);
      resumed = true;
      say("SIGCONT to " + trial.target + " at " + format_fixed(now, 2) + " s");
    }
    const double silent =
        std::chrono::duration<double>(Clock::now().time_since_epoch() -
                                      Clock::duration(progress.last_byte_ns.load()))
            .count();
    if (!trial.hang && started.load() > finished.load() && silent > o.hang_seconds) {
      trial.hang = true;
      trial.hang_at_s = now;
      abort.store(true);
      say("HANG: no progress for " + format_fixed(silent, 1) + " s with " +
          std::to_string(started.load() - finished.load()) + " requests outstanding; killing the server");
      server->kill_all(tracker.running());
    }
    if (now - last_report >= 2.0) {
      last_report = now;
      say(std::to_string(finished.load()) + "/" + std::to_string(n) + " requests done at " + format_fixed(now, 1) +
          " s");
    }
    sleep_s(0.01);
  }
  for (auto& w : workers) w.join();
  if (injected && plan.kind == "stop" && !resumed && target_pid > 0) ::kill(target_pid, SIGCONT);

  // Recovery: serving again after the fault. Not when the server's main process is gone
  // (nothing serves any more). Else from the results (recovery_from_results); else
  // /health going down and then ok again.
  if (injected && !trial.target.empty() && !server->exited()) {
    trial.recovery_s = recovery_from_results(trial.results, trial.fault_at_s, o.min_outage_seconds);
    const double until = since(t0) + o.hang_seconds;
    while (!trial.recovery_s && !trial.hang && !server->exited() && since(t0) < until) {
      {
        std::lock_guard<std::mutex> lock(health.mu);
        bool down = false;
        for (const auto& [t, ok] : health.samples) {
          if (t < trial.fault_at_s) continue;
          if (!ok) down = true;
          if (ok && down) {
            trial.recovery_s = t - trial.fault_at_s;
            break;
          }
        }
      }
      if (!trial.recovery_s) sleep_s(0.1);
    }
  }
  health_stop.store(true);
  health_thread.join();

  // The server's fault counters, while it still runs.
  if (!server->exited()) {
    auto [status, body] = http_get(origin, "/metrics", 2);
    if (status == 200) trial.fault_metrics = parse_fault_metrics(body);
  }
  tracker.scan();
  int status = 0;
  if (server->exited(&status)) {
    trial.server_end = trial.hang ? "killed (hang)" : describe_wait_status(status);
    // A server that ended by itself: do its processes end too?
    const Clock::time_point grace = Clock::now();
    while (!tracker.running().empty() && since(grace) < o.exit_grace_seconds) {
      reap_orphans(server->pid());
      sleep_s(0.05);
    }
    trial.stragglers = static_cast<int>(tracker.running().size());
  } else {
    trial.server_end = "running";
  }
  if (plan.kind == "corrupt" && !trial.corrupt_shard.empty()) {
    const std::string base = trial.corrupt_shard.substr(trial.corrupt_shard.rfind('/') + 1);
    trial.corrupt_reported = server->output().find(base.substr(0, 16)) != std::string::npos;
  }
  // End everything, then check that it is gone.
  tracker.scan();
  server->kill_all(tracker.running());
  const Clock::time_point kill_t = Clock::now();
  // SIGKILL is not instant: a rank holding a large model frees its memory as it exits,
  // which took over 5 s on a loaded 2-core machine (the 579M model under load 20).
  while (!tracker.running().empty() && since(kill_t) < 30) {
    for (const ProcInfo& p : tracker.running()) ::kill(p.pid, SIGKILL);
    reap_orphans(server->pid());
    sleep_s(0.02);
  }
  reap_orphans(server->pid());
  trial.leftover = static_cast<int>(tracker.running().size());
  if (plan.kind == "corrupt" && !trial.corrupt_shard.empty()) {
    Status s = flip_byte(plan.corrupt_file, plan.corrupt_offset);  // restore the store for the next trial
    if (!s.ok()) say("cannot restore the corrupted shard: " + s.message());
  }
  const ChaosCounts c = count_results(requests, trial.results, {});
  say("done: " + std::to_string(c.completed) + " completed, " + std::to_string(c.lost) + " lost, " +
      std::to_string(c.errored) + " errored; server " + trial.server_end +
      (trial.stragglers > 0 ? ", " + std::to_string(trial.stragglers) + " stragglers" : std::string()) +
      (trial.leftover > 0 ? ", " + std::to_string(trial.leftover) + " LEFT OVER" : std::string()));
  return trial;
}

}  // namespace moe::serve_bench
