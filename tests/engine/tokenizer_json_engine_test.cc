// A model directory whose only tokenizer is tokenizer.json (byte-level BPE) works end to
// end: the prompt is encoded by it, streamed deltas join to the result text, and
// special-token text in the prompt becomes the special token. A tokenizer with more ids
// than config.json's vocab_size is refused naming both.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/engine.h"
#include "moe/model/tokenizer.h"
#include "test_util.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::source_dir;
using testing::tiny_model_dir;

class TokenizerJsonEngineTest : public ::testing::Test {
 protected:
  // The tiny model's weights and configs with tests/data/tokenizers/<family>'s
  // tokenizer files instead of tokenizer.model.
  void SetUp() override {
    dir_ = testing::make_temp_dir("tokjson_engine");
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) {
      fs::create_symlink(tiny_model_dir() + "/" + f, dir_ + "/" + f);
    }
    const std::string tok = source_dir() + "/tests/data/tokenizers/qwen2";
    fs::copy_file(tok + "/tokenizer.json", dir_ + "/tokenizer.json");
    fs::copy_file(tok + "/tokenizer_config.json", dir_ + "/tokenizer_config.json");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(TokenizerJsonEngineTest, GeneratesWithTokenizerJsonOnly) {
  ASSERT_FALSE(fs::exists(dir_ + "/tokenizer.model"));
  auto tok = Tokenizer::load(dir_);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto e = Engine::open({.model_dir = dir_, .num_threads = 1});
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  GenerateRequest req;
  req.prompt = "<|im_start|>user\nWhat is 漢字 😀?<|im_end|>\n<|im_start|>assistant\n";
  req.max_tokens = 24;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  std::string streamed;
  int calls = 0;
  auto r = (*e)->generate(req, [&](int, const std::string& delta) {
    ++calls;
    streamed += delta;
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::vector<int> expected_prompt = (*tok)->encode(req.prompt);
  EXPECT_EQ(r->prompt_token_ids, expected_prompt);
  EXPECT_EQ(r->prompt_token_ids.front(), (*tok)->token_to_id("<|im_start|>"));
  EXPECT_EQ(r->output_token_ids.size(), 24u);
  EXPECT_EQ(calls, 24);
  EXPECT_EQ(streamed, r->text);
  // The continuation is the decode of the output ids (no special tokens among the
  // prompt's last tokens change its start).
  std::vector<int> all = r->prompt_token_ids;
  all.insert(all.end(), r->output_token_ids.begin(), r->output_token_ids.end());
  const std::string full = (*tok)->decode(all);
  ASSERT_GE(full.size(), r->text.size());
  EXPECT_EQ(full.substr(full.size() - r->text.size()), r->text);
}

TEST_F(TokenizerJsonEngineTest, TokenizerLargerThanTheModelVocabIsRefused) {
  auto j = nlohmann::json::parse(testing::read_file(dir_ + "/tokenizer.json"));
  j["added_tokens"].push_back({{"id", 5000}, {"content", "<|extra|>"}, {"special", true}});
  fs::remove(dir_ + "/tokenizer.json");
  testing::write_file(dir_ + "/tokenizer.json", j.dump());
  auto e = Engine::open({.model_dir = dir_, .num_threads = 1});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "tokenizer.json has 5001 token ids");
  EXPECT_CONTAINS(e.status().message(), "config.json vocab_size 2048");
}

TEST_F(TokenizerJsonEngineTest, MalformedTokenizerJsonFailsOpenNamingTheField) {
  auto j = nlohmann::json::parse(testing::read_file(dir_ + "/tokenizer.json"));
  j["model"]["type"] = "Unigram";
  fs::remove(dir_ + "/tokenizer.json");
  testing::write_file(dir_ + "/tokenizer.json", j.dump());
  auto e = Engine::open({.model_dir = dir_, .num_threads = 1});
  ASSERT_FALSE(e.ok());
  EXPECT_CONTAINS(e.status().message(), "tokenizer.json: model.type: unsupported model type \"Unigram\"");
}

}  // namespace
}  // namespace moe
