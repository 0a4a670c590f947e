// Process start-up under mpirun (include/moe/launch.h).
#include "moe/launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "moe/comm/communicator.h"
#include "moe/comm/gloo_communicator.h"

#ifndef MOE_WITH_GLOO
#error "MOE_WITH_GLOO must be defined (src/moe/engine/CMakeLists.txt)"
#endif
#include "moe/comm/mpi_communicator.h"
#include "moe/core/exit_deadline.h"

namespace moe {

StatusOr<MpiSession> MpiSession::start(int* argc, char*** argv, const MpiDeadlines& deadlines) {
  if (!(deadlines.init_seconds > 0) || !(deadlines.finalize_seconds > 0)) {
    return invalid_argument("MpiSession: the MPI_Init_thread and MPI_Finalize deadlines must be > 0");
  }
  if (!launched_under_mpi()) return MpiSession(false, deadlines.finalize_seconds);
  {
    ExitDeadline guard("MPI_Init_thread (waiting for every rank to start)", deadlines.init_seconds);
    MOE_RETURN_IF_ERROR(mpi_init(argc, argv));
  }
  return MpiSession(true, deadlines.finalize_seconds);
}

void MpiSession::finalize() {
  if (!std::exchange(active_, false)) return;
  ExitDeadline guard("MPI_Finalize (waiting for the other ranks)", finalize_seconds_);
  (void)mpi_finalize();
}

MpiSession::MpiSession(MpiSession&& other) noexcept
    : active_(std::exchange(other.active_, false)), finalize_seconds_(other.finalize_seconds_) {}

MpiSession& MpiSession::operator=(MpiSession&& other) noexcept {
  if (this != &other) {
    finalize();
    active_ = std::exchange(other.active_, false);
    finalize_seconds_ = other.finalize_seconds_;
  }
  return *this;
}

MpiSession::~MpiSession() { finalize(); }

LaunchedEngine::LaunchedEngine() = default;
LaunchedEngine::LaunchedEngine(LaunchedEngine&&) noexcept = default;
LaunchedEngine& LaunchedEngine::operator=(LaunchedEngine&&) noexcept = default;
LaunchedEngine::~LaunchedEngine() {
  engine.reset();  // before its communicator (members would go in the same order; said explicitly)
  comm.reset();
  if (!owned_rendezvous_dir.empty()) {
    std::error_code ec;  // best effort: a worker still reading it only fails to re-form, as it would anyway
    std::filesystem::remove_all(owned_rendezvous_dir, ec);
  }
}

namespace {

// An environment variable as an int; -1 if unset or not a number.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 && n <= 1 << 20 ? static_cast<int>(n) : -1;
}

}  // namespace

std::string comm_backend_unbuilt_reason(const std::string& backend) {
  if (backend == "gloo" && !MOE_WITH_GLOO) {
    return "--comm-backend gloo: this build has no Gloo (it was configured with -DMOE_WITH_GLOO=OFF); install "
           "libgloo-dev and rebuild with -DMOE_WITH_GLOO=ON, or use --comm-backend mpi";
  }
  return "";
}

namespace {

// /tmp/moe-gloo-<mpirun job id>, or "" when the environment has no job id.
std::string default_gloo_store_dir() {
  const char* job = std::getenv("OMPI_MCA_ess_base_jobid");
  if (job == nullptr) job = std::getenv("PMIX_NAMESPACE");
  return job == nullptr ? std::string() : std::string("/tmp/moe-gloo-") + job;
}

// The Gloo group of the ranks mpirun started (MPI itself is not initialised: mpirun
// only launches): rank and size from its environment, rendezvous in a directory.
StatusOr<std::unique_ptr<Communicator>> open_gloo_group(const EpLaunchOptions& launch) {
  int rank = env_int("OMPI_COMM_WORLD_RANK"), size = env_int("OMPI_COMM_WORLD_SIZE");
  if (rank < 0 || size < 1) rank = env_int("PMI_RANK"), size = env_int("PMI_SIZE");
  if (rank < 0 || size < 1 || rank >= size) {
    return invalid_argument("--comm-backend gloo: no rank and size from the launcher (OMPI_COMM_WORLD_RANK/SIZE or "
                            "PMI_RANK/SIZE): run it under mpirun --enable-recovery");
  }
  if (size != launch.ep) {
    return invalid_argument("--ep " + std::to_string(launch.ep) + " but mpirun started " + std::to_string(size) +
                            " ranks; they must match");
  }
  // mpirun only launched this process: with MPI uninitialised nothing would end it if
  // mpirun were killed (a stray group serving on forever), so it dies with its launcher.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return Status(StatusCode::kUnavailable, "--comm-backend gloo: the launcher (mpirun) is already gone");
  GlooOptions go;
  go.store_dir = launch.gloo_store_dir.empty() ? default_gloo_store_dir() : launch.gloo_store_dir;
  if (go.store_dir.empty()) {
    return invalid_argument("--comm-backend gloo: no mpirun job id in the environment to name the rendezvous "
                            "directory: give --gloo-store DIR");
  }
  go.hostname = launch.gloo_host;
#if !MOE_WITH_GLOO
  return Status(StatusCode::kFailedPrecondition, comm_backend_unbuilt_reason("gloo"));
#else
  go.ranks_per_node = launch.ranks_per_node;
  go.timeout_seconds = std::max(launch.comm_timeout_seconds, launch.startup_timeout_seconds);
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> comm, GlooCommunicator::create(rank, size, go));
  return std::unique_ptr<Communicator>(std::move(comm));
#endif
}

// "--ep N" or, under tensor parallelism, "--tp K x --ep N = W" (ep 0: "--tp K").
std::string world_flags(const EpLaunchOptions& launch) {
  if (launch.tp == 1) return "--ep " + std::to_string(launch.ep);
  if (launch.ep == 0) return "--tp " + std::to_string(launch.tp);
  return "--tp " + std::to_string(launch.tp) + " x --ep " + std::to_string(launch.ep) + " = " +
         std::to_string(launch.tp * launch.ep);
}

// The world communicator for `launch` (tp * ep ranks): null for one process.
StatusOr<std::unique_ptr<Communicator>> open_ep_group(const EpLaunchOptions& launch) {
  const std::string n = std::to_string(launch.ep);
  if (launch.tp < 1) return invalid_argument("--tp must be >= 1 (got " + std::to_string(launch.tp) + ")");
  if (launch.ep < (launch.tp > 1 ? 0 : 1)) return invalid_argument("--ep must be >= 1 (got " + n + ")");
  if (launch.ranks_per_node < 0) {
    return invalid_argument("--ranks-per-node must be >= 0 (got " + std::to_string(launch.ranks_per_node) + ")");
  }
  if (!(launch.comm_timeout_seconds > 0 && std::isfinite(launch.comm_timeout_seconds))) {
    return invalid_argument("--comm-timeout must be a finite number of seconds > 0 (got " +
                            std::to_string(launch.comm_timeout_seconds) + ")");
  }
  if (!(launch.startup_timeout_seconds > 0 && std::isfinite(launch.startup_timeout_seconds))) {
    return invalid_argument("startup_timeout_seconds must be a finite number of seconds > 0 (got " +
                            std::to_string(launch.startup_timeout_seconds) + ")");
  }
  if (launch.comm_backend != "mpi" && launch.comm_backend != "gloo") {
    return invalid_argument("--comm-backend must be mpi or gloo (got '" + launch.comm_backend + "')");
  }
  if (std::string why = comm_backend_unbuilt_reason(launch.comm_backend); !why.empty()) {
    return Status(StatusCode::kFailedPrecondition, why);
  }
  if (!launch.gloo_store_dir.empty() && launch.comm_backend != "gloo") {
    return invalid_argument("--gloo-store applies to --comm-backend gloo");
  }
  if (launch.tp > 1 && launch.comm_backend == "gloo") {
    return invalid_argument("--tp " + std::to_string(launch.tp) +
                            " with --comm-backend gloo: failover cannot re-form tensor-parallel groups (a lost "
                            "rank's shards have no replica); use --comm-backend mpi");
  }
  if (launch.ep == 1 && launch.tp == 1 && !launched_under_mpi()) return std::unique_ptr<Communicator>();
  if (!launched_under_mpi()) {
    if (launch.tp > 1) {
      const std::string w = std::to_string(launch.tp * std::max(launch.ep, 1));
      return invalid_argument("--tp " + std::to_string(launch.tp) + " needs " + w +
                              " processes: run it as mpirun -np " + w + " moe " + launch.command + " --tp " +
                              std::to_string(launch.tp) + (launch.ep > 0 ? " --ep " + n : std::string()) + " ...");
    }
    return invalid_argument("--ep " + n + " needs " + n + " processes: run it as mpirun -np " + n + " moe " +
                            launch.command + " --ep " + n + " ...");
  }
  if (launch.comm_backend == "gloo") return open_gloo_group(launch);
  MpiOptions mo;
  mo.ranks_per_node = launch.ranks_per_node;
  mo.timeout_seconds = std::max(launch.comm_timeout_seconds, launch.startup_timeout_seconds);
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, make_mpi_communicator(mo));
  const int world = comm->size();
  if (launch.ep == 0 ? world % launch.tp != 0 : world != launch.tp * launch.ep) {
    return invalid_argument(world_flags(launch) + (launch.ep == 0 ? " does not divide the " : " but mpirun started ") +
                            std::to_string(world) + " ranks" +
                            (launch.ep == 0 ? " mpirun started" : "; they must match") +
                            (launch.tp > 1 ? " (the world is --tp x --ep ranks)" : ""));
  }
  return comm;
}

}  // namespace

StatusOr<LaunchedEngine> launch_engine(EngineOptions options, const EpLaunchOptions& launch) {
  if (options.comm != nullptr) {
    return invalid_argument("launch_engine: EngineOptions.comm must be null (the launch creates the communicator)");
  }
  LaunchedEngine out;
  MOE_ASSIGN_OR_RETURN(out.comm, open_ep_group(launch));
  out.rank = out.comm ? out.comm->rank() : 0;
  if (out.comm && out.rank == 0 && launch.comm_backend == "gloo" && launch.gloo_store_dir.empty()) {
    out.owned_rendezvous_dir = default_gloo_store_dir();
  }
  out.num_ranks = out.comm ? out.comm->size() : 1;
  options.comm = out.comm.get();
  options.comm_timeout_seconds = launch.comm_timeout_seconds;
  options.tp_size = launch.tp;
  options.ep_size = launch.ep == 0 ? out.num_ranks / launch.tp : launch.ep;
  auto engine = Engine::open(options);
  if (!engine.ok()) {
    if (!out.comm) return engine.status();
    return Status(engine.status().code(), "rank " + std::to_string(out.rank) + ": " + engine.status().message());
  }
  out.engine = std::move(engine).value();
  return out;
}

}  // namespace moe
