// The raw-MPI baselines of `moe bench a2a` (src/moe/comm/mpi_baseline.h), run under
// mpirun (tests/CMakeLists.txt: np 2, 3, 4; also works as a singleton). Every rank runs
// every test in the same order; rank 0 prints gtest's output, the others their failures.
#include "moe/comm/mpi_baseline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/mpi_test_main.h"
#include "contains_util.h"
#include "moe/comm/mpi_communicator.h"

namespace moe {
namespace {

// A byte that says which row it is: (source rank, destination rank, row, byte) mixed.
char row_byte(int src, int dst, int row, int b) { return static_cast<char>(src * 31 + dst * 7 + row * 3 + b); }

TEST(MpiBaseline, ReductionsAndBroadcast) {
  const int me = mpi_world_rank(), n = mpi_world_size();
  ASSERT_GE(n, 1);
  ASSERT_LT(me, n);
  std::vector<double> v = {static_cast<double>(me), -static_cast<double>(me)};
  ASSERT_TRUE(mpi_world_max(&v).ok());
  EXPECT_EQ(v[0], n - 1);
  EXPECT_EQ(v[1], 0);
  double d = me == 0 ? 5.0 : 1.0;
  ASSERT_TRUE(mpi_world_max(&d).ok());
  EXPECT_EQ(d, 5.0);
  int64_t s = me + 1;
  ASSERT_TRUE(mpi_world_sum(&s).ok());
  EXPECT_EQ(s, static_cast<int64_t>(n) * (n + 1) / 2);
  std::vector<int64_t> sv = {1, me};
  ASSERT_TRUE(mpi_world_sum(&sv).ok());
  EXPECT_EQ(sv[0], n);
  EXPECT_EQ(sv[1], static_cast<int64_t>(n) * (n - 1) / 2);
  int b = me == 0 ? 42 : -1;
  ASSERT_TRUE(mpi_world_broadcast(&b).ok());
  EXPECT_EQ(b, 42);
  EXPECT_TRUE(mpi_world_barrier().ok());
}

TEST(MpiBaseline, RowExchangeDeliversRowsGroupedBySourceAndBack) {
  const int me = mpi_world_rank(), n = mpi_world_size();
  const int disp_row = 5, comb_row = 3;
  std::vector<int> counts(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) counts[static_cast<size_t>(d)] = (me + d) % 3;  // zero rows too
  auto x_or = MpiRowExchange::create(counts, disp_row, comb_row);
  ASSERT_TRUE(x_or.ok()) << x_or.status().message();
  MpiRowExchange& x = *x_or.value();
  int64_t expect_recv = 0;
  for (int s = 0; s < n; ++s) expect_recv += (s + me) % 3;
  ASSERT_EQ(x.num_recv_rows(), expect_recv);
  ASSERT_EQ(x.send_displs().size(), static_cast<size_t>(n) + 1);
  std::vector<char> send(static_cast<size_t>(x.num_send_rows() * disp_row) + 1);
  for (int d = 0; d < n; ++d) {
    for (int r = 0; r < counts[static_cast<size_t>(d)]; ++r) {
      for (int b = 0; b < disp_row; ++b) {
        send[static_cast<size_t>((x.send_displs()[static_cast<size_t>(d)] + r) * disp_row + b)] = row_byte(me, d, r, b);
      }
    }
  }
  std::vector<char> recv(static_cast<size_t>(x.num_recv_rows() * disp_row) + 1);
  std::vector<char> back_send(static_cast<size_t>(x.num_recv_rows() * comb_row) + 1);
  std::vector<char> back_recv(static_cast<size_t>(x.num_send_rows() * comb_row) + 1);
  // The combine returns each received row's first comb_row bytes.
  for (int round = 0; round < 2; ++round) {  // the exchange is reusable
    ASSERT_TRUE(x.exchange(send.data(), recv.data(), back_send.data(), back_recv.data()).ok());
    int64_t row = 0;
    for (int s = 0; s < n; ++s) {
      for (int r = 0; r < (s + me) % 3; ++r, ++row) {
        for (int b = 0; b < disp_row; ++b) {
          ASSERT_EQ(recv[static_cast<size_t>(row * disp_row + b)], row_byte(s, me, r, b)) << "from " << s;
        }
        for (int b = 0; b < comb_row; ++b) {
          back_send[static_cast<size_t>(row * comb_row + b)] = recv[static_cast<size_t>(row * disp_row + b)];
        }
      }
    }
  }
  ASSERT_TRUE(x.exchange(send.data(), recv.data(), back_send.data(), back_recv.data()).ok());
  for (int d = 0; d < n; ++d) {
    for (int r = 0; r < counts[static_cast<size_t>(d)]; ++r) {
      for (int b = 0; b < comb_row; ++b) {
        EXPECT_EQ(back_recv[static_cast<size_t>((x.send_displs()[static_cast<size_t>(d)] + r) * comb_row + b)],
                  row_byte(me, d, r, b));
      }
    }
  }
}

// Bad input is rejected before any communication, on every rank alike.
TEST(MpiBaseline, RowExchangeBadInputNamesIt) {
  const int n = mpi_world_size();
  auto bad = MpiRowExchange::create(std::vector<int>(static_cast<size_t>(n) + 1, 0), 4, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(bad.status().message(), "send_counts has " + std::to_string(n + 1) + " entries");
  std::vector<int> counts(static_cast<size_t>(n), 1);
  counts.back() = -1;
  bad = MpiRowExchange::create(counts, 4, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "send_counts[" + std::to_string(n - 1) + "] < 0");
  bad = MpiRowExchange::create(std::vector<int>(static_cast<size_t>(n), 1), 0, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "row size 0 bytes");
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::testing::run_mpi_tests(argc, argv); }
