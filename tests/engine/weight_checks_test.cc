// Silent wrong answers from bad weights, refused at start-up (model/weight_checks.h):
//   - a NaN or Inf weight (Engine::open: DataLoss naming the tensor, unless
//     check_weights_finite is off);
//   - two expert-parallel ranks whose expert weights differ (experts 4 and 5 swapped in
//     rank 1's files): both ranks refuse, naming the layer and expert;
//   - the expert digests: XXH3-128 of the expert's tensors sorted by name, checked
//     against `xxhsum -H2` of those bytes, and equal from an HF directory and from a
//     store of it (taken from the manifest there).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/comm/inproc_communicator.h"
#include "moe/engine.h"
#include "moe/model/config.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weight_checks.h"
#include "moe/store/content_hash.h"
#include "moe/store/store_model.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::ScopedTempDir;
using testing::tiny_model_dir;

constexpr const char* kExpert4 = "model.layers.0.block_sparse_moe.experts.4.";
constexpr const char* kExpert5 = "model.layers.0.block_sparse_moe.experts.5.";

// Where tensor `name`'s bytes start in a single-file safetensors model, and its size.
std::pair<size_t, size_t> tensor_span(const std::string& file, const std::string& name) {
  const std::string bytes = testing::read_file(file);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[static_cast<size_t>(i)])) << (8 * i);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const auto& e = header.at(name);
  const size_t begin = e["data_offsets"][0].get<size_t>(), end = e["data_offsets"][1].get<size_t>();
  return {8 + n + begin, end - begin};
}

void overwrite(const std::string& file, size_t offset, const std::string& data) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// A copy of the tiny model with one BF16 element of `tensor` set to `bits`.
std::string corrupt_copy(const ScopedTempDir& tmp, const std::string& tensor, size_t element, uint16_t bits) {
  const std::string dir = tmp.file("model");
  std::filesystem::create_directories(dir);
  testing::copy_model_dir(tiny_model_dir(), dir);
  const auto [off, size] = tensor_span(dir + "/model.safetensors", tensor);
  EXPECT_LT(element * 2 + 1, size);
  overwrite(dir + "/model.safetensors", off + element * 2, std::string{static_cast<char>(bits & 0xFF), static_cast<char>(bits >> 8)});
  return dir;
}

TEST(WeightChecksTest, NanWeightRefused) {
  ScopedTempDir tmp("nan_weight");
  const std::string tensor = "model.layers.1.self_attn.q_proj.weight";
  const std::string dir = corrupt_copy(tmp, tensor, 1234, 0x7FC0);  // bf16 quiet NaN
  EngineOptions o{.model_dir = dir, .num_threads = 1};
  auto e = Engine::open(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(e.status().message(), tensor);
  EXPECT_CONTAINS(e.status().message(), "NaN at element 1234");
  EXPECT_CONTAINS(e.status().message(), "--skip-weight-check");
  o.check_weights_finite = false;  // skipped: opens (and would serve garbage)
  EXPECT_TRUE(Engine::open(o).ok());
}

TEST(WeightChecksTest, InfExpertWeightRefused) {
  ScopedTempDir tmp("inf_weight");
  const std::string tensor = std::string(kExpert5) + "w2.weight";
  const std::string dir = corrupt_copy(tmp, tensor, 7, 0xFF80);  // bf16 -Inf
  auto e = Engine::open({.model_dir = dir, .num_threads = 1});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(e.status().message(), tensor);
  EXPECT_CONTAINS(e.status().message(), "Inf at element 7");
}

// With --hugepages on the copy into huge pages checks the matrices as it copies them
// (check_weights_finite leaves them out): the same error, naming the tensor; a vector
// weight (a norm) is still found by the scan before it.
TEST(WeightChecksTest, HugePageCopyRefusesTheSameWeights) {
  for (const auto& [tensor, element, bits, what] :
       {std::tuple<std::string, size_t, uint16_t, std::string>{"model.layers.1.self_attn.q_proj.weight", 1234, 0x7FC0,
                                                               "NaN at element 1234"},
        {std::string(kExpert5) + "w2.weight", 7, 0xFF80, "Inf at element 7"},
        {"model.embed_tokens.weight", 262143, 0x7F80, "Inf at element 262143"},  // the last element
        {"model.layers.0.input_layernorm.weight", 3, 0x7FC1, "NaN at element 3"}}) {
    SCOPED_TRACE(tensor);
    ScopedTempDir tmp("nan_hugepages");
    const std::string dir = corrupt_copy(tmp, tensor, element, bits);
    EngineOptions o{.model_dir = dir, .num_threads = 1, .hugepages = "on"};
    auto e = Engine::open(o);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(e.status().message(), "tensor '" + tensor + "' of " + dir + " holds " + what + " (BF16 " +
                                        (tensor == "model.embed_tokens.weight" ? "[2048, 128]"
                                         : tensor.find("input_layernorm") != std::string::npos ? "[128]"
                                         : tensor.find("q_proj") != std::string::npos          ? "[128, 128]"
                                                                                               : "[128, 256]") +
                                        "): the checkpoint is corrupt (skip this check with --skip-weight-check)");
    o.check_weights_finite = false;
    EXPECT_TRUE(Engine::open(o).ok());
  }
}

TEST(WeightChecksTest, SwappedExpertsRefusedAtStartup) {
  ScopedTempDir tmp("swapped_experts");
  const std::string dir = tmp.file("model");
  std::filesystem::create_directories(dir);
  testing::copy_model_dir(tiny_model_dir(), dir);
  const std::string file = dir + "/model.safetensors";
  const std::string original = testing::read_file(file);
  for (const char* w : {"w1.weight", "w2.weight", "w3.weight"}) {
    const auto [a, na] = tensor_span(file, std::string(kExpert4) + w);
    const auto [b, nb] = tensor_span(file, std::string(kExpert5) + w);
    ASSERT_EQ(na, nb);
    overwrite(file, a, original.substr(b, nb));
    overwrite(file, b, original.substr(a, na));
  }
  // Experts 0-3 on rank 0, 4-7 on rank 1: without the expert digests nothing compares
  // rank 1's experts with anything.
  InProcessGroup group(2, 0, 60);
  std::vector<Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      EngineOptions o{.model_dir = r == 0 ? tiny_model_dir() : dir, .num_threads = 1};
      o.comm = &group.rank(r);
      auto e = Engine::open(o);
      results[static_cast<size_t>(r)] = e.status();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Status& st = results[static_cast<size_t>(r)];
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
    EXPECT_CONTAINS(st.message(), "rank 1 loaded different weights for layer 0, expert 4");
  }
}

TEST(WeightChecksTest, SameExpertsAgreeUnderEp) {
  InProcessGroup group(2, 0, 60);
  std::vector<Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      EngineOptions o{.model_dir = tiny_model_dir(), .num_threads = 1};
      o.comm = &group.rank(r);
      results[static_cast<size_t>(r)] = Engine::open(o).status();
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_TRUE(results[0].ok()) << results[0].to_string();
  EXPECT_TRUE(results[1].ok()) << results[1].to_string();
}

TEST(WeightChecksTest, ExpertDigestIsXxh128OfTheSortedTensorsAndTheStoresAgree) {
  auto config = load_model_config(tiny_model_dir());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto hf = HfCheckpoint::open(tiny_model_dir());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  auto digests = expert_digests(*hf, *config, 2);
  ASSERT_TRUE(digests.ok()) << digests.status().to_string();
  const int experts = config->router.num_experts;
  ASSERT_EQ(digests->size(), static_cast<size_t>(config->num_hidden_layers * experts));

  // Independent reference: xxhsum -H2 of expert (0, 5)'s tensors, sorted by name.
  ScopedTempDir tmp("expert_digest");
  std::string bytes;
  for (const char* w : {"w1.weight", "w2.weight", "w3.weight"}) {
    auto t = hf->get(std::string(kExpert5) + w);
    ASSERT_TRUE(t.ok());
    bytes.append(reinterpret_cast<const char*>(t.value()->data), t.value()->nbytes);
  }
  testing::write_file(tmp.file("e5.bin"), bytes);
  const auto x = testing::run_command("(xxhsum -H2 " + tmp.file("e5.bin") + " 2>/dev/null)");
  ASSERT_EQ(x.exit_code, 0) << x.output;
  const ExpertDigest d = (*digests)[5];
  EXPECT_EQ(x.output.substr(0, 32), (Hash128{d.high, d.low}.hex()));
  EXPECT_FALSE((*digests)[4] == (*digests)[5]);

  // The store answers from its manifest: the same digests.
  SaveOptions so;
  so.require_new_store = true;
  ASSERT_TRUE(save_to_store(tiny_model_dir(), tmp.file("store"), so).ok());
  auto store = StoreModel::open(tmp.file("store"));
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE((*store)->recorded_expert_digest(0, 5).has_value());
  auto from_store = expert_digests(**store, *config, 1);
  ASSERT_TRUE(from_store.ok()) << from_store.status().to_string();
  EXPECT_TRUE(*from_store == *digests);
}

}  // namespace
}  // namespace moe
