// InProcessGroup: every collective with 1-4 ranks (threads), byte-exact; timeouts on
// a missing peer; mismatched calls; emulated topology.
#include "moe/comm/inproc_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm_test_util.h"
#include "moe/core/clock.h"

namespace moe {
namespace {

using moe::testing::a2a_errors;
using moe::testing::A2aBuffers;
using moe::testing::make_a2a;

class InProcTest : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, InProcTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "np" + std::to_string(info.param); });

TEST_P(InProcTest, Identity) {
  const int n = GetParam();
  InProcessGroup group(n);
  ASSERT_EQ(group.size(), n);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(group.rank(r).rank(), r);
    EXPECT_EQ(group.rank(r).size(), n);
    EXPECT_EQ(group.rank(r).backend(), "inproc");
    EXPECT_EQ(group.rank(r).num_nodes(), 1);
    EXPECT_EQ(group.rank(r).node_of(r), 0);
  }
}

TEST_P(InProcTest, AlltoallvEveryByte) {
  const int n = GetParam();
  InProcessGroup group(n);
  constexpr int kIters = 12;  // back-to-back: consecutive operations must not mix
  std::vector<std::vector<size_t>> errors(n, std::vector<size_t>(kIters, 999));
  std::vector<std::vector<size_t>> received(n, std::vector<size_t>(kIters, 0));
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    for (int it = 0; it < kIters; ++it) {
      A2aBuffers b = make_a2a(c.rank(), n, it);
      MOE_RETURN_IF_ERROR(c.alltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes));
      errors[c.rank()][it] = a2a_errors(c.rank(), n, b.recv, it);
      received[c.rank()][it] = b.recv.size();
    }
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    for (int it = 0; it < kIters; ++it) {
      EXPECT_EQ(errors[r][it], 0u) << "rank " << r << " iteration " << it;
      total += received[r][it];
    }
  }
  EXPECT_GT(total, 0u);
  if (n > 1) {
    EXPECT_EQ(make_a2a(n - 1, n).send.size(), 0u);  // the silent rank
  }
}

TEST_P(InProcTest, IalltoallvTestPolling) {
  const int n = GetParam();
  InProcessGroup group(n);
  std::vector<size_t> errors(n, 999);
  std::vector<int> polls(n, 0);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    A2aBuffers b = make_a2a(c.rank(), n, 5);
    MOE_ASSIGN_OR_RETURN(auto req, c.ialltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes));
    // Ranks poll at different paces, so some see "not yet" in each phase.
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * c.rank()));
    while (true) {
      MOE_ASSIGN_OR_RETURN(bool done, req->test());
      ++polls[c.rank()];
      if (done) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    MOE_RETURN_IF_ERROR(req->wait());  // already complete: returns at once
    MOE_ASSIGN_OR_RETURN(bool again, req->test());
    if (!again) return internal_error("test() after completion returned false");
    errors[c.rank()] = a2a_errors(c.rank(), n, b.recv, 5);
    // The communicator is free again for the next collective.
    return c.barrier();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], 0u) << "rank " << r;
    EXPECT_GE(polls[r], 1);
  }
}

TEST_P(InProcTest, IalltoallvWaitAndDestroy) {
  const int n = GetParam();
  InProcessGroup group(n);
  std::vector<size_t> errors(n, 999);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    A2aBuffers b1 = make_a2a(c.rank(), n, 1);
    {
      MOE_ASSIGN_OR_RETURN(auto req, c.ialltoallv(b1.send.data(), b1.send_bytes, b1.recv.data(), b1.recv_bytes));
      MOE_RETURN_IF_ERROR(req->wait());
    }
    A2aBuffers b2 = make_a2a(c.rank(), n, 2);
    {
      // Destroyed without wait(): the destructor completes it.
      MOE_ASSIGN_OR_RETURN(auto req, c.ialltoallv(b2.send.data(), b2.send_bytes, b2.recv.data(), b2.recv_bytes));
    }
    errors[c.rank()] = a2a_errors(c.rank(), n, b1.recv, 1) + a2a_errors(c.rank(), n, b2.recv, 2);
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], 0u) << "rank " << r;
}

TEST_P(InProcTest, AlltoallInt64) {
  const int n = GetParam();
  InProcessGroup group(n);
  std::vector<std::vector<int64_t>> out(n);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    std::vector<int64_t> send(n), recv(n, -1);
    for (int d = 0; d < n; ++d) send[d] = (int64_t{c.rank()} << 40) + 1000 * d + 7;
    MOE_RETURN_IF_ERROR(c.alltoall_int64(send.data(), recv.data()));
    out[c.rank()] = recv;
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) {
    for (int src = 0; src < n; ++src) EXPECT_EQ(out[r][src], (int64_t{src} << 40) + 1000 * r + 7);
  }
}

TEST_P(InProcTest, AllreduceExact) {
  const int n = GetParam();
  InProcessGroup group(n);
  constexpr size_t kLen = 1000;
  std::vector<std::vector<float>> outf(n);
  std::vector<std::vector<int64_t>> outi(n);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    std::vector<float> f(kLen);
    std::vector<int64_t> v(kLen);
    for (size_t i = 0; i < kLen; ++i) {
      f[i] = static_cast<float>((c.rank() + 1) * static_cast<int>(i)) - 0.5f;  // exact in f32
      v[i] = (int64_t{1} << 50) * (c.rank() % 2 ? -1 : 1) + static_cast<int64_t>(i) * (c.rank() + 1);
    }
    MOE_RETURN_IF_ERROR(c.allreduce_sum(f.data(), f.size()));
    MOE_RETURN_IF_ERROR(c.allreduce_sum(v.data(), v.size()));
    MOE_RETURN_IF_ERROR(c.allreduce_sum(static_cast<float*>(nullptr), 0));  // empty is fine
    outf[c.rank()] = f;
    outi[c.rank()] = v;
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  const int64_t rank_sum = int64_t{n} * (n + 1) / 2;  // sum of (rank + 1)
  int64_t sign_sum = 0;
  for (int r = 0; r < n; ++r) sign_sum += (r % 2 ? -1 : 1);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < kLen; ++i) {
      ASSERT_EQ(outf[r][i], static_cast<float>(rank_sum * static_cast<int64_t>(i)) - 0.5f * n) << r << " " << i;
      ASSERT_EQ(outi[r][i], (int64_t{1} << 50) * sign_sum + static_cast<int64_t>(i) * rank_sum) << r << " " << i;
    }
  }
}

TEST_P(InProcTest, Allgather) {
  const int n = GetParam();
  InProcessGroup group(n);
  std::vector<std::vector<uint8_t>> out(n);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    std::vector<uint8_t> send(13), recv(13 * n, 0);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<uint8_t>(c.rank() * 50 + i);
    MOE_RETURN_IF_ERROR(c.allgather(send.data(), send.size(), recv.data()));
    out[c.rank()] = recv;
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) {
    for (int src = 0; src < n; ++src) {
      for (size_t i = 0; i < 13; ++i) EXPECT_EQ(out[r][src * 13 + i], static_cast<uint8_t>(src * 50 + i));
    }
  }
}

TEST_P(InProcTest, BroadcastFromLastRank) {
  const int n = GetParam();
  const int root = n - 1;  // non-zero whenever n > 1
  InProcessGroup group(n);
  std::vector<std::vector<uint32_t>> out(n);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    std::vector<uint32_t> data(5000, 0);
    if (c.rank() == root) {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint32_t>(i * 2654435761u);
    }
    MOE_RETURN_IF_ERROR(c.broadcast(data.data(), data.size() * sizeof(uint32_t), root));
    out[c.rank()] = data;
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < 5000; ++i) ASSERT_EQ(out[r][i], static_cast<uint32_t>(i * 2654435761u)) << r;
  }
}

TEST_P(InProcTest, BarrierOrdersPhases) {
  const int n = GetParam();
  InProcessGroup group(n);
  std::atomic<int> before{0};
  std::vector<int> seen(n, -1);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * c.rank()));
    before.fetch_add(1);
    MOE_RETURN_IF_ERROR(c.barrier());
    seen[c.rank()] = before.load();  // everyone arrived before anyone left
    return c.barrier();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], n);
}

TEST_P(InProcTest, SendRecvRing) {
  const int n = GetParam();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  InProcessGroup group(n);
  std::vector<std::vector<int32_t>> got_a(n), got_b(n);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
    std::vector<int32_t> a(1000), b(7);
    for (size_t i = 0; i < a.size(); ++i) a[i] = c.rank() * 100000 + static_cast<int32_t>(i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = -c.rank() - static_cast<int32_t>(i);
    // Two messages with different tags, received in the opposite order.
    MOE_RETURN_IF_ERROR(c.send(a.data(), a.size() * 4, next, 1));
    MOE_RETURN_IF_ERROR(c.send(b.data(), b.size() * 4, next, 2));
    std::vector<int32_t> ra(1000), rb(7);
    MOE_RETURN_IF_ERROR(c.recv(rb.data(), rb.size() * 4, prev, 2));
    MOE_RETURN_IF_ERROR(c.recv(ra.data(), ra.size() * 4, prev, 1));
    got_a[c.rank()] = ra;
    got_b[c.rank()] = rb;
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) {
    const int prev = (r + n - 1) % n;
    for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(got_a[r][i], prev * 100000 + static_cast<int32_t>(i));
    for (size_t i = 0; i < 7; ++i) ASSERT_EQ(got_b[r][i], -prev - static_cast<int32_t>(i));
  }
}

TEST_P(InProcTest, MissingPeerTimesOut) {
  const int n = GetParam();
  if (n < 2) GTEST_SKIP() << "needs a peer";
  const int missing = n - 1;
  InProcessGroup group(n, 0, /*timeout_seconds=*/0.5);
  std::vector<Status> results(n);
  const double t0 = now_seconds();
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    if (c.rank() == missing) return ok_status();  // never calls
    results[c.rank()] = c.barrier();
    return results[c.rank()];
  });
  const double elapsed = now_seconds() - t0;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_GE(elapsed, 0.45);
  EXPECT_LT(elapsed, 5.0);
  for (int r = 0; r < missing; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kDeadlineExceeded) << results[r].to_string();
    EXPECT_NE(results[r].message().find("barrier"), std::string::npos) << results[r].message();
    EXPECT_NE(results[r].message().find("waiting for rank " + std::to_string(missing)), std::string::npos)
        << results[r].message();
  }
  // The group is broken now: later calls fail at once instead of mismatching.
  Status later = group.rank(0).allreduce_sum(static_cast<float*>(nullptr), 0);
  EXPECT_EQ(later.code(), StatusCode::kUnavailable) << later.to_string();
  EXPECT_NE(later.message().find("earlier failure"), std::string::npos) << later.message();
}

TEST(InProcTimeout, IalltoallvMissingPeersNamed) {
  InProcessGroup group(4, 0, 0.3);
  Status st;
  const double t0 = now_seconds();
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    if (c.rank() == 1 || c.rank() == 3) return ok_status();
    A2aBuffers b = make_a2a(c.rank(), 4);
    MOE_ASSIGN_OR_RETURN(auto req, c.ialltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes));
    while (true) {  // test() alone must also give up at the deadline
      MOE_ASSIGN_OR_RETURN(bool done, req->test());
      if (done) return internal_error("completed without ranks 1 and 3");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_LT(now_seconds() - t0, 5.0);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_NE(s.message().find("alltoallv"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ranks 1, 3"), std::string::npos) << s.message();
}

TEST(InProcTimeout, RecvWithoutSenderKeepsGroupUsable) {
  InProcessGroup group(2, 0, 0.3);
  Status recv_status;
  std::atomic<bool> recv_done{false};
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    if (c.rank() == 0) {
      int64_t x = 0;
      recv_status = c.recv(&x, sizeof(x), 1, 42);
      recv_done = true;
    } else {
      while (!recv_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return c.barrier();  // a timed-out receive does not break the group
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(recv_status.code(), StatusCode::kDeadlineExceeded) << recv_status.to_string();
  EXPECT_NE(recv_status.message().find("recv"), std::string::npos) << recv_status.message();
  EXPECT_NE(recv_status.message().find("rank 1"), std::string::npos) << recv_status.message();
}

TEST(InProcErrors, MismatchedOperationsFailEverywhere) {
  InProcessGroup group(3, 0, 5);
  std::vector<Status> results(3);
  const double t0 = now_seconds();
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    float x = 1;
    results[c.rank()] = c.rank() == 1 ? c.barrier() : c.allreduce_sum(&x, 1);
    return results[c.rank()];
  });
  EXPECT_LT(now_seconds() - t0, 2.0);  // detected at the rendezvous, not by timeout
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kInvalidArgument) << results[r].to_string();
  }
  EXPECT_NE(results[0].message().find("rank 1 called barrier"), std::string::npos) << results[0].message();
  // Not broken: a consistent call works.
  EXPECT_TRUE(run_ranks(group, [](Communicator& c) { return c.barrier(); }).ok());
}

TEST(InProcErrors, DisagreeingCountsAndArguments) {
  InProcessGroup group(2, 0, 5);
  std::vector<Status> a2a(2), bcast(2), bad_size(2);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    // Rank 0 sends 4 bytes to rank 1, which expects 5.
    std::vector<uint8_t> buf(16, 0), out(16, 0);
    std::vector<size_t> sb = {0, 4}, rb = {0, 0};
    if (c.rank() == 1) sb = {0, 0}, rb = {5, 0};
    a2a[c.rank()] = c.alltoallv(buf.data(), sb, out.data(), rb);
    // Roots disagree.
    bcast[c.rank()] = c.broadcast(buf.data(), 4, c.rank());
    // Wrong number of counts on rank 1 only.
    std::vector<size_t> three = {0, 0, 0}, two = {0, 0};
    bad_size[c.rank()] = c.alltoallv(buf.data(), c.rank() == 1 ? three : two, out.data(), two);
    return c.barrier();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(a2a[r].code(), StatusCode::kInvalidArgument) << a2a[r].to_string();
    EXPECT_NE(a2a[r].message().find("rank 0 sends 4 bytes to rank 1, which expects 5"), std::string::npos)
        << a2a[r].message();
    EXPECT_EQ(bcast[r].code(), StatusCode::kInvalidArgument) << bcast[r].to_string();
    EXPECT_EQ(bad_size[r].code(), StatusCode::kInvalidArgument) << bad_size[r].to_string();
  }
  EXPECT_NE(bad_size[1].message().find("3 entries"), std::string::npos) << bad_size[1].message();
  EXPECT_NE(bad_size[0].message().find("rank 1 passed invalid arguments"), std::string::npos)
      << bad_size[0].message();
}

TEST(InProcErrors, PointToPointArguments) {
  InProcessGroup group(2, 0, 0.3);
  Communicator& c0 = group.rank(0);
  int x = 0;
  EXPECT_EQ(c0.send(&x, 4, 0, 0).code(), StatusCode::kInvalidArgument);   // self
  EXPECT_EQ(c0.send(&x, 4, 2, 0).code(), StatusCode::kInvalidArgument);   // out of range
  EXPECT_EQ(c0.send(&x, 4, 1, -1).code(), StatusCode::kInvalidArgument);  // negative tag
  // Size mismatch between send and recv.
  ASSERT_TRUE(group.rank(1).send(&x, 4, 0, 9).ok());
  int64_t y = 0;
  Status s = c0.recv(&y, 8, 1, 9);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("sent 4 bytes"), std::string::npos) << s.message();
}

TEST(InProcNonblocking, CollectivesWhileRequestOutstanding) {
  InProcessGroup group(1);
  Communicator& c = group.rank(0);
  std::vector<uint8_t> in(3, 7), out(3, 0);
  auto req = c.ialltoallv(in.data(), {3}, out.data(), {3});
  ASSERT_TRUE(req.ok()) << req.status().to_string();
  EXPECT_TRUE(c.barrier().ok());  // allowed, as under MPI
  EXPECT_TRUE(req.value()->wait().ok());
  EXPECT_EQ(out, in);
}

// The k-th collective of each rank matches the k-th of the others, with requests
// outstanding; a rank blocked in one operation progresses its others (rank 0 sits in
// a barrier while rank 1 waits for rank 0 to copy the first exchange).
TEST_P(InProcTest, InterleavedRequestsAndCollectives) {
  const int n = GetParam();
  InProcessGroup group(n, 0, 10);
  std::vector<size_t> errors(n, 999);
  std::vector<std::vector<int64_t>> counts(n);
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    const int me = c.rank();
    A2aBuffers a = make_a2a(me, n, 7), b = make_a2a(me, n, 8);
    MOE_ASSIGN_OR_RETURN(auto ra, c.ialltoallv(a.send.data(), a.send_bytes, a.recv.data(), a.recv_bytes));
    std::vector<int64_t> send(n, me), recv(n, -1);
    MOE_RETURN_IF_ERROR(c.alltoall_int64(send.data(), recv.data()));
    MOE_ASSIGN_OR_RETURN(auto rb, c.ialltoallv(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes));
    if (me % 2 == 0) {
      MOE_RETURN_IF_ERROR(c.barrier());  // before waiting: must still copy for ra and rb
      MOE_RETURN_IF_ERROR(rb->wait());
      MOE_RETURN_IF_ERROR(ra->wait());
    } else {
      MOE_RETURN_IF_ERROR(ra->wait());
      while (true) {
        MOE_ASSIGN_OR_RETURN(bool done, rb->test());
        if (done) break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      MOE_RETURN_IF_ERROR(c.barrier());
    }
    errors[me] = a2a_errors(me, n, a.recv, 7) + a2a_errors(me, n, b.recv, 8);
    counts[me] = recv;
    return ok_status();
  });
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[r], 0u) << "rank " << r;
    for (int src = 0; src < n; ++src) EXPECT_EQ(counts[r][src], src);
  }
}

TEST(InProcTimeout, RequestNeverWaitedOnIsNamed) {
  // Rank 1 issues the exchange but never completes it: rank 0's wait() names it.
  InProcessGroup group(2, 0, 0.3);
  Status wait_status;
  std::atomic<bool> rank0_done{false};
  Status s = run_ranks(group, [&](Communicator& c) -> Status {
    std::vector<uint8_t> in(4, 1), out(4, 0);
    std::vector<size_t> counts = {2, 2};
    MOE_ASSIGN_OR_RETURN(auto req, c.ialltoallv(in.data(), counts, out.data(), counts));
    if (c.rank() == 0) {
      wait_status = req->wait();
      rank0_done = true;
    } else {
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      Status late = req->wait();  // the group broke meanwhile
      if (late.ok()) return internal_error("rank 1 completed after rank 0 gave up");
    }
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(wait_status.code(), StatusCode::kDeadlineExceeded) << wait_status.to_string();
  EXPECT_NE(wait_status.message().find("waiting for rank 1 to copy"), std::string::npos) << wait_status.message();
}

TEST(InProcTopology, EmulatedNodes) {
  InProcessGroup g4(4, 2);
  EXPECT_EQ(g4.rank(0).num_nodes(), 2);
  std::vector<int> nodes;
  for (int r = 0; r < 4; ++r) nodes.push_back(g4.rank(3).node_of(r));
  EXPECT_EQ(nodes, (std::vector<int>{0, 0, 1, 1}));

  InProcessGroup g5(5, 2);
  EXPECT_EQ(g5.rank(0).num_nodes(), 3);
  EXPECT_EQ(g5.rank(0).node_of(4), 2);

  InProcessGroup g3(3);
  EXPECT_EQ(g3.rank(1).num_nodes(), 1);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(g3.rank(1).node_of(r), 0);
}

TEST(InProcRunRanks, ReturnsFirstErrorWithRank) {
  InProcessGroup group(3);
  Status s = run_ranks(group, [](Communicator& c) -> Status {
    if (c.rank() == 2) return not_found("thing");
    return ok_status();
  });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "rank 2: thing");
  Status e = run_ranks(group, [](Communicator& c) -> Status {
    if (c.rank() == 1) throw std::runtime_error("boom");
    return ok_status();
  });
  EXPECT_EQ(e.code(), StatusCode::kInternal);
  EXPECT_NE(e.message().find("boom"), std::string::npos);
}

}  // namespace
}  // namespace moe
