// A DeepSeek-V3 model (multi-head latent attention, the noaux_tc router, a dense first
// layer and a shared expert: models/tiny-deepseek-v3-shakespeare) under `moe serve`:
// concurrent streamed greedy requests, with continuous batching over the paged latent
// cache, each get the text `moe generate` gives them alone -- in one process, and under
// `mpirun -np 2 moe serve --ep 2`.
#include <gtest/gtest.h>

#include <future>

#include "serve_process.h"

namespace moe {
namespace {

using testing::ServeProcess;

constexpr const char* kModelName = "tiny-deepseek-v3-shakespeare";

std::string model_dir() { return testing::source_dir() + "/models/" + kModelName; }

void expect_served_texts(const ServeProcess& server, const std::vector<std::string>& prompts,
                         const std::vector<std::string>& expected, int max_tokens) {
  std::vector<std::future<testing::Streamed>> futures;
  for (const auto& p : prompts) {
    futures.push_back(std::async(std::launch::async, [&, p] {
      return testing::stream_completion("127.0.0.1", server.port(), p, max_tokens, false, nullptr, kModelName);
    }));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const testing::Streamed s = futures[i].get();
    EXPECT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, expected[i]) << prompts[i];
  }
}

TEST(ServeDeepseekMpirun, ServedTextsEqualGenerateInOneProcessAndUnderEp2) {
  const auto prompts = testing::serve_prompts(10);
  const int max_tokens = 20;
  std::vector<std::string> alone;
  for (const auto& p : prompts) {
    alone.push_back(testing::generate_text(p, max_tokens, "--model " + testing::sh_quote(model_dir()) +
                                                              " --batch-invariant true"));
    ASSERT_EQ(alone.back().find("<moe generate failed"), std::string::npos) << alone.back();
  }
  {
    ServeProcess single({"--model", model_dir(), "--threads", "1", "--max-num-seqs", "6"});
    ASSERT_GT(single.port(), 0) << single.log();
    expect_served_texts(single, prompts, alone, max_tokens);
    EXPECT_EQ(single.terminate(), 0) << single.log();
  }
  ServeProcess ep({"--model", model_dir(), "--ep", "2", "--threads", "1", "--max-num-seqs", "6"}, /*mpirun_np=*/2);
  ASSERT_GT(ep.port(), 0) << ep.log();
  expect_served_texts(ep, prompts, alone, max_tokens);
  EXPECT_EQ(ep.terminate(60, ep.rank0_pid()), 0) << ep.log();
}

}  // namespace
}  // namespace moe
