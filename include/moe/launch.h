// Process start-up for a command that may run under mpirun (`moe generate`, `moe serve`,
// the benchmarks): MPI for the life of the process, the expert-parallel group, and
// opening the Engine on it.
//
//   int main(int argc, char** argv) {
//     auto mpi = moe::MpiSession::start(&argc, &argv);   // no-op without mpirun
//     ...
//     moe::EpLaunchOptions launch{.ep = 2, .command = "generate"};
//     auto opened = moe::launch_engine(options, launch);  // collective under mpirun
//     if (opened.value().rank != 0) return opened.value().engine->run_worker().ok() ? 0 : 1;
//
// Threading: MPI runs at MPI_THREAD_FUNNELED, so start the session, launch the engine
// and destroy both on the main thread.
#pragma once

#include <memory>
#include <string>

#include "moe/engine.h"
#include "moe/engine_options.h"
#include "moe/status.h"

namespace moe {

class Communicator;  // src/moe/comm/communicator.h

// True when an MPI launcher (mpirun) started this process (OMPI_COMM_WORLD_SIZE or
// PMI_SIZE set in the environment). Thread-safe; needs no MpiSession.
bool launched_under_mpi();

// True when `backend` (EpLaunchOptions::comm_backend) uses MPI, so that the command
// needs an MpiSession under mpirun ("gloo" does not initialise MPI at all).
inline bool backend_uses_mpi(const std::string& backend) { return backend != "gloo"; }

// Why this build cannot run `backend` (EpLaunchOptions::comm_backend), naming the build
// option: "gloo" in a build configured with -DMOE_WITH_GLOO=OFF. "" when it can (and for
// names it does not know: open_ep_group refuses those). Thread-safe.
std::string comm_backend_unbuilt_reason(const std::string& backend);

// Deadlines (seconds, > 0) of the MPI calls that have none of their own. Past one the
// process prints "<call> did not return within S s; exiting" and ends with _exit(1), so
// no rank stays blocked: MPI_Init_thread waits for every rank to start (a rank stopped
// or dead at start-up), MPI_Finalize for every rank to finalise (a dead peer).
// (mpi_abort() bounds MPI_Abort the same way, at 10 s.)
struct MpiDeadlines {
  double init_seconds = 60;
  double finalize_seconds = 10;
};

// MPI for the lifetime of a command: start() initialises MPI when the process was
// launched under mpirun (MPI_ERRORS_RETURN on the world communicator); the destructor
// finalises it. Without mpirun both do nothing. Move-only; destroy it after every
// communicator and engine that uses MPI. Errors from finalising are ignored. Both
// calls run under `deadlines` (above).
class MpiSession {
 public:
  // Internal (or FailedPrecondition if MPI was already finalised) when MPI cannot be
  // initialised; the message names MPI_Init_thread.
  static StatusOr<MpiSession> start(int* argc, char*** argv, const MpiDeadlines& deadlines = {});
  // An inactive session (MPI not initialised), for a backend that does not use MPI
  // (backend_uses_mpi) even under mpirun.
  static MpiSession start_without_mpi() { return MpiSession(false, 10); }
  MpiSession(MpiSession&& other) noexcept;
  MpiSession& operator=(MpiSession&& other) noexcept;
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession();

  // True when MPI was initialised by this session (launched under mpirun).
  bool active() const { return active_; }

 private:
  MpiSession(bool active, double finalize_seconds) : active_(active), finalize_seconds_(finalize_seconds) {}
  void finalize();
  bool active_ = false;
  double finalize_seconds_ = 10;
};

// How a command joins its expert-parallel (EP) group.
struct EpLaunchOptions {
  // Expert-parallel ranks (`--ep`): 1 = one process. Under mpirun it must equal the
  // number of ranks mpirun started; > 1 needs mpirun. Must be >= 1.
  int ep = 1;
  // Tensor-parallel ranks per TP group (`--tp`): the world is tp * ep ranks (mpirun -np
  // tp * ep); with ep 0 the EP size is mpirun's ranks / tp. Must be >= 1; > 1 needs mpirun.
  int tp = 1;
  // Emulated nodes of K consecutive ranks for the hierarchical exchange (`--ranks-per-
  // node`); 0 = real nodes from MPI. Must be >= 0.
  int ranks_per_node = 0;
  // The subcommand ("generate", "serve"), named in the hint to run under mpirun.
  std::string command = "generate";
  // Deadline of every communication between the EP ranks (`--comm-timeout`, seconds):
  // a peer that has not answered by then is failed (DeadlineExceeded). Finite, > 0;
  // unused without EP. Rank 0 sends an idle heartbeat well within it (min(5, timeout/4)).
  double comm_timeout_seconds = 60;
  // Deadline of the start-up collectives (seconds; the longer of this and the comm
  // timeout): the ranks' load-time skew in Engine::open's agreement, and a worker's wait
  // for rank 0's first step header (rank 0 builds its scheduler and KV pool meanwhile).
  // Rank 0 switches to comm_timeout_seconds when Engine::open returns, each worker after
  // that first header. Finite, > 0. (`moe serve --supervise --startup-timeout` bounds a
  // whole group start from outside.)
  double startup_timeout_seconds = 600;
  // The EP group's transport (`--comm-backend`): "mpi" (Open MPI; a dead rank ends the
  // group) or "gloo" (Gloo over TCP; mpirun only starts the processes, which must run
  // under `mpirun --enable-recovery` so that one rank's death does not end the job: the
  // survivors re-form the group and fail over, docs/reliability.md).
  std::string comm_backend{"mpi"};
  // Gloo only (`--gloo-store`): the rendezvous directory every rank can reach (a shared
  // filesystem across machines); empty = /tmp/moe-gloo-<mpirun job id> (one machine).
  std::string gloo_store_dir{};
  // Gloo only (`--gloo-host`): the address this rank listens on for its peers (the
  // machine's own address when ranks span machines).
  std::string gloo_host{"127.0.0.1"};
};

// The Engine of this process and, under mpirun, the communicator it runs on. The
// engine is destroyed before the communicator. Move-only.
struct LaunchedEngine {
  LaunchedEngine();
  LaunchedEngine(LaunchedEngine&&) noexcept;
  LaunchedEngine& operator=(LaunchedEngine&&) noexcept;
  ~LaunchedEngine();

  std::unique_ptr<Communicator> comm;  // null for one process (not under mpirun)
  std::unique_ptr<Engine> engine;      // never null after a successful launch_engine()
  int rank = 0;       // this process's world rank; rank 0 generates, the others run_worker()
  int num_ranks = 1;  // world ranks, tp * ep (1 for one process)
  // --comm-backend gloo with the default rendezvous directory: rank 0 removes it when
  // the engine and communicator are gone (empty otherwise).
  std::string owned_rendezvous_dir;
};

// Opens options' Engine on the EP group that `launch` describes. Under mpirun (or with
// ep > 1) it creates the MPI communicator over all ranks and sets options.comm to it;
// it is then collective: every rank must call it. Needs an active MpiSession under
// mpirun. Errors (InvalidArgument unless noted):
//   - ep < 0 (0 only with tp > 1), tp < 1, ranks_per_node < 0 or comm_timeout_seconds
//     not finite > 0: the message names --ep / --tp / --ranks-per-node / --comm-timeout;
//   - ep > 1 without mpirun: "--ep N needs N processes: run it as mpirun -np N moe
//     <command> --ep N ..." (tp > 1 likewise, naming --tp K --ep M and np K * M);
//   - mpirun started a different number of ranks than ep (tp * ep): "--ep N but mpirun
//     started M ranks; they must match" ("--tp K x --ep N = ..." with tp > 1);
//   - tp > 1 with --comm-backend gloo (failover cannot re-form TP groups);
//   - the communicator's errors (e.g. DeadlineExceeded when a rank does not join);
//   - Engine::open's errors, prefixed "rank R: " under mpirun.
// options.comm must be null on entry (the launch provides the communicator).
StatusOr<LaunchedEngine> launch_engine(EngineOptions options, const EpLaunchOptions& launch);

}  // namespace moe
