// How much of a core a computing process keeps while other processes wait by spinning on
// sched_yield (as MpiCommunicator's Backoff does for the first ~1 ms of a wait), against
// waiting asleep and against all of them computing (docs/planner.md, "Shared cores").
// One process runs a fixed loop; N others (argument 1, default 3: the EP 4 peers) sleep,
// yield-spin or compute; prints the loop's wall seconds per mode, 3 interleaved rounds.
//   cc -O2 -o /tmp/spin_share tools/bench/spin_share.c && /tmp/spin_share 3 300000000
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static volatile double sink;

static void work(long n) {
  double x = 1;
  for (long i = 0; i < n; ++i) x = x * 1.0000001 + 1e-9;
  sink = x;
}

int main(int argc, char** argv) {
  const int others = argc > 1 ? atoi(argv[1]) : 3;
  const long n = argc > 2 ? atol(argv[2]) : 300000000L;
  if (others < 0 || others > 64 || n <= 0) {
    fprintf(stderr, "usage: spin_share [others 0..64] [iterations > 0]\n");
    return 2;
  }
  const char* modes[] = {"sleep", "yield", "busy"};
  for (int round = 0; round < 3; ++round) {
    for (int m = 0; m < 3; ++m) {
      pid_t kids[64];
      for (int k = 0; k < others; ++k) {
        if ((kids[k] = fork()) == 0) {
          for (;;) {
            if (m == 0) pause();
            else if (m == 1) sched_yield();
            else work(1000000);
          }
        }
      }
      usleep(20000);
      const double t0 = now();
      work(n);
      const double t = now() - t0;
      for (int k = 0; k < others; ++k) {
        kill(kids[k], SIGKILL);
        waitpid(kids[k], NULL, 0);
      }
      printf("%s %.3f s\n", modes[m], t);
      fflush(stdout);
    }
  }
  return 0;
}
