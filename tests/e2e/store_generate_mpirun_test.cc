// `mpirun -np 2 moe generate --ep 2 --model STORE` against the same with the HF
// directory: the same greedy tokens and bitwise the same prompt logits, each rank
// restoring only its experts; a rank on the HF directory and a rank on a store of the
// same model agree (one fingerprint); a store of another model on rank 1 is caught by
// the start-up fingerprint agreement on both ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "contains_util.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "e2e/generate_run.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::moe_binary;
using testing::run_command;
using testing::sh_quote;

const char* kPrompt = "ROMEO:";
const std::string kMpirun = "timeout 300 mpirun --allow-run-as-root --oversubscribe ";

std::string generate_args(const std::string& model, const std::string& logits_path) {
  return " --log-level info generate --ep 2 --threads 1 --model " + sh_quote(model) + " --prompt " + sh_quote(kPrompt) +
         " --max-tokens 24 --temperature 0 --format json --logits-out " + sh_quote(logits_path);
}

using testing::GenRun;

GenRun finish(const testing::CommandResult& r, const std::string& logits_path) {
  return testing::parse_generate_run(r, logits_path);
}

// Both ranks on one model.
GenRun ep2(const std::string& model, const std::string& logits_path) {
  return finish(run_command(kMpirun + "-np 2 " + moe_binary() + generate_args(model, logits_path)), logits_path);
}

// Rank 0 on model_a, rank 1 on model_b (MPMD command line).
GenRun ep2_mixed(const std::string& model_a, const std::string& model_b, const std::string& logits_path) {
  return finish(run_command(kMpirun + "-np 1 " + moe_binary() + generate_args(model_a, logits_path) + " : -np 1 " +
                            moe_binary() + generate_args(model_b, logits_path)),
                logits_path);
}

void convert(const std::string& model, const std::string& store) { testing::convert_to_new_store(model, store); }

TEST(StoreGenerateMpirun, Ep2FromTheStoreEqualsEp2FromTheHfDirectoryBitwise) {
  testing::ScopedTempDir tmp("store_mpirun");
  const std::string store = tmp.file("store");
  convert(testing::tiny_model_dir(), store);
  const GenRun hf = ep2(testing::tiny_model_dir(), tmp.file("hf.f32"));
  const GenRun st = ep2(store, tmp.file("store.f32"));
  ASSERT_EQ(hf.exit_code, 0) << hf.output;
  ASSERT_EQ(st.exit_code, 0) << st.output;
  ASSERT_TRUE(st.json.contains("output_token_ids")) << st.output;
  EXPECT_GT(hf.json["output_token_ids"].size(), 0u);
  EXPECT_EQ(st.json["output_token_ids"], hf.json["output_token_ids"]);
  EXPECT_EQ(st.json["text"], hf.json["text"]);
  ASSERT_GT(hf.logits.size(), 0u);
  EXPECT_TRUE(st.logits == hf.logits) << "prompt logits differ bitwise";
  // Each rank restored half of the 8 experts of each of the 4 layers.
  EXPECT_CONTAINS(st.output, "(16 of 32 experts)");
}

TEST(StoreGenerateMpirun, HfRankAndStoreRankOfOneModelAgree) {
  testing::ScopedTempDir tmp("store_mpirun_mixed");
  const std::string store = tmp.file("store");
  convert(testing::tiny_model_dir(), store);
  const GenRun hf = ep2(testing::tiny_model_dir(), tmp.file("hf.f32"));
  const GenRun mixed = ep2_mixed(testing::tiny_model_dir(), store, tmp.file("mixed.f32"));
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  EXPECT_EQ(mixed.json["output_token_ids"], hf.json["output_token_ids"]);
  EXPECT_TRUE(mixed.logits == hf.logits);
}

TEST(StoreGenerateMpirun, StoreOfAnotherModelOnRank1FailsOnBothRanks) {
  testing::ScopedTempDir tmp("store_mpirun_other");
  const std::string mine = tmp.file("mine"), other = tmp.file("other");
  convert(testing::tiny_model_dir(), mine);
  convert(testing::sharded_model_dir(), other);
  const GenRun r = ep2_mixed(mine, other, tmp.file("x.f32"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "hung";
  EXPECT_CONTAINS(r.output, "rank 0: rank 1 loaded a different model");
  EXPECT_CONTAINS(r.output, "rank 1: rank 1 loaded a different model");
}

}  // namespace
}  // namespace moe
