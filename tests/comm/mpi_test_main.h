// The main() of a GoogleTest program run under mpirun (*_mpitest.cc): MPI initialised
// first; ranks other than 0 print only their failures, prefixed with the rank; at the end
// every rank learns whether any rank failed (an allreduce on a fresh communicator), so
// mpirun exits non-zero if one did. Use: int main(int argc, char** argv) {
// return moe::testing::run_mpi_tests(argc, argv); }
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "moe/comm/mpi_baseline.h"
#include "moe/comm/mpi_communicator.h"

namespace moe::testing {

// Non-zero ranks: only failures, prefixed with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

inline int run_mpi_tests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  Status s = mpi_init(&argc, &argv);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  const int rank = mpi_world_rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();

  // Every rank learns whether any rank failed, and exits accordingly.
  int64_t failed = rc != 0 ? 1 : 0;
  {
    MpiOptions o;
    o.timeout_seconds = 30;
    auto c = make_mpi_communicator(o);
    Status r = c.ok() ? c.value()->allreduce_sum(&failed, 1) : c.status();
    if (!r.ok()) {
      std::fprintf(stderr, "[rank %d] combining results: %s\n", rank, r.to_string().c_str());
      failed = 1;
    }
  }
  if (rank == 0 && failed > 0) std::fprintf(stderr, "[mpi] %lld rank(s) failed\n", static_cast<long long>(failed));
  (void)mpi_finalize();
  return failed > 0 ? 1 : 0;
}

}  // namespace moe::testing
