// The MPI backend, run under mpirun (tests/CMakeLists.txt: np 2, 3, 4; also works as
// a singleton without mpirun). Every rank runs every test in the same order and checks
// its own results; rank 0 prints gtest's usual output, the other ranks only their
// failures, prefixed "[rank R]". The exit status is non-zero on every rank if any
// rank failed.
//
// The timing comparison of the two alltoallv algorithms is disabled by default:
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/tests/mpi_communicator_mpitest
//     --gtest_also_run_disabled_tests --gtest_filter='*Timing*'   (one command line)
#include "moe/comm/mpi_communicator.h"

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_test_util.h"
#include "comm/mpi_test_main.h"
#include "moe/core/clock.h"

namespace moe {
namespace {

using moe::testing::a2a_errors;
using moe::testing::A2aBuffers;
using moe::testing::make_a2a;

constexpr double kTimeout = 20;  // generous: 4 oversubscribed ranks on 2 cores, maybe ASan

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::unique_ptr<Communicator> make_comm(A2aAlgo algo = A2aAlgo::kMpiAlltoallv, int ranks_per_node = 0,
                                        double timeout = kTimeout) {
  MpiOptions o;
  o.a2a_algo = algo;
  o.ranks_per_node = ranks_per_node;
  o.timeout_seconds = timeout;
  auto c = make_mpi_communicator(o);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

const char* algo_name(A2aAlgo a) { return a == A2aAlgo::kPairwise ? "Pairwise" : "MpiAlltoallv"; }

class MpiA2aTest : public ::testing::TestWithParam<A2aAlgo> {};

INSTANTIATE_TEST_SUITE_P(Algo, MpiA2aTest, ::testing::Values(A2aAlgo::kMpiAlltoallv, A2aAlgo::kPairwise),
                         [](const auto& info) { return std::string(algo_name(info.param)); });

TEST(Mpi, Identity) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  int r = -1, n = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  EXPECT_EQ(c->rank(), r);
  EXPECT_EQ(c->size(), n);
  EXPECT_EQ(c->backend(), "mpi");
  EXPECT_TRUE(launched_under_mpi() || n == 1);
  EXPECT_TRUE(mpi_init(nullptr, nullptr).ok());  // idempotent
}

TEST_P(MpiA2aTest, AlltoallvEveryByte) {
  auto c = make_comm(GetParam());
  ASSERT_TRUE(c);
  const int n = c->size(), me = c->rank();
  for (int it = 0; it < 12; ++it) {
    A2aBuffers b = make_a2a(me, n, it);
    Status s = c->alltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(a2a_errors(me, n, b.recv, it), 0u) << "iteration " << it;
  }
  if (n > 1 && me == n - 1) {
    EXPECT_EQ(make_a2a(me, n).send.size(), 0u);  // the silent rank
  }
}

// Regression: a rank with only empty blocks (null buffers) used to pass the same dummy
// pointer as send and recv, which Open MPI's ialltoallv takes for MPI_IN_PLACE, and the
// next alltoallv with data hung.
TEST_P(MpiA2aTest, EmptyRoundThenData) {
  auto c = make_comm(GetParam());
  ASSERT_TRUE(c);
  const int n = c->size(), me = c->rank();
  std::vector<size_t> zeros(n, 0), self(n, 0);
  self[me] = 8;
  uint64_t x = 0x1122334455667788ull, y = 0;
  // Round 1: rank 0 copies 8 bytes to itself, every other rank has nothing at all.
  Status s = me == 0 ? c->alltoallv(&x, self, &y, self) : c->alltoallv(nullptr, zeros, nullptr, zeros);
  ASSERT_TRUE(s.ok()) << s.to_string();
  if (me == 0) {
    EXPECT_EQ(y, x);
  }
  // Round 2: real data everywhere.
  A2aBuffers b = make_a2a(me, n, 2);
  s = c->alltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(a2a_errors(me, n, b.recv, 2), 0u);
}

TEST_P(MpiA2aTest, IalltoallvTestPolling) {
  auto c = make_comm(GetParam());
  ASSERT_TRUE(c);
  const int n = c->size(), me = c->rank();
  A2aBuffers b1 = make_a2a(me, n, 3), b2 = make_a2a(me, n, 4);
  // Two in flight at once (allowed under MPI), completed by polling test().
  auto r1 = c->ialltoallv(b1.send.data(), b1.send_bytes, b1.recv.data(), b1.recv_bytes);
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  auto r2 = c->ialltoallv(b2.send.data(), b2.send_bytes, b2.recv.data(), b2.recv_bytes);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * me));
  int polls = 0;
  bool d1 = false, d2 = false;
  while (!(d1 && d2)) {
    if (!d1) {
      auto t = r1.value()->test();
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      d1 = t.value();
    }
    if (!d2) {
      auto t = r2.value()->test();
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      d2 = t.value();
    }
    ++polls;
    if (!(d1 && d2)) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EXPECT_GE(polls, 1);
  EXPECT_TRUE(r1.value()->wait().ok());
  EXPECT_EQ(a2a_errors(me, n, b1.recv, 3), 0u);
  EXPECT_EQ(a2a_errors(me, n, b2.recv, 4), 0u);

  // wait() directly, and a request destroyed without wait().
  A2aBuffers b3 = make_a2a(me, n, 5);
  {
    auto r3 = c->ialltoallv(b3.send.data(), std::vector<size_t>(b3.send_bytes),  // temporaries are fine
                            b3.recv.data(), std::vector<size_t>(b3.recv_bytes));
    ASSERT_TRUE(r3.ok()) << r3.status().to_string();
  }
  EXPECT_EQ(a2a_errors(me, n, b3.recv, 5), 0u);
}

TEST(Mpi, AlltoallInt64) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  const int n = c->size(), me = c->rank();
  std::vector<int64_t> send(n), recv(n, -1);
  for (int d = 0; d < n; ++d) send[d] = (int64_t{me} << 40) + 1000 * d + 7;
  Status s = c->alltoall_int64(send.data(), recv.data());
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int src = 0; src < n; ++src) EXPECT_EQ(recv[src], (int64_t{src} << 40) + 1000 * me + 7);
}

TEST(Mpi, AllreduceExact) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  const int n = c->size(), me = c->rank();
  constexpr size_t kLen = 1000;
  std::vector<float> f(kLen);
  std::vector<int64_t> v(kLen);
  for (size_t i = 0; i < kLen; ++i) {
    f[i] = static_cast<float>((me + 1) * static_cast<int>(i)) - 0.5f;
    v[i] = (int64_t{1} << 50) * (me % 2 ? -1 : 1) + static_cast<int64_t>(i) * (me + 1);
  }
  ASSERT_TRUE(c->allreduce_sum(f.data(), f.size()).ok());
  ASSERT_TRUE(c->allreduce_sum(v.data(), v.size()).ok());
  const int64_t rank_sum = int64_t{n} * (n + 1) / 2;
  int64_t sign_sum = 0;
  for (int r = 0; r < n; ++r) sign_sum += (r % 2 ? -1 : 1);
  for (size_t i = 0; i < kLen; ++i) {
    ASSERT_EQ(f[i], static_cast<float>(rank_sum * static_cast<int64_t>(i)) - 0.5f * n) << i;
    ASSERT_EQ(v[i], (int64_t{1} << 50) * sign_sum + static_cast<int64_t>(i) * rank_sum) << i;
  }
}

TEST(Mpi, Allgather) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  const int n = c->size(), me = c->rank();
  std::vector<uint8_t> send(13), recv(13 * n, 0);
  for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<uint8_t>(me * 50 + i);
  ASSERT_TRUE(c->allgather(send.data(), send.size(), recv.data()).ok());
  for (int src = 0; src < n; ++src) {
    for (size_t i = 0; i < 13; ++i) EXPECT_EQ(recv[src * 13 + i], static_cast<uint8_t>(src * 50 + i));
  }
}

TEST(Mpi, BroadcastFromLastRank) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  const int root = c->size() - 1;
  std::vector<uint32_t> data(100000, 0);  // 400 KB: past the eager limit
  if (c->rank() == root) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint32_t>(i * 2654435761u);
  }
  Status s = c->broadcast(data.data(), data.size() * sizeof(uint32_t), root);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<uint32_t>(i * 2654435761u)) << i;
}

TEST(Mpi, Barrier) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  // Rank 0 arrives late; nobody may leave before it arrives.
  const double t0 = now_seconds();
  if (c->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(c->barrier().ok());
  if (c->size() > 1) {
    EXPECT_GE(now_seconds() - t0, 0.15);
  }
  ASSERT_TRUE(c->barrier().ok());
}

TEST(Mpi, SendRecvRing) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  const int n = c->size(), me = c->rank();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> a(100000), ra(100000, 0);  // 400 KB (rendezvous protocol)
  for (size_t i = 0; i < a.size(); ++i) a[i] = me * 1000000 + static_cast<int32_t>(i);
  // Even ranks send first, odd ranks receive first: no cycle of blocked senders.
  auto do_send = [&] { return c->send(a.data(), a.size() * 4, next, 5); };
  auto do_recv = [&] { return c->recv(ra.data(), ra.size() * 4, prev, 5); };
  if (me % 2 == 0) {
    ASSERT_TRUE(do_send().ok());
    ASSERT_TRUE(do_recv().ok());
  } else {
    ASSERT_TRUE(do_recv().ok());
    ASSERT_TRUE(do_send().ok());
  }
  for (size_t i = 0; i < ra.size(); ++i) ASSERT_EQ(ra[i], prev * 1000000 + static_cast<int32_t>(i)) << i;
}

TEST(Mpi, RecvSizeMismatch) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  if (c->size() < 2) GTEST_SKIP() << "needs a peer";
  // Rank 1 sends 8 then 16 bytes; rank 0 expects 16 then 8 (short, then truncated).
  if (c->rank() == 1) {
    int64_t v[2] = {1, 2};
    EXPECT_TRUE(c->send(v, 8, 0, 3).ok());
    EXPECT_TRUE(c->send(v, 16, 0, 3).ok());
  } else if (c->rank() == 0) {
    int64_t v[2] = {0, 0};
    Status shorter = c->recv(v, 16, 1, 3);
    EXPECT_EQ(shorter.code(), StatusCode::kInvalidArgument) << shorter.to_string();
    EXPECT_NE(shorter.message().find("has 8 bytes"), std::string::npos) << shorter.message();
    Status longer = c->recv(v, 8, 1, 3);
    EXPECT_EQ(longer.code(), StatusCode::kInvalidArgument) << longer.to_string();
    EXPECT_NE(longer.message().find("MPI_ERR_TRUNCATE"), std::string::npos) << longer.message();  // MPI_Error_string
    EXPECT_NE(longer.message().find("recv from rank 1"), std::string::npos) << longer.message();
  }
  EXPECT_TRUE(c->barrier().ok());  // still usable
}

TEST(Mpi, InvalidArguments) {
  auto c = make_comm(A2aAlgo::kMpiAlltoallv);
  ASSERT_TRUE(c);
  const int n = c->size();
  std::vector<size_t> wrong(n + 1, 0), zeros(n, 0);
  EXPECT_EQ(c->alltoallv(nullptr, wrong, nullptr, zeros).code(), StatusCode::kInvalidArgument);
  std::vector<size_t> huge(n, 0);
  huge[0] = size_t{INT_MAX} + 1;
  Status s = c->alltoallv(nullptr, huge, nullptr, zeros);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("INT_MAX"), std::string::npos) << s.message();
  if (n >= 3) {  // each block fits, the displacement of block 2 does not
    std::vector<size_t> big(n, 0);
    big[0] = big[1] = size_t{INT_MAX};
    Status d = c->alltoallv(nullptr, big, nullptr, zeros);
    EXPECT_EQ(d.code(), StatusCode::kInvalidArgument) << d.to_string();
    EXPECT_NE(d.message().find("displacement"), std::string::npos) << d.message();
  }
  EXPECT_EQ(c->broadcast(nullptr, size_t{INT_MAX} + 1, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->broadcast(nullptr, 0, n).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->allreduce_sum(static_cast<float*>(nullptr), size_t{INT_MAX} + 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c->send(nullptr, 0, c->rank(), 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->recv(nullptr, 0, n, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->send(nullptr, 0, (c->rank() + 1) % n, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->barrier().ok());  // none of that touched the peers

  MpiOptions bad;
  bad.ranks_per_node = -1;
  EXPECT_EQ(make_mpi_communicator(bad).status().code(), StatusCode::kInvalidArgument);
  bad.ranks_per_node = 0;
  bad.timeout_seconds = 0;
  EXPECT_EQ(make_mpi_communicator(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(Mpi, ReduceScatterExact) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  const int n = c->size(), r = c->rank();
  const size_t count = 3;
  std::vector<float> send(static_cast<size_t>(n) * count), recv(count, -1.0f);
  for (int j = 0; j < n; ++j) {
    for (size_t i = 0; i < count; ++i) send[j * count + i] = float((r + 1) * 100 + j * 10 + int(i));
  }
  ASSERT_TRUE(c->reduce_scatter_sum(send.data(), recv.data(), count).ok());
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(recv[i], float(100 * n * (n + 1) / 2 + n * (r * 10 + int(i)))) << i;
}

TEST(Mpi, SplitMembersNodesAndIndependence) {
  auto c = make_comm(A2aAlgo::kPairwise, /*ranks_per_node=*/2);
  ASSERT_TRUE(c);
  const int n = c->size(), r = c->rank();
  auto sub = c->split(r % 2, -r);  // parity colors, reversed order inside each
  ASSERT_TRUE(sub.ok()) << sub.status().to_string();
  std::vector<int> want;
  for (int q = n - 1; q >= 0; --q) {
    if (q % 2 == r % 2) want.push_back(q);
  }
  std::vector<int> got(static_cast<size_t>((*sub)->size()));
  ASSERT_EQ(got.size(), want.size());
  ASSERT_TRUE((*sub)->allgather(&r, sizeof r, got.data()).ok());
  EXPECT_EQ(got, want);
  // Nodes of the members (parent node q / 2), renumbered by first appearance.
  std::vector<int> seen;
  for (size_t i = 0; i < want.size(); ++i) {
    const int node = want[i] / 2;
    auto it = std::find(seen.begin(), seen.end(), node);
    if (it == seen.end()) it = seen.insert(seen.end(), node);
    EXPECT_EQ((*sub)->node_of(static_cast<int>(i)), it - seen.begin()) << i;
  }
  float v = 1.0f, w = 1.0f;
  ASSERT_TRUE((*sub)->allreduce_sum(&v, 1).ok());
  ASSERT_TRUE(c->barrier().ok());
  ASSERT_TRUE(c->allreduce_sum(&w, 1).ok());
  EXPECT_EQ(v, float(want.size()));
  EXPECT_EQ(w, float(n));
  // Point-to-point inside the child.
  if ((*sub)->size() >= 2) {
    const int me = (*sub)->rank(), peer = me == 0 ? 1 : 0;
    if (me <= 1) {
      int out = r, in = -1;
      if (me == 0) {
        ASSERT_TRUE((*sub)->send(&out, sizeof out, peer, 5).ok());
        ASSERT_TRUE((*sub)->recv(&in, sizeof in, peer, 5).ok());
      } else {
        ASSERT_TRUE((*sub)->recv(&in, sizeof in, peer, 5).ok());
        ASSERT_TRUE((*sub)->send(&out, sizeof out, peer, 5).ok());
      }
      EXPECT_EQ(in, want[static_cast<size_t>(peer)]);
    }
  }
}

TEST(Mpi, EmulatedNodes) {
  auto c = make_comm(A2aAlgo::kMpiAlltoallv, /*ranks_per_node=*/2);
  ASSERT_TRUE(c);
  const int n = c->size();
  EXPECT_EQ(c->num_nodes(), (n + 1) / 2);
  for (int r = 0; r < n; ++r) EXPECT_EQ(c->node_of(r), r / 2) << r;
  if (n == 4) {
    std::vector<int> nodes;
    for (int r = 0; r < 4; ++r) nodes.push_back(c->node_of(r));
    EXPECT_EQ(nodes, (std::vector<int>{0, 0, 1, 1}));
  }
}

TEST(Mpi, RealNodesMatchHostnames) {
  auto c = make_comm();
  ASSERT_TRUE(c);
  const int n = c->size();
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<size_t>(n) * MPI_MAX_PROCESSOR_NAME, 0);
  ASSERT_TRUE(c->allgather(name, MPI_MAX_PROCESSOR_NAME, all.data()).ok());
  auto host = [&](int r) { return std::string(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME); };
  EXPECT_EQ(c->node_of(0), 0);
  int max_node = 0;
  for (int a = 0; a < n; ++a) {
    max_node = std::max(max_node, c->node_of(a));
    for (int b = 0; b < n; ++b) EXPECT_EQ(c->node_of(a) == c->node_of(b), host(a) == host(b)) << a << " " << b;
  }
  EXPECT_EQ(c->num_nodes(), max_node + 1);
}

TEST(MpiTimeout, RecvWithoutSenderIsCancelled) {
  // Timeouts are per process: only rank 0's is short.
  auto c = make_comm(A2aAlgo::kMpiAlltoallv, 0, world_rank() == 0 ? 0.3 : kTimeout);
  ASSERT_TRUE(c);
  if (c->size() < 2) GTEST_SKIP() << "needs a peer";
  if (c->rank() == 0) {
    int64_t x = 0;
    const double t0 = now_seconds();
    Status s = c->recv(&x, sizeof(x), 1, 99);  // rank 1 never sends
    const double elapsed = now_seconds() - t0;
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
    EXPECT_NE(s.message().find("recv from rank 1"), std::string::npos) << s.message();
    EXPECT_GE(elapsed, 0.25);
    EXPECT_LT(elapsed, 5.0);
  }
  // The receive was cancelled: the communicator is still good.
  Status b = c->barrier();
  EXPECT_TRUE(b.ok()) << b.to_string();
}

TEST(MpiTimeout, SkippedBarrier) {
  auto world = make_comm();
  ASSERT_TRUE(world);
  if (world->size() < 2) GTEST_SKIP() << "needs a peer";
  const int me = world->rank();
  // Timeouts are per process: the ranks that wait give up after 0.5 s; rank 0, which
  // joins late on purpose, has time to spare.
  auto c = make_comm(A2aAlgo::kMpiAlltoallv, 0, me == 0 ? kTimeout : 0.5);
  ASSERT_TRUE(c);
  if (me != 0) {
    const double t0 = now_seconds();
    Status s = c->barrier();  // rank 0 is not there
    const double elapsed = now_seconds() - t0;
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
    EXPECT_NE(s.message().find("barrier"), std::string::npos) << s.message();
    EXPECT_GE(elapsed, 0.45);
    EXPECT_LT(elapsed, 5.0);
    Status later = c->allreduce_sum(static_cast<float*>(nullptr), 0);
    EXPECT_EQ(later.code(), StatusCode::kUnavailable) << later.to_string();
  }
  ASSERT_TRUE(world->barrier().ok());
  // Rank 0 now joins, which completes the abandoned barrier requests of the others
  // (they progress while waiting in the next world barrier), so nothing is left
  // pending for MPI_Finalize.
  if (me == 0) {
    Status s = c->barrier();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ASSERT_TRUE(world->barrier().ok());
}

// Not a correctness test: compares the alltoallv algorithms, 1 MiB per pair.
TEST(MpiTiming, DISABLED_AlltoallvAlgorithms) {
  for (size_t bytes : {size_t{1} << 20, size_t{64} << 10, size_t{1} << 10}) {
    for (A2aAlgo algo : {A2aAlgo::kMpiAlltoallv, A2aAlgo::kPairwise, A2aAlgo::kMpiAlltoallv, A2aAlgo::kPairwise}) {
      auto c = make_comm(algo);
      ASSERT_TRUE(c);
      const int n = c->size();
      std::vector<size_t> counts(n, bytes);
      std::vector<uint8_t> send(bytes * n, static_cast<uint8_t>(c->rank())), recv(bytes * n, 0);
      const int iters = bytes >= (size_t{1} << 20) ? 50 : 500;
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(c->alltoallv(send.data(), counts, recv.data(), counts).ok());
      ASSERT_TRUE(c->barrier().ok());
      const double t0 = now_seconds();
      for (int i = 0; i < iters; ++i) ASSERT_TRUE(c->alltoallv(send.data(), counts, recv.data(), counts).ok());
      float per_iter = static_cast<float>((now_seconds() - t0) / iters);
      float mean = per_iter;
      ASSERT_TRUE(c->allreduce_sum(&mean, 1).ok());
      mean /= static_cast<float>(n);
      for (int s = 0; s < n; ++s) ASSERT_EQ(recv[s * bytes], static_cast<uint8_t>(s));
      if (c->rank() == 0) {
        std::printf("alltoallv %-12s np=%d %8zu B/pair: %9.1f us/iter (mean over ranks), %.2f GB/s per rank\n",
                    algo_name(algo), n, bytes, mean * 1e6, static_cast<double>(bytes) * (n - 1) / mean / 1e9);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::testing::run_mpi_tests(argc, argv); }
