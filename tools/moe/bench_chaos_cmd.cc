// moe bench chaos: the fault-injection harness of docs/reliability.md. It starts the server
// (`mpirun -np N moe serve --ep N`, or the supervised front end `moe serve --supervise
// --ep N`), sends a fixed workload (streamed and non-streamed, completions and chat,
// greedy and seeded), first once without a fault (the reference outputs), then once per
// trial with ONE fault at a random time: SIGKILL of a rank (or of the front end),
// SIGSTOP of a rank for --stop-seconds, or a corrupted expert shard followed by a kill
// (the reload must detect it). It reports per trial and in total: requests completed,
// lost and errored, outputs equal to the reference, hangs, recovery time, and whether
// every process went away. The pieces live in src/moe/serve_bench/chaos_*.
//
//   moe bench chaos --ep 2 --trials 5 --faults kill,stop --mpirun-arg --oversubscribe
//       --server-arg "--threads 1 --comm-timeout 5" --json chaos.json
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/core/atomic_file.h"
#include "moe/core/text_format.h"
#include "moe/serve_bench/chaos_report.h"
#include "moe/serve_bench/chaos_scratch.h"
#include "moe/serve_bench/chaos_trial.h"
#include "moe/serve_bench/chaos_workload.h"

namespace moe::cli {
namespace {

namespace sb = moe::serve_bench;
namespace fs = std::filesystem;

struct BenchChaosFlags {
  std::string model;
  int ep = 2;
  bool supervise = false;
  std::vector<std::string> server_args;
  std::vector<std::string> mpirun_args;
  int requests = 16;
  int max_tokens = 24;
  int concurrency = 4;
  int trials = 3;
  std::string faults = "kill,stop";
  int64_t seed = 0;
  double stop_seconds = 0;  // 0: the server's --comm-timeout + 2, else 62
  double hang_seconds = 30;
  double start_timeout = 120;
  double exit_grace = 10;
  bool spare_front_end = false;
  std::string json_path;
  std::string log_dir;
};

std::vector<std::string> split_words(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    std::istringstream in(v);
    std::string w;
    while (in >> w) out.push_back(w);
  }
  return out;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string self_exe() {
  char buf[4096] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("moe");
}

std::string join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    const bool plain = !a.empty() && a.find_first_of(" \t'\"\\$") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

// The comm timeout the server will run with: its --comm-timeout, else today's 60 s.
double server_comm_timeout(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (args[i] == "--comm-timeout" && i + 1 < args.size()) v = args[i + 1];
    if (args[i].rfind("--comm-timeout=", 0) == 0) v = args[i].substr(15);
    if (!v.empty()) return std::atof(v.c_str());
  }
  return 60;
}

std::vector<std::string> server_command(const BenchChaosFlags& f, const std::string& model,
                                        const std::vector<std::string>& server_args,
                                        const std::vector<std::string>& mpirun_args) {
  std::vector<std::string> cmd;
  if (!f.supervise) {
    cmd = {"mpirun"};
    if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
    cmd.insert(cmd.end(), mpirun_args.begin(), mpirun_args.end());
    cmd.insert(cmd.end(), {"-np", std::to_string(f.ep)});
  }
  cmd.insert(cmd.end(), {self_exe(), "--log-level", "info", "serve"});
  if (f.supervise) cmd.push_back("--supervise");
  cmd.insert(cmd.end(), {"--model", model, "--ep", std::to_string(f.ep), "--port", "0"});
  if (f.supervise) {
    if (geteuid() == 0) cmd.push_back("--mpirun-arg=--allow-run-as-root");
    for (const auto& a : mpirun_args) cmd.push_back("--mpirun-arg=" + a);
  }
  cmd.insert(cmd.end(), server_args.begin(), server_args.end());
  return cmd;
}

std::string check_flags(const BenchChaosFlags& f, const std::vector<std::string>& faults) {
  if (f.ep < 2 || f.ep > 4) return "--ep must be 2, 3 or 4, got " + std::to_string(f.ep);
  if (f.requests < 1) return "--requests must be >= 1, got " + std::to_string(f.requests);
  if (f.max_tokens < 1) return "--max-tokens must be >= 1, got " + std::to_string(f.max_tokens);
  if (f.concurrency < 1) return "--concurrency must be >= 1, got " + std::to_string(f.concurrency);
  if (f.trials < 0) return "--trials must be >= 0, got " + std::to_string(f.trials);
  if (faults.empty()) return "--faults: empty list (kill, stop, corrupt)";
  for (const auto& k : faults) {
    if (k != "kill" && k != "stop" && k != "corrupt") {
      return "--faults: unknown fault '" + k + "' (expected kill, stop or corrupt)";
    }
  }
  if (f.stop_seconds < 0) return "--stop-seconds must be > 0 (or 0: the server's --comm-timeout + 2 s)";
  if (!(f.hang_seconds > 0)) return "--hang-seconds must be > 0";
  if (!(f.start_timeout > 0)) return "--start-timeout must be > 0";
  if (f.exit_grace < 0) return "--exit-grace must be >= 0";
  if (!fs::is_directory(f.model)) return "--model: '" + f.model + "' is not a directory";
  const bool store = fs::exists(f.model + "/CURRENT");
  for (const auto& k : faults) {
    if (k == "corrupt" && !store) {
      return "--faults corrupt needs --model to be an expert store (moe ckpt convert; docs/checkpoint-store.md): '" +
             f.model + "' has no CURRENT file";
    }
  }
  return "";
}

int run_bench_chaos(BenchChaosFlags f) {
  const std::vector<std::string> faults = split_list(f.faults);
  if (std::string e = check_flags(f, faults); !e.empty()) return fail(e);
  const std::vector<std::string> server_args = split_words(f.server_args);
  const std::vector<std::string> mpirun_args = split_words(f.mpirun_args);
  const double stop_seconds = f.stop_seconds > 0 ? f.stop_seconds : server_comm_timeout(server_args) + 2;
  if (!f.log_dir.empty()) {
    std::error_code ec;
    fs::create_directories(f.log_dir, ec);
    if (ec) return fail("--log-dir: cannot create '" + f.log_dir + "': " + ec.message());
  }
  // Orphaned server processes (a killed mpirun's ranks) become our children, so that
  // every trial can find and end them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  // Corrupt trials damage (and repair) a copy of the store, never the original.
  std::string model = f.model;
  std::string store_copy;
  std::vector<std::string> shard_files;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } cleanup;
  if (std::find(faults.begin(), faults.end(), "corrupt") != faults.end()) {
    // A run killed by a signal cannot remove its copy: the next run does (chaos_scratch.h).
    const std::string root = std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp";
    for (const std::string& stale : sb::remove_stale_chaos_scratch(root)) {
      std::fprintf(stderr, "removed the store copy of an earlier run that ended without cleaning up: %s\n",
                   stale.c_str());
    }
    auto dir = sb::make_chaos_scratch_dir(root);
    if (!dir.ok()) return fail("the store copy: " + dir.status().message());
    store_copy = cleanup.dir = *dir;
    std::error_code ec;
    fs::copy(f.model, store_copy, fs::copy_options::recursive, ec);
    if (ec) return fail("cannot copy the store '" + f.model + "' to " + store_copy + ": " + ec.message());
    auto files = sb::expert_shard_files(store_copy);
    if (!files.ok()) return fail(files.status().message());
    shard_files = *files;
    model = store_copy;
  }

  sb::ChaosRunOptions o;
  o.server_command = server_command(f, model, server_args, mpirun_args);
  o.num_ranks = f.ep;
  o.supervised = f.supervise;
  o.concurrency = f.concurrency;
  o.hang_seconds = f.hang_seconds;
  o.stop_seconds = stop_seconds;
  o.start_timeout_seconds = f.start_timeout;
  o.exit_grace_seconds = f.exit_grace;
  const auto requests = sb::make_chaos_workload(f.requests, f.max_tokens, f.seed * 1000 + 1);
  auto log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  std::fprintf(stderr, "server: %s\n", join(o.server_command).c_str());
  std::fprintf(stderr, "workload: %d requests, %d in flight, max_tokens %d; faults %s x %d trials; stop %g s, hang %g s\n",
               f.requests, f.concurrency, f.max_tokens, f.faults.c_str(), f.trials, stop_seconds, f.hang_seconds);

  // The fault-free reference.
  if (!f.log_dir.empty()) o.log_path = f.log_dir + "/reference.log";
  sb::ChaosTrial ref = sb::run_chaos_trial(o, requests, sb::FaultPlan{}, 0, log);
  if (!ref.setup_error.empty()) return fail("the fault-free run: " + ref.setup_error);
  std::vector<std::string> reference;
  double ref_duration = 0;
  for (const auto& r : ref.results) {
    if (r.outcome != sb::Outcome::kCompleted) {
      return fail("the fault-free run: request " + std::to_string(&r - ref.results.data()) + " " +
                  sb::outcome_name(r.outcome) + ": " + r.detail);
    }
    reference.push_back(r.text);
    ref_duration = std::max(ref_duration, r.end_s);
  }
  std::fprintf(stderr, "reference: %d requests completed in %.2f s\n", f.requests, ref_duration);

  // The trials: per fault kind, --trials of them, each with its seeded time and target.
  std::mt19937_64 rng(static_cast<uint64_t>(f.seed));
  std::vector<sb::ChaosTrial> trials;
  for (const auto& kind : faults) {
    // The front end is a candidate of kill trials only (a stop or a corrupt shard is a
    // fault of the engine's ranks).
    const int targets = f.ep + (kind == "kill" && f.supervise && !f.spare_front_end ? 1 : 0);
    for (int k = 0; k < f.trials; ++k) {
      sb::FaultPlan plan;
      plan.kind = kind;
      plan.at_fraction = std::uniform_real_distribution<double>(0.1, 0.7)(rng);
      plan.target = std::uniform_int_distribution<int>(0, targets - 1)(rng);
      if (kind == "corrupt") {
        plan.corrupt_file = shard_files[std::uniform_int_distribution<size_t>(0, shard_files.size() - 1)(rng)];
        const auto size = static_cast<long>(fs::file_size(plan.corrupt_file));
        plan.corrupt_offset = std::uniform_int_distribution<long>(std::min<long>(48, size - 1), size - 1)(rng);
      }
      const int number = static_cast<int>(trials.size()) + 1;
      o.log_path = f.log_dir.empty() ? "" : f.log_dir + "/trial-" + std::to_string(number) + ".log";
      trials.push_back(sb::run_chaos_trial(o, requests, plan, number, log));
    }
  }

  // Children re-parented to this process (child subreaper) that ended after a trial's
  // last look: reap them, so that none is left as a zombie of init.
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::printf("%s", sb::render_chaos_table(trials, requests, reference).c_str());
  if (!f.json_path.empty()) {
    nlohmann::json j = sb::chaos_json(trials, requests, reference);
    j["config"] = {{"server_command", join(o.server_command)}, {"model", f.model},
                   {"ep", f.ep}, {"supervise", f.supervise},
                   {"requests", f.requests}, {"max_tokens", f.max_tokens},
                   {"concurrency", f.concurrency}, {"trials_per_fault", f.trials},
                   {"faults", faults}, {"seed", f.seed},
                   {"stop_seconds", stop_seconds}, {"hang_seconds", f.hang_seconds}};
    j["reference"] = {{"duration_s", ref_duration}, {"texts", reference}};
    Status s = write_file_atomically(f.json_path, j.dump(2) + "\n");
    if (!s.ok()) return fail("--json: " + s.message());
  }
  return 0;
}

}  // namespace

RunFn add_bench_chaos_command(CLI::App& app) {
  auto f = std::make_shared<BenchChaosFlags>();
  f->model = default_model_dir();
  app.add_option("--model", f->model, "Model directory or expert store the server loads")->capture_default_str();
  app.add_option("--ep", f->ep, "Expert-parallel ranks of the server (2 to 4)")->capture_default_str();
  app.add_flag("--supervise", f->supervise,
               "Test the supervised front end (`moe serve --supervise`) instead of `mpirun ... moe serve`");
  app.add_option("--server-arg", f->server_args,
                 "Extra `moe serve` flags, split at spaces (repeatable), e.g. --server-arg \"--threads 1\"");
  app.add_option("--mpirun-arg", f->mpirun_args,
                 "Extra mpirun flags, split at spaces (repeatable), e.g. --mpirun-arg --oversubscribe "
                 "(with --supervise: passed on as --mpirun-arg)");
  app.add_option("--requests", f->requests, "Requests in the workload (cycling endpoint, streaming, greedy/seeded)")
      ->capture_default_str();
  app.add_option("--max-tokens", f->max_tokens, "Tokens per request (ignore_eos)")->capture_default_str();
  app.add_option("--concurrency", f->concurrency, "Requests in flight at once")->capture_default_str();
  app.add_option("--trials", f->trials, "Trials per fault kind")->capture_default_str();
  app.add_option("--faults", f->faults,
                 "Fault kinds, comma-separated: kill (SIGKILL a rank or the front end), stop (SIGSTOP a rank for "
                 "--stop-seconds), corrupt (damage an expert shard of a store copy, then kill a rank)")
      ->capture_default_str();
  app.add_option("--seed", f->seed, "Seeds the fault times, targets and shards, and the seeded requests")
      ->capture_default_str();
  app.add_option("--stop-seconds", f->stop_seconds,
                 "SIGSTOP length; 0 = the server's --comm-timeout (from --server-arg, else 60) + 2 s")
      ->capture_default_str();
  app.add_option("--hang-seconds", f->hang_seconds,
                 "No progress this long with requests outstanding is a hang (the trial is ended)")
      ->capture_default_str();
  app.add_option("--start-timeout", f->start_timeout, "Seconds the server gets to print its serving line")
      ->capture_default_str();
  app.add_option("--exit-grace", f->exit_grace,
                 "Seconds a server that ended gets for all its processes to exit (else: stragglers)")
      ->capture_default_str();
  app.add_flag("--spare-front-end", f->spare_front_end, "With --supervise: never kill the front end itself");
  app.add_option("--json", f->json_path, "Write the figures (per trial, per request, totals) as JSON");
  app.add_option("--log-dir", f->log_dir, "Keep each server's output there (reference.log, trial-N.log)");
  return [f] { return run_bench_chaos(*f); };
}

}  // namespace moe::cli
