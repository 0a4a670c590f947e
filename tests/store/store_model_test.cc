// StoreModel and the store reader on a store converted from the shipped model: restore
// reads only the experts a rank owns (the others' shard files may be gone), the
// restored bytes equal the safetensors bytes (parsed by the test helper, not by the
// code under test), a corrupt or missing shard falls back to the HF directory it came
// from (and fails with DataLoss/NotFound naming layer, expert and file when that is gone
// too), and broken manifests / CURRENT give clear errors.
#include "moe/store/store_model.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "contains_util.h"
#include "moe/model/config.h"
#include "moe/model/fingerprint.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights.h"
#include "moe/placement/expert_placement.h"
#include "moe/store/shard_file.h"
#include "moe/store/store_layout.h"
#include "moe/store/store_reader.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "log_capture.h"
#include "store/store_test_util.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::mixtral_expert_tensor;

constexpr int kLayers = 4, kExperts = 8;

using testing::LogCapture;

// A copy of the shipped model (so tests can remove it) converted into a store.
class StoreModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    testing::copy_tree(testing::tiny_model_dir(), hf_);
    SaveOptions o;
    o.require_new_store = true;
    auto saved = save_to_store(hf_, store_, o);
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    for (auto& t : testing::parse_safetensors(hf_ + "/model.safetensors")) {
      std::string name = t.name;
      hf_tensors_[name] = std::move(t);
    }
    auto m = read_manifest(store_, 1);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    manifest_ = *m;
  }

  std::unique_ptr<StoreModel> open_store() {
    auto model = StoreModel::open(store_);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    return model.ok() ? std::move(model).value() : nullptr;
  }

  std::string shard_file(int layer, int expert) const {
    const ShardEntry* e = manifest_.find_expert(layer, expert);
    EXPECT_NE(e, nullptr);
    return e ? store_shard_path(store_, e->hash) : "";
  }

  // The restored tensor's bytes equal the safetensors file's.
  void expect_tensor_equals_hf(const StoreModel& model, const std::string& name) {
    auto t = model.get(name);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const auto& want = hf_tensors_.at(name);
    EXPECT_EQ((*t)->dtype_name, want.dtype);
    EXPECT_EQ((*t)->shape, want.shape);
    ASSERT_EQ((*t)->nbytes, want.bytes.size()) << name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>((*t)->data), (*t)->nbytes), want.bytes) << name;
  }

  testing::ShmTempDir tmp_{"store_model"};
  std::string hf_ = tmp_.file("hf");
  std::string store_ = tmp_.file("store");
  std::map<std::string, testing::StTensor> hf_tensors_;
  Manifest manifest_;
};

RestoreOptions two_threads() {
  RestoreOptions o;
  o.threads = 2;
  return o;
}

using testing::flip_byte;

TEST_F(StoreModelTest, RestoresOnlyTheExpertsOfRank1Of4) {
  const ExpertPlacement placement = ExpertPlacement::contiguous(kExperts, 4);  // rank 1: experts 2, 3
  const ExpertFilter rank1 = [&](int, int e) { return placement.holds(1, e); };
  // Proof that the other experts are not read: their shard files and the HF copy are gone.
  uint64_t want_raw = 0;
  int non_expert_shards = 0;
  for (const ShardEntry& e : manifest_.shards) {
    if (e.kind != ShardKind::kExpert) {
      ++non_expert_shards;
      want_raw += e.raw_bytes;
    } else if (e.expert == 2 || e.expert == 3) {
      want_raw += e.raw_bytes;
    } else {
      ASSERT_TRUE(fs::remove(store_shard_path(store_, e.hash))) << e.describe();
    }
  }
  fs::remove_all(hf_);

  auto model = open_store();
  ASSERT_NE(model, nullptr);
  RestoreReport report;
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  RestoreOptions options;
  options.threads = 2;
  options.progress = [&](const std::string&, uint64_t done, uint64_t total) { progress.push_back({done, total}); };
  const Status st = model->restore(rank1, options, &report);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(report.expert_shards_total, kLayers * kExperts);
  EXPECT_EQ(report.expert_shards_read, kLayers * 2);
  EXPECT_EQ(report.shards_read, kLayers * 2 + non_expert_shards);
  EXPECT_EQ(report.fallbacks, 0);
  EXPECT_EQ(report.raw_bytes, want_raw);
  EXPECT_GT(report.stored_bytes, 0u);
  EXPECT_LT(report.stored_bytes, report.raw_bytes);  // bf16 compresses
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().first, want_raw);
  EXPECT_EQ(progress.back().second, want_raw);

  for (const auto& [name, t] : hf_tensors_) {
    const std::string prefix = "block_sparse_moe.experts.";
    const auto at = name.find(prefix);
    if (at == std::string::npos) {
      expect_tensor_equals_hf(*model, name);
      continue;
    }
    const int expert = std::stoi(name.substr(at + prefix.size()));
    const int layer = std::stoi(name.substr(std::string("model.layers.").size()));
    if (expert == 2 || expert == 3) {
      expect_tensor_equals_hf(*model, name);
    } else {
      EXPECT_TRUE(model->contains(name));
      auto g = model->get(name);
      ASSERT_FALSE(g.ok()) << name;
      EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_CONTAINS(g.status().message(), name);
      EXPECT_CONTAINS(g.status().message(), "layer " + std::to_string(layer) + ", expert " + std::to_string(expert));
    }
  }
  auto none = model->get("model.layers.0.nope.weight");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(none.status().message(), store_);

  // The weights bind from it with the same filter, and a second restore is refused.
  auto config = load_model_config(*model);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto weights = bind_weights(*config, *model, rank1);
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  EXPECT_TRUE(weights->layers[3].experts[3].loaded);
  EXPECT_FALSE(weights->layers[3].experts[4].loaded);
  const Status again = model->restore(rank1, options, nullptr);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
}

TEST_F(StoreModelTest, SourceMethodsMatchTheHfDirectory) {
  auto model = open_store();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->location(), "store " + store_ + " (version 1)");
  // Files are readable before restore (config first), and after.
  for (const char* name : {"config.json", "tokenizer.model", "generation_config.json"}) {
    auto bytes = model->read_file(name);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    EXPECT_EQ(*bytes, testing::read_file(testing::tiny_model_dir() + "/" + name));
  }
  auto missing = model->read_file("nope.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), "nope.json");
  EXPECT_CONTAINS(missing.status().message(), store_);

  auto hf = HfCheckpoint::open(testing::tiny_model_dir());
  ASSERT_TRUE(hf.ok());
  const auto a = model->tensor_infos(), b = hf->tensor_infos();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), hf_tensors_.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].dtype_name, b[i].dtype_name);
    EXPECT_EQ(a[i].shape, b[i].shape);
    EXPECT_EQ(a[i].nbytes, b[i].nbytes);
  }
  EXPECT_EQ(model->total_bytes(), hf->total_bytes());

  ASSERT_TRUE(model->restore(nullptr, RestoreOptions{}, nullptr).ok());
  auto config = load_model_config(*model);
  ASSERT_TRUE(config.ok());
  auto w_store = bind_weights(*config, *model);
  auto w_hf = bind_weights(*config, *hf);
  ASSERT_TRUE(w_store.ok() && w_hf.ok());
  // The start-up fingerprint agrees between an HF rank and a store rank of one model.
  EXPECT_EQ(model_fingerprint(*model, *w_store), model_fingerprint(*hf, *w_hf));
  auto bytes = model->read_file("tokenizer.model");  // from the restored copy now
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, testing::read_file(testing::tiny_model_dir() + "/tokenizer.model"));
}

TEST_F(StoreModelTest, ReadExpertGivesTheShardsTensors) {
  auto model = open_store();
  ASSERT_NE(model, nullptr);
  auto shard = model->read_expert(2, 5);
  ASSERT_TRUE(shard.ok()) << shard.status().to_string();
  std::set<std::string> names;
  for (const ShardTensor& t : shard->tensors) {
    names.insert(t.name);
    const auto& want = hf_tensors_.at(t.name);
    ASSERT_LE(t.offset + t.nbytes, shard->bytes.size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(shard->bytes.data() + t.offset), t.nbytes), want.bytes);
  }
  EXPECT_EQ(names, (std::set<std::string>{mixtral_expert_tensor(2, 5, "w1"), mixtral_expert_tensor(2, 5, "w2"),
                                          mixtral_expert_tensor(2, 5, "w3")}));
  auto none = model->read_expert(2, kExperts);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(none.status().message(), "layer 2, expert 8");
}

TEST_F(StoreModelTest, FlippedByteFallsBackToTheSourceDirectory) {
  const std::string bad = shard_file(2, 5);
  flip_byte(bad, kShardHeaderBytes + 100);
  auto model = open_store();
  ASSERT_NE(model, nullptr);
  RestoreReport report;
  Status st;
  std::string log;
  {
    LogCapture capture;
    st = model->restore(nullptr, two_threads(), &report);
    log = capture.text();
  }
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(report.fallbacks, 1);
  for (const char* w : {"w1", "w2", "w3"}) expect_tensor_equals_hf(*model, mixtral_expert_tensor(2, 5, w));
  // The warning names the shard, the bad file and where the good copy came from.
  EXPECT_CONTAINS(log, "layer 2, expert 5");
  EXPECT_CONTAINS(log, bad);
  EXPECT_CONTAINS(log, hf_ + "/model.safetensors");
}

TEST_F(StoreModelTest, CorruptShardWithoutTheSourceIsDataLossNamingLayerExpertAndFile) {
  const std::string bad = shard_file(1, 6);
  flip_byte(bad, kShardHeaderBytes + 7);
  fs::remove_all(hf_);
  auto model = open_store();
  ASSERT_NE(model, nullptr);
  const Status st = model->restore(nullptr, two_threads(), nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(st.message(), "layer 1, expert 6");
  EXPECT_CONTAINS(st.message(), bad);
  EXPECT_CONTAINS(st.message(), hf_);  // the source it also tried
  // Nothing was kept.
  auto g = model->get("model.norm.weight");
  EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition);
  // A filter without that expert restores fine.
  const Status other = model->restore([](int l, int e) { return !(l == 1 && e == 6); }, RestoreOptions{}, nullptr);
  EXPECT_TRUE(other.ok()) << other.to_string();
}

TEST_F(StoreModelTest, TruncatedAndMissingShardsWithoutTheSource) {
  fs::remove_all(hf_);
  const std::string truncated = shard_file(0, 1);
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  auto model = open_store();
  ASSERT_NE(model, nullptr);
  Status st = model->restore([](int l, int e) { return l == 0 && e == 1; }, RestoreOptions{}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(st.message(), "layer 0, expert 1");
  EXPECT_CONTAINS(st.message(), truncated);

  const std::string missing = shard_file(3, 7);
  fs::remove(missing);
  st = model->restore([](int l, int e) { return l == 3 && e == 7; }, RestoreOptions{}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(st.message(), "layer 3, expert 7");
  EXPECT_CONTAINS(st.message(), missing);
}

TEST_F(StoreModelTest, MissingShardFallsBackAndAFileShardToo) {
  fs::remove(shard_file(3, 0));
  const ShardEntry* config = manifest_.find_file("config.json");
  ASSERT_NE(config, nullptr);
  flip_byte(store_shard_path(store_, config->hash), kShardHeaderBytes);
  auto model = open_store();
  ASSERT_NE(model, nullptr);
  auto text = model->read_file("config.json");  // before restore: read now, from the HF copy
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, testing::read_file(hf_ + "/config.json"));
  RestoreReport report;
  ASSERT_TRUE(model->restore(nullptr, RestoreOptions{}, &report).ok());
  EXPECT_EQ(report.fallbacks, 2);
  expect_tensor_equals_hf(*model, mixtral_expert_tensor(3, 0, "w2"));
}

TEST_F(StoreModelTest, ChangedSourceIsNotAGoodCopy) {
  const std::string bad = shard_file(2, 2);
  flip_byte(bad, kShardHeaderBytes + 3);
  testing::bump_tensor_bytes(hf_ + "/model.safetensors", mixtral_expert_tensor(2, 2, "w3"));
  auto model = open_store();
  ASSERT_NE(model, nullptr);
  const Status st = model->restore(nullptr, RestoreOptions{}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(st.message(), "layer 2, expert 2");
  EXPECT_CONTAINS(st.message(), bad);
  EXPECT_CONTAINS(st.message(), "hashes to");
}

TEST_F(StoreModelTest, BrokenManifestOrCurrentGiveClearErrors) {
  const std::string manifest = store_manifest_path(store_, 1);
  const std::string text = testing::read_file(manifest);
  struct Case {
    std::string name, contents;
  };
  for (const Case& c : {Case{"garbage", "\x01\x02 not json"}, Case{"truncated", text.substr(0, text.size() / 2)},
                        Case{"empty", ""}}) {
    testing::write_file(manifest, c.contents);
    auto model = StoreModel::open(store_);
    ASSERT_FALSE(model.ok()) << c.name;
    EXPECT_EQ(model.status().code(), StatusCode::kDataLoss) << c.name;
    EXPECT_CONTAINS(model.status().message(), manifest);
  }
  fs::remove(manifest);
  auto gone = StoreModel::open(store_);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(gone.status().message(), manifest);

  testing::write_file(store_current_path(store_), "garbage\n");
  auto bad_current = current_version(store_);
  ASSERT_FALSE(bad_current.ok());
  EXPECT_EQ(bad_current.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(bad_current.status().message(), store_current_path(store_));

  fs::remove(store_current_path(store_));
  auto no_current = StoreModel::open(store_);
  ASSERT_FALSE(no_current.ok());
  EXPECT_EQ(no_current.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(no_current.status().message(), store_);
  EXPECT_CONTAINS(no_current.status().message(), "CURRENT");
}

TEST_F(StoreModelTest, VersionsAreListedAndOpenable) {
  auto versions = list_versions(store_);
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, (std::vector<int64_t>{1}));
  // A second version after changing one expert: both listed, each opens to its bytes.
  testing::bump_tensor_bytes(hf_ + "/model.safetensors", mixtral_expert_tensor(0, 0, "w1"));
  ASSERT_TRUE(save_to_store(hf_, store_, SaveOptions{}).ok());
  versions = list_versions(store_);
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, (std::vector<int64_t>{1, 2}));
  auto current = current_version(store_);
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(*current, 2);
  auto v1 = StoreModel::open(store_, 1);
  ASSERT_TRUE(v1.ok());
  ASSERT_TRUE((*v1)->restore([](int l, int e) { return l == 0 && e == 0; }, RestoreOptions{}, nullptr).ok());
  expect_tensor_equals_hf(**v1, mixtral_expert_tensor(0, 0, "w1"));  // the original bytes
  auto v3 = StoreModel::open(store_, 3);
  ASSERT_FALSE(v3.ok());
  EXPECT_EQ(v3.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace moe
