// ModelSource (model/model_source.h): HfCheckpoint as one (read_file, tensor_infos
// sorted by name against an independent safetensors parse, total_bytes, errors naming
// the directory), and config / generation config / tokenizer / fingerprint reading
// through any source (an in-memory one here), with messages naming its location.
#include "moe/model/model_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "contains_util.h"
#include "moe/model/config.h"
#include "moe/model/fingerprint.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/tokenizer.h"
#include "moe/model/weights.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using moe::testing::copy_model_dir;
using moe::testing::parse_safetensors;
using moe::testing::read_file;
using moe::testing::ScopedTempDir;
using moe::testing::sharded_model_dir;
using moe::testing::tiny_model_dir;

// Files from memory, tensors from a wrapped source (or none).
class MemorySource final : public ModelSource {
 public:
  MemorySource(std::string location, std::map<std::string, std::string> files, const ModelSource* tensors = nullptr)
      : location_(std::move(location)), files_(std::move(files)), tensors_(tensors) {}
  std::string location() const override { return location_; }
  StatusOr<std::string> read_file(const std::string& name) const override {
    auto it = files_.find(name);
    if (it == files_.end()) return not_found(name + " not in " + location_);
    return it->second;
  }
  bool contains(const std::string& name) const override { return tensors_ && tensors_->contains(name); }
  StatusOr<const StoredTensor*> get(const std::string& name) const override {
    if (!tensors_) return not_found(name);
    return tensors_->get(name);
  }
  std::vector<TensorInfo> tensor_infos() const override { return tensors_ ? tensors_->tensor_infos() : std::vector<TensorInfo>{}; }
  size_t total_bytes() const override { return tensors_ ? tensors_->total_bytes() : 0; }

 private:
  std::string location_;
  std::map<std::string, std::string> files_;
  const ModelSource* tensors_;
};

TEST(HfCheckpointSourceTest, LocationAndReadFileGiveTheDirectorysBytes) {
  auto ckpt = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  const ModelSource& source = *ckpt;
  EXPECT_EQ(source.location(), tiny_model_dir());
  for (const char* name : {"config.json", "tokenizer.model", "tokenizer_config.json", "generation_config.json"}) {
    auto bytes = source.read_file(name);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    EXPECT_EQ(*bytes, read_file(tiny_model_dir() + "/" + name)) << name;
  }
}

TEST(HfCheckpointSourceTest, ReadFileErrorsNameTheFile) {
  auto ckpt = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(ckpt.ok());
  auto missing = ckpt->read_file("no-such-file.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), tiny_model_dir() + "/no-such-file.json");
  for (const char* bad : {"../config.json", "/etc/hostname", "a/../../b", "..", ""}) {
    auto r = ckpt->read_file(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_CONTAINS(r.status().message(), tiny_model_dir());
  }
}

// Against the test helper's own parse of the safetensors files (not HfCheckpoint's).
void expect_infos_match_files(const std::string& dir, const std::vector<std::string>& files) {
  auto ckpt = HfCheckpoint::open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  std::vector<moe::testing::StTensor> expected;
  for (const auto& f : files) {
    for (auto& t : parse_safetensors(dir + "/" + f)) expected.push_back(std::move(t));
  }
  std::sort(expected.begin(), expected.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  const std::vector<TensorInfo> infos = ckpt->tensor_infos();
  ASSERT_EQ(infos.size(), expected.size());
  size_t total = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    EXPECT_EQ(infos[i].name, expected[i].name);
    EXPECT_EQ(infos[i].dtype_name, expected[i].dtype);
    EXPECT_EQ(infos[i].shape, expected[i].shape) << infos[i].name;
    EXPECT_EQ(infos[i].nbytes, expected[i].bytes.size()) << infos[i].name;
    if (i > 0) {
      EXPECT_LT(infos[i - 1].name, infos[i].name);
    }
    total += expected[i].bytes.size();
  }
  EXPECT_EQ(ckpt->total_bytes(), total);
}

TEST(HfCheckpointSourceTest, TensorInfosAreEveryTensorSortedByName) {
  expect_infos_match_files(tiny_model_dir(), {"model.safetensors"});
  expect_infos_match_files(sharded_model_dir(),
                           {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
}

TEST(HfCheckpointSourceTest, GetAndContains) {
  auto ckpt = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(ckpt.ok());
  const ModelSource& source = *ckpt;
  const std::string name = "model.layers.0.block_sparse_moe.experts.3.w2.weight";
  ASSERT_TRUE(source.contains(name));
  auto t = source.get(name);
  ASSERT_TRUE(t.ok());
  for (const auto& st : parse_safetensors(tiny_model_dir() + "/model.safetensors")) {
    if (st.name != name) continue;
    ASSERT_EQ((*t)->nbytes, st.bytes.size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>((*t)->data), (*t)->nbytes), st.bytes);
  }
  EXPECT_FALSE(source.contains("model.layers.0.no_such.weight"));
  auto missing = source.get("model.layers.0.no_such.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), "model.layers.0.no_such.weight");
  EXPECT_CONTAINS(missing.status().message(), tiny_model_dir());
}

TEST(ModelSourceConfigTest, ConfigThroughASourceEqualsTheDirectorys) {
  auto ckpt = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(ckpt.ok());
  auto from_source = load_model_config(*ckpt);
  auto from_dir = load_model_config(tiny_model_dir());
  ASSERT_TRUE(from_source.ok() && from_dir.ok());
  EXPECT_EQ(from_source->hidden_size, from_dir->hidden_size);
  EXPECT_EQ(from_source->num_hidden_layers, 4);
  EXPECT_EQ(from_source->router.num_experts, 8);
  EXPECT_EQ(from_source->eos_token_ids, from_dir->eos_token_ids);
}

TEST(ModelSourceConfigTest, ErrorsNameTheSourcesFile) {
  MemorySource none("mem:model", {});
  auto missing = load_model_config(none);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), "config.json");
  EXPECT_CONTAINS(missing.status().message(), "mem:model");

  MemorySource bad("mem:model", {{"config.json", "{\"model_type\": \"mixtral\"}"}});
  auto invalid = load_model_config(bad);
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(invalid.status().message(), "mem:model/config.json");

  // A directory with weights but no config.json: the message names the path.
  ScopedTempDir dir("src_noconfig");
  copy_model_dir(sharded_model_dir(), dir.path());
  std::filesystem::remove(dir.file("config.json"));
  auto ckpt = HfCheckpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok());
  auto no_config = load_model_config(*ckpt);
  ASSERT_FALSE(no_config.ok());
  EXPECT_EQ(no_config.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(no_config.status().message(), dir.path() + "/config.json");
}

TEST(ModelSourceConfigTest, GenerationConfigEosIdsAreMergedThroughTheSource) {
  const std::string config_text = read_file(tiny_model_dir() + "/config.json");  // eos_token_id 2
  auto base = parse_model_config(config_text, "x");
  ASSERT_TRUE(base.ok());
  ModelConfig c = *base;
  // 7 is added, 2 is already there, 10^6 is outside the vocabulary, "x" is not an id.
  MemorySource src("mem", {{"config.json", config_text},
                           {"generation_config.json", "{\"eos_token_id\": [2, 7, 1000000, \"x\"]}"}});
  merge_generation_config(src, &c);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 7}));
  // Absent or garbage: nothing changes.
  ModelConfig d = *base;
  merge_generation_config(MemorySource("mem", {}), &d);
  merge_generation_config(MemorySource("mem", {{"generation_config.json", "not json"}}), &d);
  EXPECT_EQ(d.eos_token_ids, (std::vector<int>{2}));
}

TEST(ModelSourceTokenizerTest, LoadsThroughTheSourceLikeFromTheDirectory) {
  auto from_dir = Tokenizer::load(tiny_model_dir());
  ASSERT_TRUE(from_dir.ok());
  MemorySource src("mem", {{"tokenizer.model", read_file(tiny_model_dir() + "/tokenizer.model")},
                           {"tokenizer_config.json", "{\"add_bos_token\": false, \"add_eos_token\": true}"}});
  auto from_source = Tokenizer::load(src);
  ASSERT_TRUE(from_source.ok()) << from_source.status().to_string();
  const std::string text = "To be, or not to be";
  std::vector<int> ids = (*from_dir)->encode(text);  // BOS first (the directory's config)
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(ids.front(), (*from_dir)->bos_id());
  std::vector<int> expected(ids.begin() + 1, ids.end());  // the source's config: no BOS, EOS last
  expected.push_back((*from_dir)->eos_id());
  EXPECT_EQ((*from_source)->encode(text), expected);
  EXPECT_FALSE((*from_source)->add_bos());
  // Without tokenizer_config.json: the defaults (BOS, no EOS).
  MemorySource bare("mem", {{"tokenizer.model", read_file(tiny_model_dir() + "/tokenizer.model")}});
  auto defaults = Tokenizer::load(bare);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ((*defaults)->encode(text), ids);
}

TEST(ModelSourceTokenizerTest, ErrorsNameTheSourcesFile) {
  auto missing = Tokenizer::load(MemorySource("mem:x", {}));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(missing.status().message(), "tokenizer.model");
  auto garbage = Tokenizer::load(MemorySource("mem:x", {{"tokenizer.model", "not a sentencepiece model"}}));
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(garbage.status().message(), "mem:x/tokenizer.model");
  auto bad_config = Tokenizer::load(MemorySource(
      "mem:x", {{"tokenizer.model", read_file(tiny_model_dir() + "/tokenizer.model")}, {"tokenizer_config.json", "["}}));
  ASSERT_FALSE(bad_config.ok());
  EXPECT_EQ(bad_config.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(bad_config.status().message(), "mem:x/tokenizer_config.json");
}

TEST(ModelSourceFingerprintTest, DependsOnConfigAndTensorTableNotOnTheSourceKind) {
  auto ckpt = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(ckpt.ok());
  auto config = load_model_config(*ckpt);
  ASSERT_TRUE(config.ok());
  auto weights = bind_weights(*config, *ckpt);
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  const std::string config_text = read_file(tiny_model_dir() + "/config.json");
  const uint64_t hf = model_fingerprint(*ckpt, *weights);
  // Same config bytes and tensor table through another source: the same fingerprint.
  EXPECT_EQ(model_fingerprint(MemorySource("mem", {{"config.json", config_text}}, &*ckpt), *weights), hf);
  // Another config text: another fingerprint.
  EXPECT_NE(model_fingerprint(MemorySource("mem", {{"config.json", config_text + " "}}, &*ckpt), *weights), hf);
  // Another tensor table (none): another fingerprint.
  EXPECT_NE(model_fingerprint(MemorySource("mem", {{"config.json", config_text}}), *weights), hf);
}

}  // namespace
}  // namespace moe
