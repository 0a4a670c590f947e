// `moe serve --supervise` and the worker group it starts (level 2 of docs/reliability.md).
//
// The front end (this process, never under mpirun) serves the OpenAI API with the usual
// HttpServer over a SupervisedService (src/moe/supervisor/); it loads no weights. The
// engine runs in a worker group: `mpirun <--mpirun-arg...> -np N moe serve
// --worker-endpoint DIR --supervisor-pid PID <the engine and scheduler flags given>`, or
// the one process for --ep 1. Its rank 0 serves the supervisor's internal endpoint
// (127.0.0.1, a free port written to DIR/endpoint.json) over the Scheduler; every rank
// exits when the supervisor is gone. When the group fails the supervisor kills it,
// starts another and resumes the requests in flight.
#include <algorithm>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <set>

#include "commands.h"
#include "moe/launch.h"
#include "moe/serve/serve_loop.h"
#include "moe/serve/signal_watcher.h"
#include "moe/supervisor/supervised_service.h"
#include "moe/supervisor/worker_endpoint.h"
#include "moe/supervisor/worker_protocol.h"
#include "serve_cmd.h"

namespace moe::cli {
namespace {

// Flags of the front end only: not passed to the worker group.
const std::set<std::string> kFrontEndFlags = {
    "host",           "port",          "api-key",          "served-model-name", "max-tokens-limit", "max-n",
    "max-body-bytes", "rate-limit-rps", "rate-limit-tpm",  "chat-template",     "shutdown-grace",
    "supervise",      "mpirun",         "mpirun-arg",       "recovery-timeout",
    "max-restarts",   "startup-timeout", "worker-endpoint", "supervisor-pid",    "help",
    "allowed-origins", "allowed-methods", "allowed-headers", "allowed-credentials",
    "header-timeout", "max-connections-per-client",
    "config"};  // --config: its values reach the workers as the flags they set

std::string self_exe() {
  char exe[PATH_MAX] = {0};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return n > 0 ? std::string(exe, static_cast<size_t>(n)) : "moe";
}

bool positive(double v) { return v > 0 && std::isfinite(v); }

// The serve flags given on the command line that the worker group needs (the engine and
// scheduler ones), as --name=value.
std::vector<std::string> worker_args(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    const std::vector<std::string>& names = opt->get_lnames();
    if (names.empty() || opt->count() == 0 || kFrontEndFlags.count(names[0]) > 0) continue;
    for (const std::string& value : opt->results()) out.push_back("--" + names[0] + "=" + value);
  }
  return out;
}

}  // namespace

void add_supervise_flags(CLI::App& app, ServeFlags* f) {
  app.add_flag("--supervise", f->supervise,
               "Run the engine in a worker group that is restarted after a failure (a dead or stuck rank, "
               "rank 0 included); requests in flight resume where they were. Run without mpirun");
  f->supervise_only.push_back(app.add_option("--mpirun", f->mpirun, "--supervise: the mpirun to start --ep N > 1 with")
                                  ->capture_default_str());
  f->supervise_only.push_back(
      app.add_option("--mpirun-arg", f->mpirun_args,
                     "--supervise: an argument for mpirun, e.g. --mpirun-arg=--oversubscribe (repeat for several)")
          ->allow_extra_args(false));
  f->supervise_only.push_back(
      app.add_option("--recovery-timeout", f->recovery_timeout,
                     "--supervise: seconds a request waits to be resumed after a failure before it ends with an error")
          ->capture_default_str());
  f->supervise_only.push_back(
      app.add_option("--max-restarts", f->max_restarts,
                     "--supervise: failed starts of a worker group in a row before the server gives up")
          ->capture_default_str());
  f->supervise_only.push_back(
      app.add_option("--startup-timeout", f->startup_timeout,
                     "--supervise: seconds a worker group may take to load the model and answer")
          ->capture_default_str());
  app.add_option("--worker-endpoint", f->worker_endpoint, "Internal: run as a supervised worker group")->group("");
  app.add_option("--supervisor-pid", f->supervisor_pid, "Internal: the supervisor a worker group exits without")
      ->group("");
}

std::string check_supervise_flags(const ServeFlags& f) {
  if ((f.supervise || !f.worker_endpoint.empty()) && !f.engine.options.trace_path.empty()) {
    return "--trace is not available with --supervise (the worker group may be restarted mid-run, which would cut the "
           "trace); run `moe serve --trace FILE` under mpirun without --supervise";
  }
  if (!f.supervise) {
    for (const CLI::Option* o : f.supervise_only) {
      if (o->count() > 0) return "--" + o->get_lnames()[0] + " needs --supervise";
    }
    if (f.worker_endpoint.empty() && f.supervisor_pid != 0) return "--supervisor-pid needs --worker-endpoint";
    return "";
  }
  if (launched_under_mpi()) {
    return "--supervise starts the worker group (under mpirun for --ep N) itself: run `moe serve --supervise --ep N "
           "...` without mpirun";
  }
  if (!f.worker_endpoint.empty()) return "--worker-endpoint is internal to --supervise; do not give both";
  if (f.mpirun.empty()) return "--mpirun must not be empty";
  if (f.engine.world_size() == 1 && !f.mpirun_args.empty()) {
    return "--mpirun-arg has no effect with --ep 1 (the worker group is one process, started without mpirun)";
  }
  if (!positive(f.recovery_timeout)) return "--recovery-timeout must be a positive number of seconds";
  if (!positive(f.startup_timeout)) return "--startup-timeout must be a positive number of seconds";
  if (f.max_restarts < 1) return "--max-restarts must be >= 1 (got " + std::to_string(f.max_restarts) + ")";
  return "";
}

int run_supervised_serve(const ServeFlags& f, const CLI::App& app) {
  if (std::string bad = check_serve_flags(f, /*check_engine=*/false); !bad.empty()) return fail(bad);
  if (f.engine.launch.ep < 1) return fail("--ep must be >= 1 (got " + std::to_string(f.engine.launch.ep) + ")");
  if (f.engine.launch.tp < 1) return fail("--tp must be >= 1 (got " + std::to_string(f.engine.launch.tp) + ")");
  if (!f.chat_template.empty()) {
    auto t = serve::ChatTemplate::select(f.chat_template, "", "");
    if (!t.ok()) return fail("--chat-template: " + t.status().message());
  }
  supervisor::WorkerGroupOptions wo;
  // The group is --tp x --ep ranks (--ep not given with --tp K: one TP group of K).
  const int ep = f.engine.world_size();
  if (ep > 1) {
    wo.command = {f.mpirun};
    // Gloo's failover needs mpirun to keep the job when one rank dies.
    if (f.engine.launch.comm_backend == "gloo" &&
        std::find(f.mpirun_args.begin(), f.mpirun_args.end(), "--enable-recovery") == f.mpirun_args.end()) {
      wo.command.push_back("--enable-recovery");
    }
    wo.command.insert(wo.command.end(), f.mpirun_args.begin(), f.mpirun_args.end());
    wo.command.insert(wo.command.end(), {"-np", std::to_string(ep)});
  }
  wo.command.push_back(self_exe());
  if (const CLI::App* root = app.get_parent(); root != nullptr) {
    const CLI::Option* level = root->get_option_no_throw("--log-level");
    if (level != nullptr && level->count() > 0) wo.command.insert(wo.command.end(), {"--log-level", level->results()[0]});
  }
  wo.command.push_back("serve");
  wo.args = worker_args(app);
  wo.num_ranks = ep;
  supervisor::ProcessLauncher launcher(wo);

  supervisor::SupervisorOptions so;
  const double liveness = f.effective_liveness_timeout();
  so.liveness_timeout_seconds = liveness;
  so.probe_interval_seconds = std::min(0.5, liveness / 4);
  so.recovery_timeout_seconds = f.recovery_timeout;
  so.max_restarts = f.max_restarts;
  so.startup_timeout_seconds = f.startup_timeout;
  so.control_timeout_seconds = std::min(5.0, liveness);
  auto started = supervisor::SupervisedService::start(launcher, so);
  if (!started.ok()) return fail("worker group: " + started.status().message());
  supervisor::SupervisedService& service = *started.value();

  const ModelInfo& info = service.model_info();
  if (f.max_tokens_limit > info.max_context) {
    return fail("--max-tokens-limit " + std::to_string(f.max_tokens_limit) + " exceeds the model's context of " +
                std::to_string(info.max_context) + " tokens");
  }
  auto chat_template = serve::ChatTemplate::select(f.chat_template, info.model_dir, info.model_type);
  if (!chat_template.ok()) {
    return fail((f.chat_template.empty() ? "chat template: " : "--chat-template: ") + chat_template.status().message());
  }
  const serve::ServerOptions o = server_options(f, chat_template.value());
  serve::HttpServer server(service, o);
  serve::ServeLoopOptions loop;
  loop.shutdown_grace_seconds = f.shutdown_grace;
  loop.on_started = [&](const serve::HttpServer& s) {
    std::fprintf(stderr, "serving %s on http://%s:%d (chat template: %s; supervised worker group of %d rank%s)\n",
                 s.served_model_name().c_str(), f.host.c_str(), s.port(), o.chat_template.name().c_str(), ep,
                 ep == 1 ? "" : "s");
    std::fflush(stderr);
  };
  const serve::ServeLoopResult result = serve::serve_until_shutdown(
      server, {[&] { return service.run(); }, [&](double grace) { service.shutdown(grace); }}, loop);
  if (!result.start.ok()) return fail("--host/--port: " + result.start.message());
  if (!result.run.ok()) return fail("supervisor: " + result.run.message());
  std::fprintf(stderr, "stopped\n");
  return 0;
}

int run_worker_endpoint(const ServeFlags& f) {
  if (std::string bad = check_serve_flags(f, /*check_engine=*/true); !bad.empty()) return fail(bad);
  // From the start (the model load may be long): no worker outlives its supervisor.
  supervisor::SupervisorWatch watch(static_cast<pid_t>(f.supervisor_pid));
  EngineFlags engine_flags = f.engine;
  if (engine_flags.launch.comm_backend == "gloo" && engine_flags.launch.gloo_store_dir.empty()) {
    // This launch's own directory, which the supervisor removes (even after a SIGKILL).
    engine_flags.launch.gloo_store_dir = f.worker_endpoint + "/gloo";
  }
  auto opened = launch_engine_from_flags(engine_flags, "serve");
  if (!opened.ok()) return fail(opened.status().message());
  Engine& engine = *opened.value().engine;
  const int rank = opened.value().rank;
  if (Status st = supervisor::publish_rank_pid(f.worker_endpoint, rank, ::getpid()); !st.ok()) {
    return fail("--worker-endpoint: " + st.message());
  }
  if (rank != 0) return run_serve_worker_rank(engine, rank);
  StopWorkersOnExit stop_workers{&engine};
  auto scheduler_or = Scheduler::create(&engine, scheduler_options(f));
  if (!scheduler_or.ok()) return fail(scheduler_or.status().message());
  Scheduler& scheduler = *scheduler_or.value();
  supervisor::WorkerEndpoint endpoint(scheduler);
  if (Status st = endpoint.start(); !st.ok()) return fail(st.message());
  serve::SignalWatcher signals([&] { scheduler.shutdown(0); }, [&] { scheduler.shutdown(0); });
  if (Status st = supervisor::publish_endpoint(f.worker_endpoint, endpoint.port(), ::getpid()); !st.ok()) {
    return fail("--worker-endpoint: " + st.message());
  }
  std::fprintf(stderr, "worker endpoint on 127.0.0.1:%d (rank 0, pid %d)\n", endpoint.port(),
               static_cast<int>(::getpid()));
  std::fflush(stderr);
  const Status run = scheduler.run();
  endpoint.stop();
  if (!run.ok()) return fail_rank(rank, run);
  return 0;
}

}  // namespace moe::cli
