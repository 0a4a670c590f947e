// FaultyCommunicator over InProcessGroup: a dropped rank, a rank that vanishes between two
// exchanges, a slow rank past and within the deadline, corrupted point-to-point and
// all-to-all messages (exactly one byte flipped, once), and untouched forwarding.
#include "moe/comm/faulty_communicator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "contains_util.h"
#include "moe/comm/inproc_communicator.h"

namespace moe {
namespace {

// run_ranks over a group where rank r's communicator is wrapped with plans[r].
struct Faulty {
  InProcessGroup group;
  std::vector<std::unique_ptr<FaultyCommunicator>> comms;
  std::vector<Status> results;
  Faulty(int n, double timeout, const std::vector<FaultPlan>& plans) : group(n, 0, timeout), results(n) {
    for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<FaultyCommunicator>(group.rank(r), plans[r]));
  }
  void run(const std::function<Status(Communicator&)>& fn) {
    (void)run_ranks(group, [&](Communicator& c) {
      Status st = fn(*comms[static_cast<size_t>(c.rank())]);
      results[static_cast<size_t>(c.rank())] = st;
      return st;
    });
  }
};

TEST(FaultyCommunicator, ForwardsUnchangedWithoutFaults) {
  Faulty f(2, 5, {FaultPlan{}, FaultPlan{}});
  std::vector<int64_t> got(2, -1);
  f.run([&](Communicator& c) -> Status {
    int64_t v = 10 + c.rank();
    MOE_RETURN_IF_ERROR(c.allreduce_sum(&v, 1));
    got[static_cast<size_t>(c.rank())] = v;
    return ok_status();
  });
  EXPECT_TRUE(f.results[0].ok()) << f.results[0].to_string();
  EXPECT_TRUE(f.results[1].ok()) << f.results[1].to_string();
  EXPECT_EQ(got, (std::vector<int64_t>{21, 21}));
  EXPECT_EQ(f.comms[0]->backend(), "inproc+faults");
  EXPECT_EQ(f.comms[1]->counts().ops, 1);
  EXPECT_EQ(f.comms[1]->counts().corrupted, 0);
}

TEST(FaultyCommunicator, DroppedRankIsUnavailableAndItsPeerTimesOut) {
  FaultPlan drop;
  drop.vanish_after_ops = 0;
  Faulty f(2, 0.3, {FaultPlan{}, drop});
  f.run([](Communicator& c) { return c.barrier(); });
  EXPECT_EQ(f.results[1].code(), StatusCode::kUnavailable);
  EXPECT_CONTAINS(f.results[1].message(), "rank 1 is gone");
  EXPECT_EQ(f.results[0].code(), StatusCode::kDeadlineExceeded) << f.results[0].to_string();
  EXPECT_EQ(f.comms[1]->counts().refused, 1);
}

TEST(FaultyCommunicator, RankVanishesBetweenCountsAndPayload) {
  // The counts exchange completes; the payload all-to-all never does.
  FaultPlan vanish;
  vanish.vanish_after_ops = 1;
  Faulty f(2, 0.3, {FaultPlan{}, vanish});
  std::vector<int> stage(2, 0);
  f.run([&](Communicator& c) -> Status {
    int64_t counts[2] = {1, 1}, recv_counts[2] = {0, 0};
    MOE_RETURN_IF_ERROR(c.alltoall_int64(counts, recv_counts));
    stage[static_cast<size_t>(c.rank())] = 1;
    std::vector<uint8_t> send(2, 7), recv(2, 0);
    MOE_RETURN_IF_ERROR(c.alltoallv(send.data(), {1, 1}, recv.data(), {1, 1}));
    stage[static_cast<size_t>(c.rank())] = 2;
    return ok_status();
  });
  EXPECT_EQ(stage, (std::vector<int>{1, 1}));
  EXPECT_EQ(f.results[1].code(), StatusCode::kUnavailable);
  EXPECT_EQ(f.results[0].code(), StatusCode::kDeadlineExceeded) << f.results[0].to_string();
}

TEST(FaultyCommunicator, SlowRankPastTheDeadlineTimesOutItsPeer) {
  FaultPlan slow;
  slow.delay_seconds = 1.0;
  Faulty f(2, 0.2, {FaultPlan{}, slow});
  f.run([](Communicator& c) { return c.barrier(); });
  EXPECT_EQ(f.results[0].code(), StatusCode::kDeadlineExceeded) << f.results[0].to_string();
}

TEST(FaultyCommunicator, SlowRankWithinTheDeadlineStillDeliversExactData) {
  FaultPlan slow;
  slow.delay_seconds = 0.05;
  Faulty f(2, 5, {FaultPlan{}, slow});
  std::vector<int64_t> got(2, 0);
  f.run([&](Communicator& c) -> Status {
    int64_t v = c.rank() == 0 ? 42 : 0;
    MOE_RETURN_IF_ERROR(c.broadcast(&v, sizeof(v), 0));
    got[static_cast<size_t>(c.rank())] = v;
    return ok_status();
  });
  EXPECT_TRUE(f.results[0].ok() && f.results[1].ok());
  EXPECT_EQ(got, (std::vector<int64_t>{42, 42}));
}

TEST(FaultyCommunicator, CorruptsTheFirstRecvWithTheTagOnce) {
  FaultPlan corrupt;
  corrupt.corrupt_recv_tag = 2;
  Faulty f(2, 5, {FaultPlan{}, corrupt});
  const std::vector<uint8_t> msg = {1, 2, 3, 4, 5};
  std::vector<std::vector<uint8_t>> got(3, std::vector<uint8_t>(5, 0));
  f.run([&](Communicator& c) -> Status {
    if (c.rank() == 0) {
      for (int tag : {1, 2, 2}) MOE_RETURN_IF_ERROR(c.send(msg.data(), msg.size(), 1, tag));
      return ok_status();
    }
    MOE_RETURN_IF_ERROR(c.recv(got[0].data(), 5, 0, 1));
    MOE_RETURN_IF_ERROR(c.recv(got[1].data(), 5, 0, 2));
    return c.recv(got[2].data(), 5, 0, 2);
  });
  ASSERT_TRUE(f.results[0].ok() && f.results[1].ok()) << f.results[1].to_string();
  EXPECT_EQ(got[0], msg);                                            // other tag: intact
  EXPECT_EQ(got[1], (std::vector<uint8_t>{1, 2, 3 ^ 0x5a, 4, 5}));  // middle byte flipped
  EXPECT_EQ(got[2], msg);                                            // only once
  EXPECT_EQ(f.comms[1]->counts().corrupted, 1);
}

TEST(FaultyCommunicator, CorruptsTheChosenAlltoallvBlockingAndNonblocking) {
  for (bool nonblocking : {false, true}) {
    FaultPlan corrupt;
    corrupt.corrupt_alltoallv_index = 1;
    Faulty f(2, 5, {corrupt, FaultPlan{}});
    std::vector<std::vector<uint8_t>> got(2);
    f.run([&](Communicator& c) -> Status {
      for (int it = 0; it < 2; ++it) {
        std::vector<uint8_t> send = {static_cast<uint8_t>(10 * c.rank() + it), static_cast<uint8_t>(100 + it)};
        std::vector<uint8_t> recv(2, 0);
        if (nonblocking) {
          MOE_ASSIGN_OR_RETURN(auto req, c.ialltoallv(send.data(), {1, 1}, recv.data(), {1, 1}));
          MOE_RETURN_IF_ERROR(req->wait());
        } else {
          MOE_RETURN_IF_ERROR(c.alltoallv(send.data(), {1, 1}, recv.data(), {1, 1}));
        }
        if (c.rank() == 0) got[static_cast<size_t>(it)] = recv;
      }
      return ok_status();
    });
    ASSERT_TRUE(f.results[0].ok() && f.results[1].ok()) << f.results[0].to_string();
    // Rank 0 receives {its own byte 0 + it, rank 1's byte 10 + it}: iteration 0 intact, iteration 1 has
    // byte 1 (the middle of 2 bytes) flipped.
    EXPECT_EQ(got[0], (std::vector<uint8_t>{0, 10})) << nonblocking;
    EXPECT_EQ(got[1], (std::vector<uint8_t>{1, static_cast<uint8_t>(11 ^ 0x5a)})) << nonblocking;
    EXPECT_EQ(f.comms[0]->counts().corrupted, 1);
  }
}

}  // namespace
}  // namespace moe
