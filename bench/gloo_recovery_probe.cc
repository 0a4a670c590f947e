// What Gloo (Debian libgloo-dev 0.0~git20220518) lets survivors do after a rank is
// SIGKILLed: the measurement behind the failover mechanism choice (docs/reliability.md,
// "## Mechanism"). A throwaway experiment, not part of the engine. No mpirun: it forks 3
// processes that rendezvous through a gloo FileStore in a temp directory over the TCP
// transport (127.0.0.1), run one allreduce, then rank 2 SIGKILLs itself. The survivors
//   1. run an allreduce over the old 3-rank context with a --timeout-ms operation timeout
//      and report whether it throws and after how long;
//   2. build a new 2-rank context (PrefixStore "gen1", their new ranks 0 and 1) and run an
//      allreduce on it (the re-rendezvous a shrink needs).
// With --stop, rank 2 SIGSTOPs itself instead (a stuck peer: its sockets stay open); the
// parent SIGKILLs it once the survivors are done.
//   ./build/bench/gloo_recovery_probe [--timeout-ms 2000] [--stop]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One allreduce (sum of one int per rank); returns the sum.
int sum_of_ones(const std::shared_ptr<gloo::Context>& ctx, std::chrono::milliseconds timeout) {
  int value = 1;
  gloo::AllreduceOptions opts(ctx);
  opts.setInput(&value, 1);
  opts.setOutput(&value, 1);
  opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<int>));
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
  return value;
}

std::shared_ptr<gloo::Context> connect(const std::string& dir, const std::string& generation, int rank, int size,
                                       std::chrono::milliseconds timeout) {
  gloo::transport::tcp::attr attr("127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(dir);
  gloo::rendezvous::PrefixStore store(generation, file_store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(timeout);
  ctx->connectFullMesh(store, device);
  return ctx;
}

bool g_stop = false;

int run_rank(const std::string& dir, int rank, std::chrono::milliseconds timeout) {
  auto ctx = connect(dir, "gen0", rank, 3, timeout);
  std::printf("rank %d: first allreduce over 3 ranks: sum %d\n", rank, sum_of_ones(ctx, timeout));
  std::fflush(stdout);
  if (rank == 2) raise(g_stop ? SIGSTOP : SIGKILL);
  usleep(500000);
  double t = now_s();
  try {
    const int sum = sum_of_ones(ctx, timeout);
    std::printf("rank %d: allreduce with rank 2 dead returned sum %d after %.3f s\n", rank, sum, now_s() - t);
  } catch (const std::exception& e) {
    std::printf("rank %d: allreduce with rank 2 dead threw after %.3f s: %s\n", rank, now_s() - t, e.what());
  }
  std::fflush(stdout);
  t = now_s();
  try {
    auto survivors = connect(dir, "gen1", rank, 2, timeout);
    const double t_connect = now_s() - t;
    const int sum = sum_of_ones(survivors, timeout);
    std::printf("rank %d: new 2-rank context in %.3f s, allreduce sum %d\n", rank, t_connect, sum);
  } catch (const std::exception& e) {
    std::printf("rank %d: re-rendezvous failed after %.3f s: %s\n", rank, now_s() - t, e.what());
    return 1;
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int timeout_ms = 2000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc) timeout_ms = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--stop") == 0) g_stop = true;
  }
  char tmpl[] = "/tmp/gloo_probe_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  pid_t pids[3];
  for (int r = 0; r < 3; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(30);  // a hang ends the child
      _exit(run_rank(dir, r, std::chrono::milliseconds(timeout_ms)));
    }
  }
  int worst = 0;
  if (g_stop) {  // the survivors first, then the stopped rank
    for (int r = 0; r < 2; ++r) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      std::printf("rank %d: exit %d\n", r, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) worst = 1;
    }
    kill(pids[2], SIGKILL);
    waitpid(pids[2], nullptr, 0);
    std::system(("rm -rf " + dir).c_str());
    return worst;
  }
  for (int r = 0; r < 3; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    std::printf("rank %d: %s %d\n", r, WIFEXITED(status) ? "exit" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    if (r < 2 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) worst = 1;
  }
  std::system(("rm -rf " + dir).c_str());
  return worst;
}
