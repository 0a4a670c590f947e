// `mpirun -np 2 moe serve --ep 2`: rank 0 serves HTTP, both ranks step the engine;
// a completion equals `moe generate`'s greedy text, and 32 simultaneous streamed
// requests each get the text the single-process server gives them alone.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "serve_process.h"

namespace moe {
namespace {

using testing::ServeProcess;

TEST(ServeMpirun, TwoRanksServeTheSameTextAsOneProcess) {
  const auto prompts = testing::serve_prompts(32);
  auto max_tokens = [](size_t i) { return 12 + static_cast<int>(i % 4) * 4; };
  std::vector<std::string> alone;
  {
    ServeProcess single({"--threads", "1"});
    ASSERT_GT(single.port(), 0) << single.log();
    for (size_t i = 0; i < prompts.size(); ++i) {
      alone.push_back(testing::stream_completion("127.0.0.1", single.port(), prompts[i], max_tokens(i)).text);
    }
    EXPECT_EQ(single.terminate(), 0) << single.log();
  }
  ServeProcess server({"--ep", "2", "--threads", "1", "--max-num-seqs", "32"}, /*mpirun_np=*/2);
  ASSERT_GT(server.port(), 0) << server.log();
  EXPECT_EQ(testing::stream_completion("127.0.0.1", server.port(), "ROMEO:", 24).text,
            testing::generate_text("ROMEO:", 24));
  std::vector<std::future<testing::Streamed>> futures;
  for (size_t i = 0; i < prompts.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      return testing::stream_completion("127.0.0.1", server.port(), prompts[i], max_tokens(i));
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const testing::Streamed s = futures[i].get();
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, alone[i]) << prompts[i];
  }
  // SIGTERM to rank 0 (the HTTP process): a request in flight finishes, rank 0 stops the
  // workers, every rank and mpirun exit 0. (Not to mpirun: Open MPI kills the ranks 1 s
  // after forwarding a signal.)
  std::atomic<bool> started{false};
  auto in_flight = std::async(std::launch::async, [&] {
    return testing::stream_completion("127.0.0.1", server.port(), "ROMEO:", 480, /*ignore_eos=*/true, &started);
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const pid_t rank0 = server.rank0_pid();
  ASSERT_GT(rank0, 0);
  EXPECT_EQ(server.terminate(60, rank0), 0) << server.log();
  const testing::Streamed last = in_flight.get();
  EXPECT_EQ(last.status, 200);
  EXPECT_TRUE(last.done);
  EXPECT_EQ(last.finish_reason, "length");
}

// Live rebalancing while serving: every 8 steps the planner moves experts between the
// ranks (5 slots per rank: replicas of hot experts); the texts stay those of one process.
TEST(ServeMpirun, LiveRebalancingKeepsTheText) {
  const auto prompts = testing::serve_prompts(12);
  std::vector<std::string> alone;
  for (const auto& p : prompts) alone.push_back(testing::generate_text(p, 24));
  ServeProcess server({"--ep", "2", "--threads", "1", "--rebalance-every", "8", "--rebalance-min-gain", "0",
                       "--slots-per-rank", "5"},
                      /*mpirun_np=*/2, /*log_level=*/"info");
  ASSERT_GT(server.port(), 0) << server.log();
  std::vector<std::future<testing::Streamed>> futures;
  for (const auto& p : prompts) {
    futures.push_back(std::async(std::launch::async, [&, p] {
      return testing::stream_completion("127.0.0.1", server.port(), p, 24);
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(futures[i].get().text, alone[i]) << prompts[i];
  EXPECT_NE(server.log().find("rebalanced: "), std::string::npos) << server.log();
  EXPECT_EQ(server.terminate(60, server.rank0_pid()), 0) << server.log();
}

}  // namespace
}  // namespace moe
