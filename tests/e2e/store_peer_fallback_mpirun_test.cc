// A rank whose store has a corrupt expert shard and no HF source to fall back to, under
// `mpirun -np 2 moe generate --ep 2`: with a placement that replicates that expert on
// both ranks, rank 1 takes rank 0's copy (hash verified), logs where it came from, and
// the tokens and prompt logits equal the HF run's bitwise; without a replica both ranks
// exit 1 naming the layer and expert, without hanging.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "contains_util.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "store/store_test_util.h"
#include "e2e/generate_run.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::moe_binary;
using testing::run_command;
using testing::sh_quote;

const char* kPrompt = "ROMEO:";
const std::string kMpirun = "timeout 300 mpirun --allow-run-as-root --oversubscribe ";

std::string generate_args(const std::string& model, const std::string& placement, const std::string& logits_path) {
  std::string args = " --log-level info generate --ep 2 --threads 1 --model " + sh_quote(model) + " --prompt " +
                     sh_quote(kPrompt) + " --max-tokens 24 --temperature 0 --format json --logits-out " +
                     sh_quote(logits_path);
  if (!placement.empty()) args += " --placement " + sh_quote(placement);
  return args;
}

using testing::GenRun;

// Rank 0 on model_a, rank 1 on model_b (MPMD command line), both with `placement`.
GenRun ep2(const std::string& model_a, const std::string& model_b, const std::string& placement,
           const std::string& logits_path) {
  const auto r = run_command(kMpirun + "-np 1 " + moe_binary() + generate_args(model_a, placement, logits_path) +
                             " : -np 1 " + moe_binary() + generate_args(model_b, placement, logits_path));
  return testing::parse_generate_run(r, logits_path);
}

void convert(const std::string& model, const std::string& store) { testing::convert_to_new_store(model, store); }

// The shard file of `id` in the store, from its manifest (the layout of manifest.h and
// store_layout.h: shards/<2 hex>/<hash>.shard).
std::string shard_path(const std::string& store, const std::string& id) {
  const std::string current = testing::read_file(store + "/CURRENT");
  const std::string manifest_name = current.substr(0, current.find_first_of("\r\n"));
  const auto manifest = nlohmann::json::parse(testing::read_file(store + "/" + manifest_name));
  for (const auto& shard : manifest.at("shards")) {
    if (shard.at("id") == id) {
      const std::string hash = shard.at("hash");
      return store + "/shards/" + hash.substr(0, 2) + "/" + hash + ".shard";
    }
  }
  return "";
}

using testing::flip_byte;

class StorePeerFallbackMpirun : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    convert(testing::tiny_model_dir(), good_);
    // The corrupt store's HF source is removed after the conversion: no fallback there.
    const std::string gone = tmp_.file("hf_gone");
    testing::copy_tree(testing::tiny_model_dir(), gone);
    convert(gone, bad_);
    fs::remove_all(gone);
    bad_shard_ = shard_path(bad_, "layer.1.expert.3");
    ASSERT_TRUE(fs::exists(bad_shard_)) << bad_shard_;
    flip_byte(bad_shard_, 48 + 100);  // past the shard header, inside the data
  }

  testing::ScopedTempDir tmp_{"store_peer_fallback"};
  std::string good_ = tmp_.file("good");
  std::string bad_ = tmp_.file("bad");
  std::string bad_shard_;
};

TEST_F(StorePeerFallbackMpirun, ReplicaOnTheOtherRankReplacesTheCorruptShardBitwise) {
  // Every layer: rank 0 holds experts 0-3, rank 1 holds 3-7 (expert 3 on both).
  const std::string plan = tmp_.file("plan.json");
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < 4; ++l) {
    layers.push_back({{"layer", l}, {"rank_slots", {{0, 1, 2, 3}, {3, 4, 5, 6, 7}}}});
  }
  testing::write_file(plan, nlohmann::json{{"num_experts", 8}, {"num_ranks", 2}, {"layers", layers}}.dump());
  const GenRun hf = ep2(testing::tiny_model_dir(), testing::tiny_model_dir(), plan, tmp_.file("hf.f32"));
  ASSERT_EQ(hf.exit_code, 0) << hf.output;
  const GenRun peer = ep2(good_, bad_, plan, tmp_.file("peer.f32"));
  ASSERT_EQ(peer.exit_code, 0) << peer.output;
  ASSERT_TRUE(peer.json.contains("output_token_ids")) << peer.output;
  EXPECT_GT(hf.json["output_token_ids"].size(), 0u);
  EXPECT_EQ(peer.json["output_token_ids"], hf.json["output_token_ids"]);
  EXPECT_EQ(peer.json["text"], hf.json["text"]);
  ASSERT_GT(hf.logits.size(), 0u);
  EXPECT_TRUE(peer.logits == hf.logits) << "prompt logits differ bitwise";
  // The log names the expert, the bad file and where the good copy came from.
  EXPECT_CONTAINS(peer.output, "layer 1, expert 3");
  EXPECT_CONTAINS(peer.output, bad_shard_);
  EXPECT_CONTAINS(peer.output, "using the copy from rank 0 (hash verified)");
}

TEST_F(StorePeerFallbackMpirun, WithoutAReplicaBothRanksExit1NamingTheExpert) {
  // Default (contiguous) placement with the corrupt store on rank 0, which alone holds
  // experts 0-3.
  const GenRun r = ep2(bad_, good_, "", tmp_.file("x.f32"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung";
  EXPECT_CONTAINS(r.output, "rank 0: layer 1, expert 3: rank 0 has no good copy");
  EXPECT_CONTAINS(r.output, "rank 1: layer 1, expert 3: rank 0 has no good copy");
  EXPECT_CONTAINS(r.output, "no other rank holds a copy");
  EXPECT_CONTAINS(r.output, bad_shard_);
  EXPECT_FALSE(r.json.contains("output_token_ids"));
}

}  // namespace
}  // namespace moe
