// check_config_fits_weights / load_model_config_checked on copies of the shipped models
// (weights symlinked, config.json edited): a size the weights cannot back is refused
// naming the field, its value and what the checkpoint holds, quickly even for absurd
// counts, through Engine::open on a Hugging Face directory and on a checkpoint store.
#include "moe/model/config_fit.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "contains_util.h"
#include "moe/engine.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/weights.h"
#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using moe::testing::read_json;
using moe::testing::ScopedTempDir;
using moe::testing::source_dir;
using moe::testing::tiny_model_dir;
using moe::testing::write_json;

std::string deepseek_dir() { return source_dir() + "/models/tiny-deepseek-v3-shakespeare"; }
std::string qwen2_dir() { return source_dir() + "/tests/data/models/random-qwen2-moe"; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A copy of `model` in a temporary directory: every file symlinked but config.json, which
// gets `edits` (field -> value) applied.
class CorruptedModel {
 public:
  CorruptedModel(const std::string& model, const json& edits) {
    for (const auto& entry : fs::directory_iterator(model)) {
      const std::string name = entry.path().filename().string();
      if (name != "config.json") fs::create_symlink(entry.path(), dir_.file(name));
    }
    json config = read_json(model + "/config.json");
    for (auto it = edits.begin(); it != edits.end(); ++it) config[it.key()] = it.value();
    write_json(dir_.file("config.json"), config);
  }
  const std::string& path() const { return dir_.path(); }
  std::string config_path() const { return dir_.file("config.json"); }
  std::string weights_path() const { return dir_.file("model.safetensors"); }

  // load_model_config_checked over the directory's HfCheckpoint.
  Status load() const {
    auto ckpt = HfCheckpoint::open(path());
    if (!ckpt.ok()) return ckpt.status();
    return load_model_config_checked(*ckpt).status();
  }

 private:
  ScopedTempDir dir_{"config_fit"};
};

void expect_error(const Status& st, StatusCode code, const std::string& message) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_EQ(st.message(), message);
}

TEST(ConfigFitTest, ShippedModelsFit) {
  for (const std::string& model : {tiny_model_dir(), deepseek_dir(), qwen2_dir()}) {
    auto ckpt = HfCheckpoint::open(model);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    auto checked = load_model_config_checked(*ckpt);
    ASSERT_TRUE(checked.ok()) << model << ": " << checked.status().to_string();
    auto plain = load_model_config(model);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(checked->num_hidden_layers, plain->num_hidden_layers);
    EXPECT_EQ(checked->moe_layer, plain->moe_layer);
    EXPECT_TRUE(check_config_fits_weights(*plain, *ckpt).ok());
  }
}

TEST(ConfigFitTest, AbsurdLayerCountIsRefusedBeforeTheParse) {
  CorruptedModel m(tiny_model_dir(), {{"num_hidden_layers", 1000000000}});
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = m.load();
  EXPECT_LT(seconds_since(t0), 1.0);
  expect_error(st, StatusCode::kInvalidArgument,
               m.config_path() +
                   ": num_hidden_layers 1000000000, but the checkpoint has weights for 4 layers (model.layers.0-3)");
}

TEST(ConfigFitTest, OneLayerTooManyIsRefused) {
  CorruptedModel m(tiny_model_dir(), {{"num_hidden_layers", 5}});
  expect_error(m.load(), StatusCode::kInvalidArgument,
               m.config_path() + ": num_hidden_layers 5, but the checkpoint has weights for 4 layers (model.layers.0-3)");
  // Fewer layers than the checkpoint holds run on a prefix of them.
  CorruptedModel fewer(tiny_model_dir(), {{"num_hidden_layers", 3}});
  EXPECT_TRUE(fewer.load().ok());
}

TEST(ConfigFitTest, MixtralExpertCountBeyondTheCheckpoint) {
  for (int experts : {9, 1000000000}) {
    CorruptedModel m(tiny_model_dir(), {{"num_local_experts", experts}});
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = m.load();
    EXPECT_LT(seconds_since(t0), 1.0);
    expect_error(st, StatusCode::kInvalidArgument,
                 m.config_path() + ": num_local_experts " + std::to_string(experts) +
                     ", but the checkpoint has 8 experts in layer 0 (model.layers.0.block_sparse_moe.experts.0-7)");
  }
}

TEST(ConfigFitTest, FewerExpertsThanTheRouterHas) {
  CorruptedModel m(tiny_model_dir(), {{"num_local_experts", 4}});
  expect_error(m.load(), StatusCode::kInvalidArgument,
               m.config_path() +
                   ": num_local_experts 4 does not fit the checkpoint: tensor 'model.layers.0.block_sparse_moe.gate.weight' "
                   "in " + m.weights_path() + " has shape [8, 128] but config.json implies [4, 128]");
}

TEST(ConfigFitTest, DeepseekRoutedExpertCount) {
  CorruptedModel m(deepseek_dir(), {{"n_routed_experts", 1000000000}});
  expect_error(m.load(), StatusCode::kInvalidArgument,
               m.config_path() + ": n_routed_experts 1000000000, but the checkpoint has 16 experts in layer 1 "
                                 "(model.layers.1.mlp.experts.0-15)");
}

TEST(ConfigFitTest, QwenExpertCount) {
  CorruptedModel m(qwen2_dir(), {{"num_experts", 12}});
  expect_error(m.load(), StatusCode::kInvalidArgument,
               m.config_path() +
                   ": num_experts 12, but the checkpoint has 8 experts in layer 0 (model.layers.0.mlp.experts.0-7)");
}

TEST(ConfigFitTest, MoeLayerWhereTheCheckpointIsDense) {
  // Layer 0 of the DeepSeek model is dense (first_k_dense_replace 1).
  CorruptedModel m(deepseek_dir(), {{"first_k_dense_replace", 0}});
  expect_error(m.load(), StatusCode::kInvalidArgument,
               m.config_path() + ": n_routed_experts 16, but the checkpoint has no experts in layer 0 "
                                 "(model.layers.0.mlp.experts.*), which config.json makes an MoE layer");
}

TEST(ConfigFitTest, DenseLayerWhereTheCheckpointHasExperts) {
  // Layer 0 of the Qwen2-MoE model is sparse; mlp_only_layers makes it dense: its MLP is missing.
  CorruptedModel m(qwen2_dir(), {{"mlp_only_layers", json::array({0, 1})}});
  expect_error(m.load(), StatusCode::kNotFound,
               "tensor 'model.layers.0.mlp.gate_proj.weight' not found in " + m.path() + " (" + m.config_path() +
                   ": intermediate_size 96)");
}

TEST(ConfigFitTest, AttentionHeads) {
  {
    CorruptedModel m(tiny_model_dir(), {{"num_attention_heads", 8}});
    expect_error(m.load(), StatusCode::kInvalidArgument,
                 m.config_path() + ": num_attention_heads 8 x head_dim 32 does not fit the checkpoint: tensor "
                                   "'model.layers.0.self_attn.q_proj.weight' in " + m.weights_path() +
                     " has shape [128, 128] but config.json implies [256, 128]");
  }
  {
    CorruptedModel m(tiny_model_dir(), {{"num_attention_heads", 1000000000}});
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = m.load();
    EXPECT_LT(seconds_since(t0), 1.0);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(st.message(), ": num_attention_heads 1000000000 x head_dim 32 does not fit the checkpoint");
  }
  {
    CorruptedModel m(tiny_model_dir(), {{"num_key_value_heads", 4}});
    expect_error(m.load(), StatusCode::kInvalidArgument,
                 m.config_path() + ": num_key_value_heads 4 x head_dim 32 does not fit the checkpoint: tensor "
                                   "'model.layers.0.self_attn.k_proj.weight' in " + m.weights_path() +
                     " has shape [64, 128] but config.json implies [128, 128]");
  }
}

TEST(ConfigFitTest, MlaHeads) {
  CorruptedModel m(deepseek_dir(), {{"num_attention_heads", 8}, {"num_key_value_heads", 8}});
  expect_error(m.load(), StatusCode::kInvalidArgument,
               m.config_path() +
                   ": num_attention_heads 8 x (qk_nope_head_dim 32 + qk_rope_head_dim 16) and q_lora_rank 64 does not "
                   "fit the checkpoint: tensor 'model.layers.0.self_attn.q_b_proj.weight' in " + m.weights_path() +
                   " has shape [192, 64] but config.json implies [384, 64]");
}

TEST(ConfigFitTest, HiddenVocabAndIntermediateSizes) {
  {
    CorruptedModel m(tiny_model_dir(), {{"hidden_size", 256}});
    expect_error(m.load(), StatusCode::kInvalidArgument,
                 m.config_path() + ": hidden_size 256 does not fit the checkpoint: tensor 'model.embed_tokens.weight' in " +
                     m.weights_path() + " has shape [2048, 128] but config.json implies [2048, 256]");
  }
  {
    CorruptedModel m(tiny_model_dir(), {{"vocab_size", 1000000000}});
    expect_error(m.load(), StatusCode::kInvalidArgument,
                 m.config_path() + ": vocab_size 1000000000 does not fit the checkpoint: tensor 'model.embed_tokens.weight' "
                                   "in " + m.weights_path() + " has shape [2048, 128] but config.json implies [1000000000, 128]");
  }
  {
    CorruptedModel m(tiny_model_dir(), {{"intermediate_size", 512}});
    expect_error(m.load(), StatusCode::kInvalidArgument,
                 m.config_path() + ": intermediate_size 512 does not fit the checkpoint: tensor "
                                   "'model.layers.0.block_sparse_moe.experts.0.w1.weight' in " + m.weights_path() +
                     " has shape [256, 128] but config.json implies [512, 128]");
  }
  {
    CorruptedModel m(deepseek_dir(), {{"n_shared_experts", 2}});
    expect_error(m.load(), StatusCode::kInvalidArgument,
                 m.config_path() + ": n_shared_experts 2 x moe_intermediate_size 64 does not fit the checkpoint: tensor "
                                   "'model.layers.1.mlp.shared_experts.gate_proj.weight' in " + m.weights_path() +
                     " has shape [64, 128] but config.json implies [128, 128]");
  }
}

// A source with config.json and no tensors at all.
class NoTensors final : public ModelSource {
 public:
  explicit NoTensors(std::string config) : config_(std::move(config)) {}
  std::string location() const override { return "empty"; }
  StatusOr<std::string> read_file(const std::string& name) const override {
    if (name == "config.json") return config_;
    return not_found(name);
  }
  bool contains(const std::string&) const override { return false; }
  StatusOr<const StoredTensor*> get(const std::string& name) const override { return not_found(name); }
  std::vector<TensorInfo> tensor_infos() const override { return {}; }
  size_t total_bytes() const override { return 0; }

 private:
  std::string config_;
};

TEST(ConfigFitTest, NoLayerWeightsAtAll) {
  const NoTensors source(testing::read_file(tiny_model_dir() + "/config.json"));
  expect_error(load_model_config_checked(source).status(), StatusCode::kInvalidArgument,
               "empty/config.json: num_hidden_layers 4, but the checkpoint has no layer weights (model.layers.*)");
}

// bind_weights alone (no fit check first) refuses the count before sizing the layers.
TEST(ConfigFitTest, BindWeightsRefusesAbsurdLayerCountQuickly) {
  CorruptedModel m(tiny_model_dir(), {{"num_hidden_layers", 1000000000}});
  auto config = load_model_config(m.path());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto ckpt = HfCheckpoint::open(m.path());
  ASSERT_TRUE(ckpt.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto w = bind_weights(*config, *ckpt);
  EXPECT_LT(seconds_since(t0), 1.0);
  ASSERT_FALSE(w.ok());
  expect_error(w.status(), StatusCode::kNotFound,
               "tensor 'model.layers.999999999.input_layernorm.weight' not found in checkpoint " + m.path() +
                   " (config.json: num_hidden_layers 1000000000)");
}

TEST(ConfigFitTest, EngineOpenRefusesQuickly) {
  CorruptedModel m(tiny_model_dir(), {{"num_hidden_layers", 1000000000}});
  const auto t0 = std::chrono::steady_clock::now();
  auto engine = Engine::open({.model_dir = m.path(), .num_threads = 1});
  EXPECT_LT(seconds_since(t0), 2.0);
  ASSERT_FALSE(engine.ok());
  expect_error(engine.status(), StatusCode::kInvalidArgument,
               m.config_path() +
                   ": num_hidden_layers 1000000000, but the checkpoint has weights for 4 layers (model.layers.0-3)");
}

TEST(ConfigFitTest, EngineOpenOnAStoreRefusesQuickly) {
  for (const auto& [field, message] :
       {std::pair<std::string, std::string>{"num_hidden_layers",
                                            "num_hidden_layers 1000000000, but the checkpoint has weights for 4 layers "
                                            "(model.layers.0-3)"},
        {"num_local_experts",
         "num_local_experts 1000000000, but the checkpoint has 8 experts in layer 0 "
         "(model.layers.0.block_sparse_moe.experts.0-7)"}}) {
    SCOPED_TRACE(field);
    CorruptedModel m(tiny_model_dir(), {{field, 1000000000}});
    ScopedTempDir store("config_fit_store");
    auto saved = save_to_store(m.path(), store.file("store"), SaveOptions{});
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    const auto t0 = std::chrono::steady_clock::now();
    auto engine = Engine::open({.model_dir = store.file("store"), .num_threads = 1});
    EXPECT_LT(seconds_since(t0), 2.0);
    ASSERT_FALSE(engine.ok());
    expect_error(engine.status(), StatusCode::kInvalidArgument,
                 "store " + store.file("store") + " (version 1)/config.json: " + message);
  }
}

}  // namespace
}  // namespace moe
