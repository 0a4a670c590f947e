// `moe ckpt` end to end on a copy of the shipped model: convert, info, verify, restore
// (compared with `diff -r`, an independent byte comparison), incremental save, gc, and
// the errors a user gets for bad stores and flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moe::testing {
namespace {

namespace fs = std::filesystem;

class CkptCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("ckpt_cli");
    ASSERT_FALSE(dir_.empty());
    model_ = dir_ + "/model";
    fs::copy(tiny_model_dir(), model_, fs::copy_options::recursive);
    store_ = dir_ + "/store";
  }
  void TearDown() override { fs::remove_all(dir_); }

  CommandResult moe(const std::string& args) { return run_command(sh_quote(moe_binary()) + " " + args); }

  // The store's current manifest, read as the format documents it (CURRENT names it).
  nlohmann::json current_manifest() {
    std::string name = read_file(store_ + "/CURRENT");
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
    return nlohmann::json::parse(read_file(store_ + "/" + name));
  }

  // Path of the shard file with id `id` under the documented layout shards/<2 hex>/<hash>.shard.
  std::string shard_path(const std::string& id) {
    const nlohmann::json manifest = current_manifest();
    for (const auto& s : manifest["shards"]) {
      if (s["id"] == id) {
        const std::string h = s["hash"];
        return store_ + "/shards/" + h.substr(0, 2) + "/" + h + ".shard";
      }
    }
    ADD_FAILURE() << "no shard " << id;
    return "";
  }

  // Overwrites 3 bytes at the start of tensor `name` in model.safetensors of `model`.
  void touch_tensor(const std::string& model, const std::string& name) {
    const std::string file = model + "/model.safetensors";
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t n = 0;
    io.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    io.read(header.data(), static_cast<std::streamsize>(n));
    auto j = nlohmann::json::parse(header);
    ASSERT_TRUE(j.contains(name));
    io.seekp(static_cast<std::streamoff>(8 + n + j[name]["data_offsets"][0].get<uint64_t>()));
    io.write("\x11\x22\x33", 3);
    ASSERT_TRUE(io.good());
  }

  std::string dir_, model_, store_;
};

TEST_F(CkptCliTest, ConvertInfoVerifyRestoreRoundTripsByteExact) {
  auto conv = moe("ckpt convert --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_));
  ASSERT_EQ(conv.exit_code, 0) << conv.output;
  EXPECT_NE(conv.output.find("as version 1"), std::string::npos) << conv.output;
  // 4 MoE layers x 8 experts = 32 expert shards, among others; nothing skipped in a new store.
  EXPECT_NE(conv.output.find("skipped: 0 shards"), std::string::npos) << conv.output;
  int experts = 0;
  const nlohmann::json manifest = current_manifest();
  for (const auto& s : manifest["shards"]) experts += s["kind"] == "expert" ? 1 : 0;
  EXPECT_EQ(experts, 32);

  auto info = moe("ckpt info --store " + sh_quote(store_));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("1*"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("mixtral"), std::string::npos) << info.output;
  auto info_json = moe("ckpt info --format json --store " + sh_quote(store_));
  ASSERT_EQ(info_json.exit_code, 0) << info_json.output;
  auto j = nlohmann::json::parse(info_json.output);
  EXPECT_EQ(j["current_version"], 1);
  EXPECT_EQ(j["versions"][0]["expert_shards"], 32);

  auto verify = moe("ckpt verify --quiet --store " + sh_quote(store_));
  ASSERT_EQ(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find("ok: version 1"), std::string::npos) << verify.output;

  const std::string out = dir_ + "/restored";
  auto restore = moe("ckpt restore --quiet --store " + sh_quote(store_) + " --out " + sh_quote(out));
  ASSERT_EQ(restore.exit_code, 0) << restore.output;
  auto diff = run_command("diff -r " + sh_quote(model_) + " " + sh_quote(out));
  EXPECT_EQ(diff.exit_code, 0) << diff.output;

  // Restoring into a directory that has files is refused, naming it.
  auto again = moe("ckpt restore --quiet --store " + sh_quote(store_) + " --out " + sh_quote(out));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.output.find(out), std::string::npos) << again.output;
  // A second convert into the same store is refused (use save).
  auto conv2 = moe("ckpt convert --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_));
  EXPECT_EQ(conv2.exit_code, 1) << conv2.output;
}

TEST_F(CkptCliTest, IncrementalSaveWritesOnlyTheChangedExpertAndKeepsOldVersions) {
  const std::string original = dir_ + "/original";
  fs::copy(model_, original, fs::copy_options::recursive);
  ASSERT_EQ(moe("ckpt convert --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_)).exit_code, 0);
  touch_tensor(model_, "model.layers.2.block_sparse_moe.experts.5.w3.weight");
  auto save = moe("ckpt save --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_));
  ASSERT_EQ(save.exit_code, 0) << save.output;
  EXPECT_NE(save.output.find("as version 2"), std::string::npos) << save.output;
  EXPECT_NE(save.output.find("written: 1 shards"), std::string::npos) << save.output;

  const std::string v1 = dir_ + "/v1", v2 = dir_ + "/v2";
  ASSERT_EQ(moe("ckpt restore --quiet --version 1 --store " + sh_quote(store_) + " --out " + sh_quote(v1)).exit_code, 0);
  ASSERT_EQ(moe("ckpt restore --quiet --store " + sh_quote(store_) + " --out " + sh_quote(v2)).exit_code, 0);
  EXPECT_EQ(run_command("diff -r " + sh_quote(original) + " " + sh_quote(v1)).exit_code, 0);
  EXPECT_EQ(run_command("diff -r " + sh_quote(model_) + " " + sh_quote(v2)).exit_code, 0);

  auto gc = moe("ckpt gc --keep 1 --store " + sh_quote(store_));
  ASSERT_EQ(gc.exit_code, 0) << gc.output;
  EXPECT_NE(gc.output.find("removed 1 versions (1), 1 shard files"), std::string::npos) << gc.output;
  EXPECT_FALSE(fs::exists(store_ + "/MANIFEST-000001"));
  EXPECT_EQ(moe("ckpt verify --quiet --store " + sh_quote(store_)).exit_code, 0);
  auto zero = moe("ckpt gc --keep 0 --store " + sh_quote(store_));
  EXPECT_EQ(zero.exit_code, 1) << zero.output;
}

TEST_F(CkptCliTest, VerifyNamesEachBadShardByLayerAndExpert) {
  ASSERT_EQ(moe("ckpt convert --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_)).exit_code, 0);
  const std::string flipped = shard_path("layer.1.expert.3");
  {
    std::fstream io(flipped, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(io.tellg());
    io.seekp(size - 10);
    char c = 0;
    io.seekg(size - 10);
    io.read(&c, 1);
    io.seekp(size - 10);
    c = static_cast<char>(c ^ 0x40);
    io.write(&c, 1);
  }
  const std::string removed = shard_path("layer.3.expert.0");
  fs::remove(removed);
  auto verify = moe("ckpt verify --quiet --store " + sh_quote(store_));
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_NE(verify.output.find("layer 1, expert 3"), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find(flipped), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("layer 3, expert 0"), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find(removed), std::string::npos) << verify.output;
  EXPECT_NE(verify.output.find("2 of"), std::string::npos) << verify.output;
}

TEST_F(CkptCliTest, BadStoresAndFlagsGetClearErrors) {
  const std::string missing = dir_ + "/no-such-store";
  auto r = moe("ckpt verify --store " + sh_quote(missing));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(missing), std::string::npos) << r.output;

  ASSERT_EQ(moe("ckpt convert --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_)).exit_code, 0);
  write_file(store_ + "/MANIFEST-000001", "{\"format\": \"moe-expert-store\", \"vers");
  r = moe("ckpt info --store " + sh_quote(store_));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("MANIFEST-000001"), std::string::npos) << r.output;

  r = moe("ckpt convert --codec lz4 --from " + sh_quote(model_) + " --store " + sh_quote(dir_ + "/s2"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("lz4"), std::string::npos) << r.output;
  r = moe("ckpt convert --codec raw --level 9 --from " + sh_quote(model_) + " --store " + sh_quote(dir_ + "/s5"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--level has no effect with --codec raw"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/s5"));
  r = moe("ckpt convert --level 0 --from " + sh_quote(model_) + " --store " + sh_quote(dir_ + "/s3"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--level"), std::string::npos) << r.output;
  r = moe("ckpt convert --from " + sh_quote(dir_ + "/no-model") + " --store " + sh_quote(dir_ + "/s4"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no-model"), std::string::npos) << r.output;

  for (const char* sub : {"convert", "save", "restore", "verify", "info", "gc"}) {
    auto help = moe(std::string("ckpt ") + sub + " --help");
    EXPECT_EQ(help.exit_code, 0) << sub << ": " << help.output;
    EXPECT_NE(help.output.find("--store"), std::string::npos) << sub;
  }
}

// What a new user hit (a fresh-eyes trial): each used to lose data, mislead or leave junk.
TEST_F(CkptCliTest, StoreMistakesAreRefusedWithoutLosingVersions) {
  ASSERT_EQ(moe("ckpt convert --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_)).exit_code, 0);
  touch_tensor(model_, "model.layers.0.block_sparse_moe.experts.1.w1.weight");
  ASSERT_EQ(moe("ckpt save --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_)).exit_code, 0);

  // A save of an unchanged model makes no new version.
  auto same = moe("ckpt save --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_));
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("unchanged"), std::string::npos) << same.output;
  EXPECT_FALSE(fs::exists(store_ + "/MANIFEST-000003"));

  // CURRENT lost: gc, info, verify and generate refuse, naming CURRENT and the fix; a save
  // commits a new version above the existing ones (it used to overwrite version 1).
  const std::string v1 = read_file(store_ + "/MANIFEST-000001");
  fs::remove(store_ + "/CURRENT");
  for (const std::string& cmd : {"ckpt gc --keep 1 --store " + sh_quote(store_), "ckpt info --store " + sh_quote(store_),
                                 "ckpt verify --store " + sh_quote(store_),
                                 "generate --threads 1 --max-tokens 2 --prompt hi --model " + sh_quote(store_)}) {
    auto r = moe(cmd);
    EXPECT_EQ(r.exit_code, 1) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("CURRENT is missing"), std::string::npos) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("echo MANIFEST-000002 >"), std::string::npos) << cmd << "\n" << r.output;
  }
  EXPECT_TRUE(fs::exists(store_ + "/MANIFEST-000002"));
  auto resave = moe("ckpt save --quiet --from " + sh_quote(model_) + " --store " + sh_quote(store_));
  EXPECT_EQ(resave.exit_code, 0) << resave.output;
  EXPECT_NE(resave.output.find("as version 3"), std::string::npos) << resave.output;
  EXPECT_EQ(read_file(store_ + "/MANIFEST-000001"), v1);
  write_file(store_ + "/CURRENT", "MANIFEST-000002\n");

  // CURRENT naming a missing manifest, or an unreadable current manifest: info fails but
  // still lists the readable versions.
  write_file(store_ + "/CURRENT", "MANIFEST-000009\n");
  auto info = moe("ckpt info --store " + sh_quote(store_));
  EXPECT_EQ(info.exit_code, 1) << info.output;
  EXPECT_NE(info.output.find("MANIFEST-000009 is missing"), std::string::npos) << info.output;
  write_file(store_ + "/CURRENT", "MANIFEST-000002\n");
  const std::string v2 = read_file(store_ + "/MANIFEST-000002");
  write_file(store_ + "/MANIFEST-000002", v2.substr(0, v2.size() / 2));
  info = moe("ckpt info --store " + sh_quote(store_));
  EXPECT_EQ(info.exit_code, 1) << info.output;
  EXPECT_NE(info.output.find("unreadable"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("mixtral"), std::string::npos) << info.output;  // version 1's row
  write_file(store_ + "/MANIFEST-000002", v2);

  // A store inside the model directory is refused (a save would copy it into itself).
  auto nested = moe("ckpt convert --quiet --from " + sh_quote(model_) + " --store " + sh_quote(model_ + "/store"));
  EXPECT_EQ(nested.exit_code, 1) << nested.output;
  EXPECT_NE(nested.output.find("inside the model directory"), std::string::npos) << nested.output;
  EXPECT_FALSE(fs::exists(model_ + "/store"));

  // A restore that fails (a corrupt shard, its source directory gone) leaves nothing behind.
  const std::string bad = shard_path("layer.0.expert.1");
  {
    std::fstream io(bad, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(60);
    io.write("\xff\xfe", 2);
  }
  fs::rename(model_, dir_ + "/moved-away");
  const std::string out = dir_ + "/restored";
  auto restore = moe("ckpt restore --quiet --store " + sh_quote(store_) + " --out " + sh_quote(out));
  EXPECT_EQ(restore.exit_code, 1) << restore.output;
  EXPECT_NE(restore.output.find("layer 0, expert 1"), std::string::npos) << restore.output;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find("restored.partial"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace moe::testing
