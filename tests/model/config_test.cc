// parse_model_config / load_model_config: the shipped config parses to exact values;
// every invalid config is rejected with a message naming the source and the field.
#include "moe/model/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using moe::testing::read_file;
using moe::testing::ScopedTempDir;
using moe::testing::tiny_model_dir;
using moe::testing::write_file;

constexpr const char* kSource = "/models/test/config.json";

// The shipped tiny model's config.json, as JSON to mutate.
json tiny_config() { return json::parse(read_file(tiny_model_dir() + "/config.json")); }

StatusOr<ModelConfig> parse(const json& j) { return parse_model_config(j.dump(), kSource); }

// Parses `j`, expects `code`, and checks the message names the source and `needles`.
void expect_error(const json& j, StatusCode code, std::initializer_list<std::string> needles) {
  auto c = parse(j);
  ASSERT_FALSE(c.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_CONTAINS(c.status().message(), kSource);
  for (const auto& n : needles) EXPECT_CONTAINS(c.status().message(), n);
}

TEST(ConfigTest, TinyModelConfigParsesExactly) {
  auto c = load_model_config(tiny_model_dir());
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "mixtral");
  EXPECT_EQ(c->family, ModelFamily::kMixtral);
  EXPECT_EQ(c->vocab_size, 2048);
  EXPECT_EQ(c->hidden_size, 128);
  EXPECT_EQ(c->intermediate_size, 256);
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->router.num_experts, 8);
  EXPECT_EQ(c->router.top_k, 2);
  EXPECT_EQ(c->router.scoring, RouterConfig::Scoring::kSoftmax);
  EXPECT_TRUE(c->router.norm_topk_prob);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{2});
  EXPECT_TRUE(c->is_eos(2));
  EXPECT_FALSE(c->is_eos(1));
}

TEST(ConfigTest, DefaultsWhenOptionalFieldsAbsent) {
  json j = tiny_config();
  for (const char* f : {"num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "bos_token_id",
                        "eos_token_id", "tie_word_embeddings", "hidden_act", "sliding_window"}) {
    j.erase(f);
  }
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_key_value_heads, 4);  // = num_attention_heads
  EXPECT_EQ(c->head_dim, 32);            // = hidden / heads
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(ConfigTest, EosListAndSlidingWindow) {
  json j = tiny_config();
  j["eos_token_id"] = {2, 7};
  j["sliding_window"] = 128;
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{2, 7}));
  EXPECT_EQ(c->max_position_embeddings, 128);  // the window bounds the usable context
}

TEST(ConfigTest, MissingConfigJsonIsNotFoundNamingFile) {
  ScopedTempDir dir("config_missing");
  auto c = load_model_config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(c.status().message(), dir.path() + "/config.json");
}

TEST(ConfigTest, LoadNamesFileInParseErrors) {
  ScopedTempDir dir("config_load");
  write_file(dir.file("config.json"), "{\"model_type\": \"mixtral\"}");
  auto c = load_model_config(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(c.status().message(), dir.path() + "/config.json");
  EXPECT_CONTAINS(c.status().message(), "'vocab_size'");
}

TEST(ConfigTest, InvalidJson) {
  auto c = parse_model_config("{\"model_type\": \"mixtral\",", kSource);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(c.status().message(), kSource);
  EXPECT_CONTAINS(c.status().message(), "not a valid JSON object");
}

TEST(ConfigTest, JsonNotAnObject) {
  auto c = parse_model_config("[\"mixtral\"]", kSource);
  ASSERT_FALSE(c.ok());
  EXPECT_CONTAINS(c.status().message(), kSource);
  EXPECT_CONTAINS(c.status().message(), "JSON object");
}

TEST(ConfigTest, MissingModelType) {
  json j = tiny_config();
  j.erase("model_type");
  expect_error(j, StatusCode::kInvalidArgument, {"'model_type'", "missing"});
}

TEST(ConfigTest, ModelTypeNotString) {
  json j = tiny_config();
  j["model_type"] = 3;
  expect_error(j, StatusCode::kInvalidArgument, {"'model_type'"});
}

TEST(ConfigTest, UnknownModelType) {
  json j = tiny_config();
  j["model_type"] = "foo";
  expect_error(j, StatusCode::kInvalidArgument, {"unknown model_type 'foo'", "mixtral"});
}

class RequiredFieldTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RequiredFieldTest, MissingFieldIsNamed) {
  json j = tiny_config();
  ASSERT_TRUE(j.contains(GetParam()));
  j.erase(GetParam());
  expect_error(j, StatusCode::kInvalidArgument, {"'" + GetParam() + "'", "missing"});
}

TEST_P(RequiredFieldTest, NullFieldIsNamed) {
  json j = tiny_config();
  j[GetParam()] = nullptr;
  expect_error(j, StatusCode::kInvalidArgument, {"'" + GetParam() + "'", "missing"});
}

TEST_P(RequiredFieldTest, StringValueIsNamed) {
  json j = tiny_config();
  j[GetParam()] = "abc";
  expect_error(j, StatusCode::kInvalidArgument, {"'" + GetParam() + "'", "integer", "\"abc\""});
}

TEST_P(RequiredFieldTest, ZeroIsRejected) {
  json j = tiny_config();
  j[GetParam()] = 0;
  expect_error(j, StatusCode::kInvalidArgument, {"'" + GetParam() + "'", ">= 1", "(got 0)"});
}

TEST_P(RequiredFieldTest, NegativeIsRejected) {
  json j = tiny_config();
  j[GetParam()] = -4;
  expect_error(j, StatusCode::kInvalidArgument, {"'" + GetParam() + "'", "(got -4)"});
}

TEST_P(RequiredFieldTest, FloatIsRejected) {
  json j = tiny_config();
  j[GetParam()] = 2.5;
  expect_error(j, StatusCode::kInvalidArgument, {"'" + GetParam() + "'", "(got 2.5)"});
}

TEST_P(RequiredFieldTest, HugeValueIsRejected) {
  json j = tiny_config();
  j[GetParam()] = int64_t{1} << 40;
  expect_error(j, StatusCode::kInvalidArgument, {"'" + GetParam() + "'"});
}

INSTANTIATE_TEST_SUITE_P(AllRequired, RequiredFieldTest,
                         ::testing::Values("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                           "num_attention_heads", "num_local_experts", "num_experts_per_tok",
                                           "max_position_embeddings"),
                         [](const auto& info) { return info.param; });

TEST(ConfigTest, HiddenSizeAbc) {
  json j = tiny_config();
  j["hidden_size"] = "abc";
  expect_error(j, StatusCode::kInvalidArgument, {"'hidden_size'", "abc"});
}

TEST(ConfigTest, OptionalIntFieldsValidated) {
  for (const char* f : {"num_key_value_heads", "head_dim"}) {
    SCOPED_TRACE(f);
    json j = tiny_config();
    j[f] = 0;
    expect_error(j, StatusCode::kInvalidArgument, {std::string("'") + f + "'"});
    j[f] = "two";
    expect_error(j, StatusCode::kInvalidArgument, {std::string("'") + f + "'"});
  }
  json j = tiny_config();
  j["bos_token_id"] = -1;
  expect_error(j, StatusCode::kInvalidArgument, {"'bos_token_id'", ">= 0"});
}

TEST(ConfigTest, BadFloatAndBoolFields) {
  json j = tiny_config();
  j["rms_norm_eps"] = -1e-5;
  expect_error(j, StatusCode::kInvalidArgument, {"'rms_norm_eps'", "positive"});
  j = tiny_config();
  j["rope_theta"] = 0;
  expect_error(j, StatusCode::kInvalidArgument, {"'rope_theta'", "positive"});
  j = tiny_config();
  j["rope_theta"] = "1e6";
  expect_error(j, StatusCode::kInvalidArgument, {"'rope_theta'"});
  j = tiny_config();
  j["tie_word_embeddings"] = "yes";
  expect_error(j, StatusCode::kInvalidArgument, {"'tie_word_embeddings'", "true or false"});
}

TEST(ConfigTest, HiddenNotDivisibleByHeadsWithoutHeadDim) {
  json j = tiny_config();
  j.erase("head_dim");
  j["hidden_size"] = 130;
  expect_error(j, StatusCode::kInvalidArgument,
               {"hidden_size 130", "not divisible by num_attention_heads 4", "head_dim"});
}

TEST(ConfigTest, HiddenNotDivisibleByHeadsIsFineWithHeadDim) {
  json j = tiny_config();
  j["hidden_size"] = 130;  // head_dim given explicitly (32): projections are 4*32 wide
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 32);
}

TEST(ConfigTest, HeadsNotDivisibleByKvHeads) {
  json j = tiny_config();
  j["num_key_value_heads"] = 3;
  expect_error(j, StatusCode::kInvalidArgument,
               {"num_attention_heads 4", "not divisible by num_key_value_heads 3"});
}

TEST(ConfigTest, MoreKvHeadsThanHeads) {
  json j = tiny_config();
  j["num_key_value_heads"] = 8;
  expect_error(j, StatusCode::kInvalidArgument, {"num_key_value_heads 8"});
}

TEST(ConfigTest, OddHeadDim) {
  json j = tiny_config();
  j["head_dim"] = 33;
  expect_error(j, StatusCode::kInvalidArgument, {"head_dim 33", "even"});
}

TEST(ConfigTest, OddDerivedHeadDim) {
  json j = tiny_config();
  j.erase("head_dim");
  j["hidden_size"] = 60;  // 60 / 4 = 15
  expect_error(j, StatusCode::kInvalidArgument, {"head_dim 15", "even"});
}

TEST(ConfigTest, TopKExceedsExperts) {
  json j = tiny_config();
  j["num_experts_per_tok"] = 9;
  expect_error(j, StatusCode::kInvalidArgument, {"num_experts_per_tok 9", "num_local_experts 8"});
}

TEST(ConfigTest, EosOutsideVocab) {
  json j = tiny_config();
  j["eos_token_id"] = 2048;
  expect_error(j, StatusCode::kInvalidArgument, {"eos_token_id 2048", "vocab_size 2048"});
  j["eos_token_id"] = {2, 5000};
  expect_error(j, StatusCode::kInvalidArgument, {"eos_token_id 5000"});
  j["eos_token_id"] = -1;
  expect_error(j, StatusCode::kInvalidArgument, {"eos_token_id -1"});
}

TEST(ConfigTest, EosBeyondIntIsNotTruncated) {
  // 2^32 + 2 must not be read as token 2.
  json j = tiny_config();
  j["eos_token_id"] = (int64_t{1} << 32) + 2;
  expect_error(j, StatusCode::kInvalidArgument, {"'eos_token_id'", "4294967298"});
  j["eos_token_id"] = {2, (int64_t{1} << 32) + 2};
  expect_error(j, StatusCode::kInvalidArgument, {"'eos_token_id'", "4294967298"});
  j["eos_token_id"] = uint64_t{18446744073709551614ull};
  expect_error(j, StatusCode::kInvalidArgument, {"'eos_token_id'", "18446744073709551614"});
}

TEST(ConfigTest, EosWrongType) {
  json j = tiny_config();
  j["eos_token_id"] = "</s>";
  expect_error(j, StatusCode::kInvalidArgument, {"'eos_token_id'", "</s>"});
  j["eos_token_id"] = {2, "x"};
  expect_error(j, StatusCode::kInvalidArgument, {"'eos_token_id'"});
}

TEST(ConfigTest, BosOutsideVocab) {
  json j = tiny_config();
  j["bos_token_id"] = 4096;
  expect_error(j, StatusCode::kInvalidArgument, {"bos_token_id 4096", "vocab_size 2048"});
}

TEST(ConfigTest, UnknownRopeScalingTypeIsRefusedByName) {
  json j = tiny_config();
  j["rope_scaling"] = {{"type", "llama3"}, {"factor", 2.0}};
  expect_error(j, StatusCode::kUnimplemented, {"rope_scaling type 'llama3'"});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ASSERT_TRUE(parse(j).ok());
  EXPECT_EQ(parse(j)->rope_scaling.type, RopeScaling::Type::kLinear);
}

// A max_position_embeddings of 1e9 used to size a RoPE table (bad_alloc); now refused by
// name, while DeepSeek-V3's 163840 and the 2^24 limit itself parse.
TEST(ConfigTest, AbsurdMaxPositionEmbeddingsRefusedByName) {
  json j = tiny_config();
  j["max_position_embeddings"] = 1000000000;
  expect_error(j, StatusCode::kInvalidArgument, {"'max_position_embeddings'", "1000000000", "16777216"});
  j["max_position_embeddings"] = (1 << 24) + 1;
  expect_error(j, StatusCode::kInvalidArgument, {"'max_position_embeddings'", "16777217"});
  j["max_position_embeddings"] = 1 << 24;
  ASSERT_TRUE(parse(j).ok());
  EXPECT_EQ(parse(j)->max_position_embeddings, 1 << 24);
  j["max_position_embeddings"] = 163840;
  EXPECT_EQ(parse(j)->max_position_embeddings, 163840);
}

TEST(ConfigTest, RopeScalingNullIsFine) {
  json j = tiny_config();
  j["rope_scaling"] = nullptr;
  EXPECT_TRUE(parse(j).ok());
}

TEST(ConfigTest, GeluActivationRejected) {
  json j = tiny_config();
  j["hidden_act"] = "gelu";
  expect_error(j, StatusCode::kUnimplemented, {"'hidden_act'", "gelu", "silu"});
}

TEST(ConfigTest, SlidingWindowInvalid) {
  json j = tiny_config();
  j["sliding_window"] = -1;
  expect_error(j, StatusCode::kInvalidArgument, {"'sliding_window'"});
}

}  // namespace
}  // namespace moe
