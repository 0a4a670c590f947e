// GlooCommunicator with its ranks as threads of this process, each with its own
// communicator (its own TCP sockets and gloo I/O thread) over one temp FileStore dir:
// every operation against hand-computed values (3 and 4 ranks, zero-byte and uneven
// blocks, tags in order), bounded failures (a silent peer -> DeadlineExceeded, a peer
// whose communicator is destroyed, i.e. whose sockets close as with SIGKILL -> an error
// within the timeout), re-forming the survivors (renumbering, world ranks, generations
// 1 and 2, nodes), a rank left out of the new group, and bad options.
#include "moe/comm/gloo_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_test_util.h"
#include "contains_util.h"
#include "moe/comm/faulty_communicator.h"
#include "moe/comm/inproc_communicator.h"
#include "test_util.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool is_failure(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

// N ranks, each a GlooCommunicator created on its own thread over one fresh store dir.
class Group {
 public:
  explicit Group(int n, double timeout_seconds, int ranks_per_node = 0) : dir_(testing::make_temp_dir("gloo")) {
    comms_.resize(static_cast<size_t>(n));
    std::vector<Status> st(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        GlooOptions o;
        o.store_dir = dir_;
        o.timeout_seconds = timeout_seconds;
        o.ranks_per_node = ranks_per_node;
        auto c = GlooCommunicator::create(r, n, o);
        if (c.ok()) {
          comms_[static_cast<size_t>(r)] = std::move(*c);
        } else {
          st[static_cast<size_t>(r)] = c.status();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_TRUE(st[static_cast<size_t>(r)].ok()) << "rank " << r << ": " << st[static_cast<size_t>(r)].to_string();
  }
  ~Group() {
    comms_.clear();
    std::filesystem::remove_all(dir_);
  }
  bool ok() const {
    for (const auto& c : comms_) {
      if (!c) return false;
    }
    return true;
  }
  const std::string& dir() const { return dir_; }
  // Communicator of the rank created as world rank w (null once killed).
  GlooCommunicator* world(int w) { return comms_[static_cast<size_t>(w)].get(); }
  // "SIGKILL": destroys world rank w's communicator, closing its sockets.
  void kill(int w) { comms_[static_cast<size_t>(w)].reset(); }
  // Runs fn on each listed world rank, in parallel; results by position in `which`.
  std::vector<Status> run(const std::vector<int>& which, const std::function<Status(GlooCommunicator&)>& fn) {
    std::vector<Status> st(which.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < which.size(); ++i) {
      threads.emplace_back([&, i] { st[i] = fn(*comms_[static_cast<size_t>(which[i])]); });
    }
    for (auto& t : threads) t.join();
    return st;
  }
  std::vector<Status> run_all(const std::function<Status(GlooCommunicator&)>& fn) {
    std::vector<int> all;
    for (size_t w = 0; w < comms_.size(); ++w) all.push_back(static_cast<int>(w));
    return run(all, fn);
  }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<GlooCommunicator>> comms_;
};

#define EXPECT_ALL_OK(statuses)                                                         \
  for (size_t i_ = 0; i_ < (statuses).size(); ++i_) {                                   \
    EXPECT_TRUE((statuses)[i_].ok()) << "rank #" << i_ << ": " << (statuses)[i_].to_string(); \
  }

// Every collective and point-to-point operation on n ranks, against hand-computed values.
void check_all_ops(int n) {
  Group g(n, 10);
  ASSERT_TRUE(g.ok());
  std::vector<std::vector<float>> f32_results(static_cast<size_t>(n));
  auto st = g.run_all([&](GlooCommunicator& c) -> Status {
    const int r = c.rank();
    EXPECT_EQ(c.size(), n);
    EXPECT_EQ(c.backend(), "gloo");
    EXPECT_EQ(c.generation(), 0);
    // alltoallv: asymmetric blocks, zero-byte ones, one > 64 KiB, a rank sending nothing.
    for (int iter = 0; iter < 3; ++iter) {
      auto b = testing::make_a2a(r, n, iter);
      MOE_RETURN_IF_ERROR(c.alltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes));
      EXPECT_EQ(testing::a2a_errors(r, n, b.recv, iter), 0u) << "alltoallv iter " << iter << " rank " << r;
    }
    {
      auto b = testing::make_a2a(r, n, 5);
      MOE_ASSIGN_OR_RETURN(auto req, c.ialltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes));
      MOE_ASSIGN_OR_RETURN(bool done, req->test());
      EXPECT_TRUE(done);
      MOE_RETURN_IF_ERROR(req->wait());
      EXPECT_EQ(testing::a2a_errors(r, n, b.recv, 5), 0u) << "ialltoallv rank " << r;
    }
    {  // all blocks empty
      std::vector<size_t> zero(static_cast<size_t>(n), 0);
      MOE_RETURN_IF_ERROR(c.alltoallv(nullptr, zero, nullptr, zero));
    }
    {
      std::vector<int64_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n), -1);
      for (int d = 0; d < n; ++d) send[static_cast<size_t>(d)] = 100 * r + d + (int64_t{1} << 40);
      MOE_RETURN_IF_ERROR(c.alltoall_int64(send.data(), recv.data()));
      for (int s = 0; s < n; ++s) EXPECT_EQ(recv[static_cast<size_t>(s)], 100 * s + r + (int64_t{1} << 40));
    }
    {  // sums exact in f32: r + 0.5 i summed over ranks = n(n-1)/2 + 0.5 n i
      std::vector<float> v(37);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r) + 0.5f * static_cast<float>(i);
      MOE_RETURN_IF_ERROR(c.allreduce_sum(v.data(), v.size()));
      for (size_t i = 0; i < v.size(); ++i) {
        EXPECT_EQ(v[i], static_cast<float>(n * (n - 1) / 2) + 0.5f * static_cast<float>(n) * static_cast<float>(i));
      }
      std::vector<int64_t> w = {(int64_t{1} << 50) + r, -7 * r, 0};
      MOE_RETURN_IF_ERROR(c.allreduce_sum(w.data(), w.size()));
      EXPECT_EQ(w[0], n * (int64_t{1} << 50) + n * (n - 1) / 2);
      EXPECT_EQ(w[1], -7 * n * (n - 1) / 2);
      EXPECT_EQ(w[2], 0);
    }
    {  // rounding-sensitive f32 sums: every rank must end with the same bits
      std::mt19937 gen(1234 + static_cast<unsigned>(r));
      std::uniform_real_distribution<float> u(-1, 1);
      std::vector<float> v(1001);
      for (size_t i = 0; i < v.size(); ++i) v[i] = u(gen) * ((i % 3 == 0) ? 1e7f : 1e-3f);
      MOE_RETURN_IF_ERROR(c.allreduce_sum(v.data(), v.size()));
      f32_results[static_cast<size_t>(r)] = v;
    }
    {
      std::vector<unsigned char> send(5), recv(5 * static_cast<size_t>(n), 0xEE);
      for (int i = 0; i < 5; ++i) send[static_cast<size_t>(i)] = static_cast<unsigned char>(r * 10 + i);
      MOE_RETURN_IF_ERROR(c.allgather(send.data(), send.size(), recv.data()));
      for (int s = 0; s < n; ++s) {
        for (int i = 0; i < 5; ++i) EXPECT_EQ(recv[static_cast<size_t>(s * 5 + i)], s * 10 + i);
      }
    }
    {
      const int root = n - 1;
      std::vector<int32_t> v(100, 0);
      if (r == root) {
        for (int i = 0; i < 100; ++i) v[static_cast<size_t>(i)] = i * i - 3;
      }
      MOE_RETURN_IF_ERROR(c.broadcast(v.data(), v.size() * sizeof(int32_t), root));
      for (int i = 0; i < 100; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], i * i - 3);
    }
    MOE_RETURN_IF_ERROR(c.barrier());
    // Point-to-point: rank 0 -> 1 interleaving tags 7 and 9 (each tag in order), a
    // zero-byte message, a size mismatch (InvalidArgument; the pair stays in step), and
    // rank n-1 -> 0 at the same time.
    if (r == 0) {
      for (int32_t v : {1, 2}) MOE_RETURN_IF_ERROR(c.send(&v, sizeof(v), 1, 7));
      const int64_t big = 0x0102030405060708;
      MOE_RETURN_IF_ERROR(c.send(&big, sizeof(big), 1, 9));
      MOE_RETURN_IF_ERROR(c.send(nullptr, 0, 1, 7));
      const int32_t three = 3;
      MOE_RETURN_IF_ERROR(c.send(&three, sizeof(three), 1, 7));
      const int64_t wrong = 42;
      MOE_RETURN_IF_ERROR(c.send(&wrong, sizeof(wrong), 1, 7));  // the receiver expects 4 bytes
      const int32_t four = 4;
      MOE_RETURN_IF_ERROR(c.send(&four, sizeof(four), 1, 7));
      int32_t from_last = 0;
      MOE_RETURN_IF_ERROR(c.recv(&from_last, sizeof(from_last), n - 1, 3));
      EXPECT_EQ(from_last, 1000 + n - 1);
    } else if (r == 1) {
      int32_t a = 0, b = 0, d = 0, e = 0;
      int64_t big = 0;
      MOE_RETURN_IF_ERROR(c.recv(&a, sizeof(a), 0, 7));
      MOE_RETURN_IF_ERROR(c.recv(&b, sizeof(b), 0, 7));
      MOE_RETURN_IF_ERROR(c.recv(&big, sizeof(big), 0, 9));
      MOE_RETURN_IF_ERROR(c.recv(nullptr, 0, 0, 7));
      MOE_RETURN_IF_ERROR(c.recv(&d, sizeof(d), 0, 7));
      int32_t small = 0;
      Status mismatch = c.recv(&small, sizeof(small), 0, 7);
      EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument) << mismatch.to_string();
      EXPECT_CONTAINS(mismatch.message(), "the message has 8 bytes");
      MOE_RETURN_IF_ERROR(c.recv(&e, sizeof(e), 0, 7));
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
      EXPECT_EQ(big, 0x0102030405060708);
      EXPECT_EQ(d, 3);
      EXPECT_EQ(e, 4);
    }
    if (r == n - 1) {
      const int32_t v = 1000 + r;
      MOE_RETURN_IF_ERROR(c.send(&v, sizeof(v), 0, 3));
    }
    return c.barrier();
  });
  EXPECT_ALL_OK(st);
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(f32_results[static_cast<size_t>(r)].size(), f32_results[0].size());
    EXPECT_EQ(std::memcmp(f32_results[static_cast<size_t>(r)].data(), f32_results[0].data(),
                          f32_results[0].size() * sizeof(float)),
              0)
        << "rank " << r << " has other bits than rank 0";
  }
}

TEST(GlooCommunicator, EveryOperationOnThreeRanks) { check_all_ops(3); }
TEST(GlooCommunicator, EveryOperationOnFourRanks) { check_all_ops(4); }

TEST(GlooCommunicator, OneRankGroup) {
  Group g(1, 5);
  ASSERT_TRUE(g.ok());
  GlooCommunicator& c = *g.world(0);
  float f[2] = {1.5f, -2};
  ASSERT_TRUE(c.allreduce_sum(f, 2).ok());
  EXPECT_EQ(f[0], 1.5f);
  EXPECT_EQ(f[1], -2.0f);
  int64_t s = 7, r = 0;
  ASSERT_TRUE(c.alltoall_int64(&s, &r).ok());
  EXPECT_EQ(r, 7);
  char in[3] = {'a', 'b', 'c'}, out[3] = {};
  ASSERT_TRUE(c.allgather(in, 3, out).ok());
  EXPECT_EQ(std::string(out, 3), "abc");
  ASSERT_TRUE(c.broadcast(in, 3, 0).ok());
  ASSERT_TRUE(c.barrier().ok());
  EXPECT_EQ(c.send(in, 3, 0, 1).code(), StatusCode::kInvalidArgument);
}

TEST(GlooCommunicator, NodesFollowWorldRanks) {
  Group g(3, 5, /*ranks_per_node=*/2);
  ASSERT_TRUE(g.ok());
  GlooCommunicator& c = *g.world(1);
  EXPECT_EQ(c.num_nodes(), 2);
  EXPECT_EQ(c.node_of(0), 0);
  EXPECT_EQ(c.node_of(1), 0);
  EXPECT_EQ(c.node_of(2), 1);
  EXPECT_EQ(c.node_of(3), -1);
  EXPECT_EQ(c.world_ranks(), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(c.can_reform());
  FaultyCommunicator wrapped(c, FaultPlan{});  // forwards the re-forming calls
  EXPECT_TRUE(wrapped.can_reform());
  EXPECT_EQ(wrapped.world_ranks(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(wrapped.reform(-1).code(), StatusCode::kInvalidArgument);
}

TEST(GlooCommunicator, SilentPeerIsDeadlineExceededWithinTheTimeout) {
  Group g(2, 0.5);
  ASSERT_TRUE(g.ok());
  const auto t0 = Clock::now();
  auto st = g.run({0}, [](GlooCommunicator& c) { return c.barrier(); });  // rank 1 never calls
  const double took = since(t0);
  EXPECT_EQ(st[0].code(), StatusCode::kDeadlineExceeded) << st[0].to_string();
  EXPECT_CONTAINS(st[0].message(), "gloo barrier on rank 0 of 2: timed out after 0.5 s");
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 2.0);
  // Broken until reform(): later calls fail at once, naming the first failure.
  int64_t v = 1;
  Status later = g.world(0)->allreduce_sum(&v, 1);
  EXPECT_EQ(later.code(), StatusCode::kUnavailable);
  EXPECT_CONTAINS(later.message(), "call reform()");
  EXPECT_CONTAINS(later.message(), "gloo barrier");
}

// ialltoallv runs the exchange at issue: a failed one comes back from the request's
// wait() (and test()); once broken, the next one is refused at issue.
TEST(GlooCommunicator, IalltoallvFailureComesFromTheRequest) {
  Group g(2, 0.3);
  ASSERT_TRUE(g.ok());
  GlooCommunicator& c = *g.world(0);
  const std::vector<size_t> bytes = {4, 4};
  std::vector<unsigned char> send(8, 1), recv(8, 0);
  auto req = c.ialltoallv(send.data(), bytes, recv.data(), bytes);  // rank 1 never joins
  ASSERT_TRUE(req.ok()) << req.status().to_string();
  EXPECT_EQ((*req)->wait().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*req)->test().status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_CONTAINS((*req)->wait().message(), "no data yet from rank(s) 1");
  auto next = c.ialltoallv(send.data(), bytes, recv.data(), bytes);
  EXPECT_EQ(next.status().code(), StatusCode::kUnavailable);
}

TEST(GlooCommunicator, RecvFromSilentPeerNamesItAndTimesOut) {
  Group g(2, 0.4);
  ASSERT_TRUE(g.ok());
  int32_t v = 0;
  const auto t0 = Clock::now();
  Status s = g.world(1)->recv(&v, sizeof(v), 0, 5);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_CONTAINS(s.message(), "recv from rank 0 (tag 5, 4 bytes) on rank 1 of 2");
  EXPECT_CONTAINS(s.message(), "no data yet from rank(s) 0");
  EXPECT_LT(since(t0), 2.0);
}

// Rank 2 of 3 dies ("SIGKILL": its communicator and sockets go away); the survivors'
// next operation fails within the timeout, and reform() gives them a working 2-rank group.
TEST(GlooCommunicator, SurvivorsOfADeadPeerReform) {
  Group g(3, 2.0);
  ASSERT_TRUE(g.ok());
  g.kill(2);
  const auto t0 = Clock::now();
  auto st = g.run({0, 1}, [](GlooCommunicator& c) {
    int64_t v = 1;
    return c.allreduce_sum(&v, 1);
  });
  const double detect = since(t0);
  // Rank 1 (ring neighbour of the dead rank) sees the closed socket; it then closes its
  // own connections, so rank 0 fails at once too instead of waiting out its timeout.
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_CONTAINS(s.message(), "gloo allreduce_sum(int64) on rank ");
    EXPECT_CONTAINS(s.message(), "a peer is gone");
  }
  EXPECT_LT(detect, 1.5);  // well before the 2 s timeout
  const auto t1 = Clock::now();
  st = g.run({0, 1}, [](GlooCommunicator& c) { return c.reform(/*join_seconds=*/0.5); });
  const double reform = since(t1);
  EXPECT_ALL_OK(st);
  EXPECT_LT(reform, 2.5);
  std::printf("dead peer: detected in %.3f s, reformed in %.3f s (join 0.5 s)\n", detect, reform);
  for (int w : {0, 1}) {
    GlooCommunicator& c = *g.world(w);
    EXPECT_EQ(c.rank(), w);
    EXPECT_EQ(c.size(), 2);
    EXPECT_EQ(c.generation(), 1);
    EXPECT_EQ(c.world_ranks(), (std::vector<int>{0, 1}));
  }
  std::vector<float> sums(2);
  st = g.run({0, 1}, [&](GlooCommunicator& c) -> Status {
    float v[2] = {static_cast<float>(10 + c.rank()), 0.25f};
    MOE_RETURN_IF_ERROR(c.allreduce_sum(v, 2));
    EXPECT_EQ(v[1], 0.5f);
    sums[static_cast<size_t>(c.rank())] = v[0];
    return c.barrier();
  });
  EXPECT_ALL_OK(st);
  EXPECT_EQ(sums, (std::vector<float>{21, 21}));
}

// Rank 2 dies in the middle of a stream of exchanges (after 5 alltoallv calls): the
// others' next exchange with it fails with Unavailable within milliseconds, not the timeout.
TEST(GlooCommunicator, PeerDyingBetweenExchangesIsNoticedAtOnce) {
  Group g(3, 2.0);
  ASSERT_TRUE(g.ok());
  std::vector<int> calls(3, 0);
  std::vector<double> failed_after(3, 0);
  auto st = g.run({0, 1, 2}, [&](GlooCommunicator& c) -> Status {
    const int r = c.rank();
    for (int iter = 0; iter < 1000; ++iter) {
      if (r == 2 && iter == 5) {
        g.kill(2);  // its own thread: nothing else uses it
        return ok_status();
      }
      auto b = testing::make_a2a(r, 3, iter);
      const auto t = Clock::now();
      Status s = c.alltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes);
      if (!s.ok()) {
        failed_after[static_cast<size_t>(r)] = since(t);
        return s;
      }
      EXPECT_EQ(testing::a2a_errors(r, 3, b.recv, iter), 0u);
      ++calls[static_cast<size_t>(r)];
    }
    return ok_status();
  });
  EXPECT_TRUE(st[2].ok());
  for (int r : {0, 1}) {
    EXPECT_EQ(st[static_cast<size_t>(r)].code(), StatusCode::kUnavailable) << st[static_cast<size_t>(r)].to_string();
    // >= 5: an exchange in which no bytes go to or come from rank 2 still succeeds.
    EXPECT_GE(calls[static_cast<size_t>(r)], 5);
    EXPECT_LT(failed_after[static_cast<size_t>(r)], 1.5);
  }
}

// Two failures in a row: world rank 3 of 4 dies (generation 1: world ranks 0, 1, 2), then
// world rank 1 (generation 2: world ranks 0 and 2 renumbered 0 and 1; nodes of K = 2).
TEST(GlooCommunicator, SecondFailureGivesGenerationTwo) {
  Group g(4, 2.0, /*ranks_per_node=*/2);
  ASSERT_TRUE(g.ok());
  auto fail_and_reform = [&](const std::vector<int>& survivors) {
    auto st = g.run(survivors, [](GlooCommunicator& c) { return c.barrier(); });
    for (const Status& s : st) EXPECT_TRUE(is_failure(s)) << s.to_string();
    st = g.run(survivors, [](GlooCommunicator& c) { return c.reform(0.5); });
    EXPECT_ALL_OK(st);
  };
  g.kill(3);
  fail_and_reform({0, 1, 2});
  EXPECT_EQ(g.world(2)->rank(), 2);
  EXPECT_EQ(g.world(2)->size(), 3);
  EXPECT_EQ(g.world(2)->generation(), 1);
  g.kill(1);
  fail_and_reform({0, 2});
  GlooCommunicator& c0 = *g.world(0);
  GlooCommunicator& c2 = *g.world(2);
  EXPECT_EQ(c0.rank(), 0);
  EXPECT_EQ(c2.rank(), 1);
  EXPECT_EQ(c2.size(), 2);
  EXPECT_EQ(c2.generation(), 2);
  EXPECT_EQ(c2.world_ranks(), (std::vector<int>{0, 2}));
  EXPECT_EQ(c2.num_nodes(), 2);  // world 0 on node 0, world 2 on node 1
  EXPECT_EQ(c2.node_of(0), 0);
  EXPECT_EQ(c2.node_of(1), 1);
  auto st = g.run({0, 2}, [](GlooCommunicator& c) -> Status {
    int64_t send[2] = {10 * c.rank(), 10 * c.rank() + 1}, recv[2] = {-1, -1};
    MOE_RETURN_IF_ERROR(c.alltoall_int64(send, recv));
    EXPECT_EQ(recv[0], c.rank());
    EXPECT_EQ(recv[1], 10 + c.rank());
    int64_t v = c.world_ranks()[static_cast<size_t>(c.rank())];
    MOE_RETURN_IF_ERROR(c.allreduce_sum(&v, 1));
    EXPECT_EQ(v, 2);
    return ok_status();
  });
  EXPECT_ALL_OK(st);
}

// World rank 2 is alive but late: the others re-form without it; its own reform() then
// finds itself out of the list (Unavailable) and every later call fails.
TEST(GlooCommunicator, LateSurvivorIsLeftOut) {
  Group g(3, 1.0);
  ASSERT_TRUE(g.ok());
  auto st = g.run({0, 1}, [](GlooCommunicator& c) { return c.barrier(); });  // rank 2 never joins
  for (const Status& s : st) EXPECT_TRUE(is_failure(s)) << s.to_string();
  st = g.run({0, 1}, [](GlooCommunicator& c) { return c.reform(0.5); });
  EXPECT_ALL_OK(st);
  EXPECT_EQ(g.world(1)->size(), 2);
  Status late = g.world(2)->reform(0.2);
  EXPECT_EQ(late.code(), StatusCode::kUnavailable) << late.to_string();
  EXPECT_CONTAINS(late.message(), "not among the survivors (0,1)");
  Status after = g.world(2)->barrier();
  EXPECT_EQ(after.code(), StatusCode::kUnavailable);
  EXPECT_CONTAINS(after.message(), "left the group");
  EXPECT_EQ(g.world(2)->reform(0.2).code(), StatusCode::kUnavailable);
  // The two survivors work.
  st = g.run({0, 1}, [](GlooCommunicator& c) { return c.barrier(); });
  EXPECT_ALL_OK(st);
}

// The coordinator (rank 0) is dead: nobody writes a member list; the others give up after
// join + timeout with Unavailable (they must exit).
TEST(GlooCommunicator, NoCoordinatorMeansUnavailable) {
  Group g(3, 0.5);
  ASSERT_TRUE(g.ok());
  g.kill(0);
  const auto t0 = Clock::now();
  auto st = g.run({1, 2}, [](GlooCommunicator& c) { return c.reform(0.2); });
  const double took = since(t0);
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_CONTAINS(s.message(), "the coordinator (rank 0) wrote no member list within 0.7 s");
  }
  EXPECT_GE(took, 0.65);
  EXPECT_LT(took, 2.5);
}

TEST(GlooCommunicator, MissingPeerAtStartIsDeadlineExceeded) {
  const std::string dir = testing::make_temp_dir("gloo");
  GlooOptions o;
  o.store_dir = dir;
  o.timeout_seconds = 0.3;
  const auto t0 = Clock::now();
  auto c = GlooCommunicator::create(0, 2, o);
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().to_string();
  EXPECT_CONTAINS(c.status().message(), "rendezvous of generation 0");
  EXPECT_LT(since(t0), 2.0);
  std::filesystem::remove_all(dir);
}

TEST(GlooCommunicator, StoreDirOfAnEarlierJobIsRefused) {
  const std::string dir = testing::make_temp_dir("gloo");
  GlooOptions o;
  o.store_dir = dir;
  o.timeout_seconds = 1;
  { ASSERT_TRUE(GlooCommunicator::create(0, 1, o).ok()); }
  auto again = GlooCommunicator::create(0, 1, o);
  EXPECT_FALSE(again.ok());
  EXPECT_CONTAINS(again.status().message(), "fresh store_dir");
  std::filesystem::remove_all(dir);
}

TEST(GlooCommunicator, BadOptionsAreInvalidArgumentNamingTheField) {
  const std::string dir = testing::make_temp_dir("gloo");
  GlooOptions o;
  o.store_dir = dir;
  auto expect_bad = [](const StatusOr<std::unique_ptr<GlooCommunicator>>& c, const std::string& field) {
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().to_string();
    EXPECT_CONTAINS(c.status().message(), field);
  };
  expect_bad(GlooCommunicator::create(2, 2, o), "rank must be in [0, size)");
  expect_bad(GlooCommunicator::create(-1, 2, o), "rank must be in [0, size)");
  expect_bad(GlooCommunicator::create(0, 0, o), "size must be >= 1");
  GlooOptions empty = o;
  empty.store_dir.clear();
  expect_bad(GlooCommunicator::create(0, 1, empty), "store_dir is empty");
  GlooOptions file = o;
  file.store_dir = dir + "/a_file";
  std::ofstream(file.store_dir) << "x";
  expect_bad(GlooCommunicator::create(0, 1, file), "store_dir " + file.store_dir + " is not a directory");
  GlooOptions timeout = o;
  timeout.timeout_seconds = 0;
  expect_bad(GlooCommunicator::create(0, 1, timeout), "timeout_seconds 0");
  GlooOptions nodes = o;
  nodes.ranks_per_node = -1;
  expect_bad(GlooCommunicator::create(0, 1, nodes), "ranks_per_node -1");
  GlooOptions host = o;
  host.hostname.clear();
  expect_bad(GlooCommunicator::create(0, 1, host), "hostname is empty");
  {
    auto c = GlooCommunicator::create(0, 1, o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ((*c)->reform(-1).code(), StatusCode::kInvalidArgument);
    int32_t v = 0;
    EXPECT_EQ((*c)->recv(&v, sizeof(v), 1, 0).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ((*c)->broadcast(&v, sizeof(v), 1).code(), StatusCode::kInvalidArgument);
    std::vector<size_t> wrong(2, 0);
    EXPECT_EQ((*c)->alltoallv(nullptr, wrong, nullptr, wrong).code(), StatusCode::kInvalidArgument);
  }
  std::filesystem::remove_all(dir);
}

TEST(Communicator, BackendsWithoutReformSayWhy) {
  InProcessGroup g(2, 0, 5);
  Communicator& c = g.rank(1);
  EXPECT_FALSE(c.can_reform());
  Status s = c.reform(1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(s.message(), "inproc communicator cannot re-form");
  EXPECT_EQ(c.world_ranks(), (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace moe
