// Communicator::split, reduce_scatter_sum and ParallelGroups over the in-process backend
// (the MPI backend runs the same checks in mpi_communicator_mpitest.cc).
#include "moe/comm/parallel_groups.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moe/comm/inproc_communicator.h"

namespace moe {
namespace {

// The world ranks of every member of `sub`, in sub's rank order.
StatusOr<std::vector<int>> members(Communicator& sub, int world_rank) {
  std::vector<int> out(static_cast<size_t>(sub.size()));
  MOE_RETURN_IF_ERROR(sub.allgather(&world_rank, sizeof world_rank, out.data()));
  return out;
}

TEST(ReduceScatter, ExactSums) {
  for (int n : {1, 2, 3, 4}) {
    InProcessGroup g(n);
    const size_t count = 5;
    ASSERT_TRUE(run_ranks(g, [&](Communicator& c) -> Status {
                  const int r = c.rank();
                  std::vector<float> send(static_cast<size_t>(n) * count), recv(count, -1.0f);
                  for (int j = 0; j < n; ++j) {
                    for (size_t i = 0; i < count; ++i) send[j * count + i] = float((r + 1) * 100 + j * 10 + int(i));
                  }
                  MOE_RETURN_IF_ERROR(c.reduce_scatter_sum(send.data(), recv.data(), count));
                  for (size_t i = 0; i < count; ++i) {
                    // sum over ranks q of (q + 1) * 100 + r * 10 + i
                    const float want = float(100 * n * (n + 1) / 2 + n * (r * 10 + int(i)));
                    if (recv[i] != want) {
                      return internal_error("rank " + std::to_string(r) + " element " + std::to_string(i) + ": " +
                                            std::to_string(recv[i]) + " != " + std::to_string(want));
                    }
                  }
                  return ok_status();
                }).ok());
  }
}

TEST(Split, MembersOrderNodesAndIndependence) {
  InProcessGroup g(4, /*ranks_per_node=*/2);
  Status s = run_ranks(g, [&](Communicator& c) -> Status {
    const int r = c.rank();
    // color by parity; key -r reverses the order inside each color.
    MOE_ASSIGN_OR_RETURN(auto sub, c.split(r % 2, -r));
    MOE_ASSIGN_OR_RETURN(std::vector<int> m, members(*sub, r));
    const std::vector<int> want = r % 2 == 0 ? std::vector<int>{2, 0} : std::vector<int>{3, 1};
    if (m != want) return internal_error("rank " + std::to_string(r) + ": wrong members");
    if (sub->size() != 2 || sub->rank() != (r >= 2 ? 0 : 1)) return internal_error("wrong sub rank");
    // Parent nodes {0, 0, 1, 1}: members (2, 0) or (3, 1) sit on nodes (1, 0) -> renumbered (0, 1).
    if (sub->num_nodes() != 2 || sub->node_of(0) != 0 || sub->node_of(1) != 1) return internal_error("wrong nodes");
    // Child and parent operations interleave without matching each other.
    float v = float(r + 1);
    MOE_RETURN_IF_ERROR(sub->allreduce_sum(&v, 1));
    MOE_RETURN_IF_ERROR(c.barrier());
    float w = 1.0f;
    MOE_RETURN_IF_ERROR(c.allreduce_sum(&w, 1));
    const float want_v = r % 2 == 0 ? 4.0f : 6.0f;  // 1 + 3 or 2 + 4
    if (v != want_v || w != 4.0f) return internal_error("wrong sums");
    // A second split of the same parent, and a split of the child.
    MOE_ASSIGN_OR_RETURN(auto all, c.split(0, r));
    MOE_ASSIGN_OR_RETURN(auto one, sub->split(sub->rank(), 0));
    if (all->size() != 4 || all->rank() != r || one->size() != 1 || one->rank() != 0) {
      return internal_error("wrong second split");
    }
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(Split, NegativeColorIsRefused) {
  InProcessGroup g(1);
  auto sub = g.rank(0).split(-1, 0);
  ASSERT_FALSE(sub.ok());
  EXPECT_NE(sub.status().message().find("color -1"), std::string::npos) << sub.status().to_string();
}

TEST(ParallelGroups, HybridTwoByTwo) {
  InProcessGroup g(4, /*ranks_per_node=*/2);
  Status s = run_ranks(g, [&](Communicator& c) -> Status {
    const int r = c.rank();
    MOE_ASSIGN_OR_RETURN(ParallelGroups pg, make_parallel_groups(c, 2, 2));
    if (pg.tp_rank != r % 2 || pg.ep_rank != r / 2 || pg.tp_leader() != (r % 2 == 0)) {
      return internal_error("wrong ranks");
    }
    MOE_ASSIGN_OR_RETURN(std::vector<int> tp, members(*pg.tp, r));
    MOE_ASSIGN_OR_RETURN(std::vector<int> ep, members(*pg.ep, r));
    const std::vector<int> want_tp = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    const std::vector<int> want_ep = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    if (tp != want_tp || ep != want_ep) return internal_error("rank " + std::to_string(r) + ": wrong groups");
    if (pg.tp->num_nodes() != 1 || pg.ep->num_nodes() != 2) return internal_error("wrong group nodes");
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ParallelGroups, PureTpAndPureEpUseTheWorld) {
  InProcessGroup g(2);
  Status s = run_ranks(g, [&](Communicator& c) -> Status {
    MOE_ASSIGN_OR_RETURN(ParallelGroups tp, make_parallel_groups(c, 2, 1));
    MOE_ASSIGN_OR_RETURN(ParallelGroups ep, make_parallel_groups(c, 1, 2));
    if (tp.tp != &c || tp.ep != nullptr || ep.ep != &c || ep.tp != nullptr) return internal_error("wrong groups");
    if (tp.tp_rank != c.rank() || ep.ep_rank != c.rank()) return internal_error("wrong ranks");
    return ok_status();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

std::string error_of(int ranks, int rpn, int tp, int ep) {
  InProcessGroup g(ranks, rpn);
  std::vector<std::string> msgs(static_cast<size_t>(ranks));
  (void)run_ranks(g, [&](Communicator& c) -> Status {
    auto pg = make_parallel_groups(c, tp, ep);
    msgs[static_cast<size_t>(c.rank())] = pg.ok() ? "ok" : pg.status().message();
    return ok_status();
  });
  for (const std::string& m : msgs) EXPECT_EQ(m, msgs[0]);  // every rank agrees
  return msgs[0];
}

TEST(ParallelGroups, BadShapesNameTheFlags) {
  EXPECT_NE(error_of(4, 0, 3, 1).find("--tp 3 x --ep 1 = 3 ranks, but the world has 4"), std::string::npos);
  EXPECT_NE(error_of(4, 0, 2, 1).find("world has 4"), std::string::npos);
  EXPECT_NE(error_of(2, 0, 0, 2).find("--tp must be >= 1"), std::string::npos);
  EXPECT_NE(error_of(2, 0, 2, 0).find("--ep must be >= 1"), std::string::npos);
  const std::string spans = error_of(4, 2, 4, 1);
  EXPECT_NE(spans.find("TP group 0 (ranks 0..3) spans node 0 (rank 0) and node 1 (rank 2)"), std::string::npos)
      << spans;
  EXPECT_EQ(error_of(4, 2, 2, 2), "ok");
}

}  // namespace
}  // namespace moe
