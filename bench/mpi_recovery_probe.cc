// What Open MPI (4.1) lets survivors do after a rank is SIGKILLed: the measurement behind
// the failover mechanism choice (docs/reliability.md, "## Mechanism"). A throwaway
// experiment, not part of the engine.
//
// Run it with 3 ranks; rank 2 kills itself (SIGKILL) after a first barrier, the
// survivors (0 and 1, MPI_ERRORS_RETURN on MPI_COMM_WORLD) wait --settle seconds, then
// run ONE test and print, per rank, the return code and how long the call took. A call
// that does not return within --deadline seconds is reported as "HANG" (SIGALRM) and
// the rank exits 3. Tests:
//   p2p          ranks 0 and 1 exchange 100 messages (MPI_Sendrecv)
//   recv_dead    rank 0 MPI_Recv from rank 2 (the dead one)
//   send_dead    rank 0 MPI_Send of 1 MiB (rendezvous) to rank 2
//   isend_dead   rank 0 MPI_Isend of 1 MiB to rank 2, then MPI_Wait
//   barrier      MPI_Barrier on MPI_COMM_WORLD
//   allreduce    MPI_Allreduce on MPI_COMM_WORLD
//   split        MPI_Comm_split of MPI_COMM_WORLD (survivors colour 0), then an allreduce on it
//   create_group MPI_Comm_create_group over {0, 1} (collective over the group only), then
//                an allreduce on the new communicator
//   all          p2p, then create_group, then the collectives (a hang ends the run)
//
//   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe
//     --enable-recovery -np 3 ./build/bench/mpi_recovery_probe p2p   (one line)
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_rank = -1;
const char* g_test = "";
double g_t0 = 0;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void on_alarm(int) {
  char buf[160];
  const int n = std::snprintf(buf, sizeof(buf), "rank %d: %s: HANG (no return within the deadline)\n", g_rank, g_test);
  (void)!write(STDOUT_FILENO, buf, static_cast<size_t>(n));
  _exit(3);
}

std::string err_text(int rc) {
  if (rc == MPI_SUCCESS) return "MPI_SUCCESS";
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int cls = 0;
  MPI_Error_class(rc, &cls);
  return "error class " + std::to_string(cls) + " (" + std::string(msg, static_cast<size_t>(len)) + ")";
}

void report(const char* what, int rc, double t_start) {
  std::printf("rank %d: %s: %s after %.3f s (%.3f s since the kill)\n", g_rank, what, err_text(rc).c_str(),
              now_s() - t_start, now_s() - g_t0);
  std::fflush(stdout);
}

int run_one(const std::string& test) {
  g_test = test.c_str();
  std::vector<char> big(1 << 20, 1);
  int rc = MPI_SUCCESS;
  const double t = now_s();
  if (test == "p2p") {
    const int peer = 1 - g_rank;
    int i = 0;
    for (; i < 100 && rc == MPI_SUCCESS; ++i) {
      int out = i, in = -1;
      rc = MPI_Sendrecv(&out, 1, MPI_INT, peer, 7, &in, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    report(("p2p (" + std::to_string(i) + " exchanges)").c_str(), rc, t);
  } else if (test == "recv_dead") {
    if (g_rank == 0) {
      int in = 0;
      rc = MPI_Recv(&in, 1, MPI_INT, 2, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      report("MPI_Recv from rank 2", rc, t);
    }
  } else if (test == "send_dead") {
    if (g_rank == 0) {
      rc = MPI_Send(big.data(), static_cast<int>(big.size()), MPI_CHAR, 2, 7, MPI_COMM_WORLD);
      report("MPI_Send 1 MiB to rank 2", rc, t);
    }
  } else if (test == "isend_dead") {
    if (g_rank == 0) {
      MPI_Request req;
      rc = MPI_Isend(big.data(), static_cast<int>(big.size()), MPI_CHAR, 2, 7, MPI_COMM_WORLD, &req);
      report("MPI_Isend 1 MiB to rank 2", rc, t);
      if (rc == MPI_SUCCESS) {
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        report("MPI_Wait of that send", rc, t);
      }
    }
  } else if (test == "barrier") {
    rc = MPI_Barrier(MPI_COMM_WORLD);
    report("MPI_Barrier(WORLD)", rc, t);
  } else if (test == "allreduce") {
    int in = 1, out = 0;
    rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    report("MPI_Allreduce(WORLD)", rc, t);
  } else if (test == "split" || test == "create_group") {
    MPI_Comm sub = MPI_COMM_NULL;
    if (test == "split") {
      rc = MPI_Comm_split(MPI_COMM_WORLD, 0, g_rank, &sub);
      report("MPI_Comm_split(WORLD)", rc, t);
    } else {
      MPI_Group world_group, survivors;
      MPI_Comm_group(MPI_COMM_WORLD, &world_group);
      const int ranks[2] = {0, 1};
      MPI_Group_incl(world_group, 2, ranks, &survivors);
      rc = MPI_Comm_create_group(MPI_COMM_WORLD, survivors, 99, &sub);
      report("MPI_Comm_create_group({0,1})", rc, t);
    }
    if (rc == MPI_SUCCESS && sub != MPI_COMM_NULL) {
      MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
      int in = 1, out = 0;
      const double t2 = now_s();
      rc = MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, sub);
      report(("MPI_Allreduce on the new communicator (sum " + std::to_string(out) + ")").c_str(), rc, t2);
    }
  } else {
    std::fprintf(stderr, "unknown test '%s'\n", test.c_str());
    return 2;
  }
  return rc == MPI_SUCCESS ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string test = argc > 1 ? argv[1] : "all";
  double settle_s = 1.0, deadline_s = 20.0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--settle") == 0) settle_s = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--deadline") == 0) deadline_s = std::atof(argv[i + 1]);
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (size != 3) {
    if (g_rank == 0) std::fprintf(stderr, "run with -np 3\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 2) raise(SIGKILL);
  g_t0 = now_s();
  usleep(static_cast<useconds_t>(settle_s * 1e6));
  std::printf("rank %d: alive %.1f s after rank 2's SIGKILL (pid %d)\n", g_rank, settle_s, getpid());
  std::fflush(stdout);
  signal(SIGALRM, on_alarm);
  int status = 0;
  const std::vector<std::string> tests =
      test == "all" ? std::vector<std::string>{"p2p", "create_group", "barrier", "allreduce", "split"}
                    : std::vector<std::string>{test};
  for (const auto& t : tests) {
    alarm(static_cast<unsigned>(deadline_s));
    status |= run_one(t);
    alarm(0);
  }
  // MPI_Finalize with a dead peer may itself block: keep it under the deadline too.
  g_test = "MPI_Finalize";
  alarm(static_cast<unsigned>(deadline_s));
  const double t = now_s();
  const int rc = MPI_Finalize();
  report("MPI_Finalize", rc, t);
  return status;
}
