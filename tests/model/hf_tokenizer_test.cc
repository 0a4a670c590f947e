// tokenizer.json tokenizers (src/moe/model/hf/) through moe::Tokenizer: hand-computed
// BPE cases, every malformed-file error naming its field, UTF-8 handling of split
// characters (decode and streaming), and special-token text in both backends.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "contains_util.h"
#include "moe/engine/detokenizer.h"
#include "moe/model/hf/utf8_util.h"
#include "moe/model/tokenizer.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::make_temp_dir;
using testing::source_dir;
using testing::write_file;

std::string family_dir(const std::string& name) { return source_dir() + "/tests/data/tokenizers/" + name; }

class HfTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("hf_tok"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A tokenizer.json with a tiny BPE model over "a".."c" (no pre-tokenizer).
  static json small(json merges, bool ignore_merges = false) {
    return {{"version", "1.0"},
            {"added_tokens", json::array({{{"id", 6}, {"content", "<eos>"}, {"special", true}}})},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", nullptr},
            {"model",
             {{"type", "BPE"},
              {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}}},
              {"merges", std::move(merges)},
              {"ignore_merges", ignore_merges}}}};
  }

  StatusOr<std::unique_ptr<Tokenizer>> load(const json& j) {
    write_file(dir_ + "/tokenizer.json", j.dump());
    return Tokenizer::load(dir_);
  }
  StatusOr<std::unique_ptr<Tokenizer>> load_text(const std::string& text) {
    write_file(dir_ + "/tokenizer.json", text);
    return Tokenizer::load(dir_);
  }
  // The message of a load that must fail with DataLoss.
  std::string load_error(const json& j) {
    auto t = load(j);
    EXPECT_FALSE(t.ok());
    if (t.ok()) return "";
    EXPECT_EQ(t.status().code(), StatusCode::kDataLoss) << t.status().to_string();
    return t.status().message();
  }

  std::string dir_;
};

TEST_F(HfTokenizerTest, MergesApplyByRank) {
  auto t = load(small(json::array({"a b", "ab c"})));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("abc", false), (std::vector<int>{5}));
  EXPECT_EQ((*t)->encode("bca", false), (std::vector<int>{1, 2, 0}));  // no "b c" merge
  EXPECT_EQ((*t)->encode("abab", false), (std::vector<int>{3, 3}));
  // Pairs as arrays, "b c" ranked first: "abc" -> a + bc (no "a bc" merge).
  auto u = load(small(json::array({json::array({"b", "c"}), json::array({"a", "b"})})));
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_EQ((*u)->encode("abc", false), (std::vector<int>{0, 4}));
  EXPECT_EQ((*u)->vocab_size(), 7);
  EXPECT_EQ((*u)->decode({0, 4, 6}), "abc");  // the special <eos> is dropped
  EXPECT_TRUE((*u)->is_special(6));
  EXPECT_FALSE((*u)->is_special(5));
  EXPECT_EQ((*u)->token_to_id("<eos>"), 6);
  EXPECT_EQ((*u)->token_to_id("zz"), -1);
}

TEST_F(HfTokenizerTest, IgnoreMergesTakesWholeWordFromVocab) {
  // No merge reaches "abc" from "a b c" ranks "b c" first; ignore_merges (Llama-3) looks
  // the whole word up first.
  auto t = load(small(json::array({"b c", "a b"}), /*ignore_merges=*/true));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("abc", false), (std::vector<int>{5}));
  EXPECT_EQ((*t)->encode("abca", false), (std::vector<int>{0, 4, 0}));
}

TEST_F(HfTokenizerTest, AddedTokenTextEncodesToTheToken) {
  auto t = load(small(json::array({"a b"})));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("ab<eos>c", false), (std::vector<int>{3, 6, 2}));
  EXPECT_EQ((*t)->encode("<eos><eos>", false), (std::vector<int>{6, 6}));
  EXPECT_EQ((*t)->encode("<eos", false), (std::vector<int>{}));  // '<', 'e', 'o', 's' are not in the vocab: dropped
}

TEST_F(HfTokenizerTest, ByteLevelFamiliesMapSpacesAndSpecialText) {
  auto t = Tokenizer::load(family_dir("qwen2"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const int im_start = (*t)->token_to_id("<|im_start|>");
  const int im_end = (*t)->token_to_id("<|im_end|>");
  ASSERT_GE(im_start, 0);
  EXPECT_EQ((*t)->eos_id(), im_end);
  EXPECT_EQ((*t)->bos_id(), -1);
  EXPECT_FALSE((*t)->add_bos());
  const std::vector<int> ids = (*t)->encode("<|im_start|>user\nhi<|im_end|>", true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), im_end);
  EXPECT_TRUE((*t)->is_special(im_start));
  EXPECT_EQ((*t)->token_bytes(im_start), "");
  // "<think>" is an added token that is not special: kept by decode.
  const int think = (*t)->token_to_id("<think>");
  ASSERT_GE(think, 0);
  EXPECT_FALSE((*t)->is_special(think));
  EXPECT_EQ((*t)->decode((*t)->encode("<think>x</think>", false)), "<think>x</think>");
  // Byte-level "\u0120" stands for ' '.
  const int space_the = (*t)->token_to_id("\xC4\xA0the");
  ASSERT_GE(space_the, 0);
  EXPECT_EQ((*t)->token_bytes(space_the), " the");

  auto llama = Tokenizer::load(family_dir("llama3"));
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  const int bot = (*llama)->token_to_id("<|begin_of_text|>");
  EXPECT_EQ((*llama)->bos_id(), bot);
  EXPECT_TRUE((*llama)->add_bos());
  EXPECT_EQ((*llama)->encode("hi", true).front(), bot);
  EXPECT_EQ((*llama)->encode("hi", true).size(), (*llama)->encode("hi", false).size() + 1);
}

TEST_F(HfTokenizerTest, LlamaTokenizerFastTakesAddBosFromTheConfig) {
  json j = small(json::array({"a b"}));
  j["added_tokens"].push_back({{"id", 7}, {"content", "<bos>"}, {"special", true}});
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                         {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", json::array({7})}}}}}};
  auto t = load(j);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("ab", true), (std::vector<int>{7, 3}));  // the template
  EXPECT_EQ((*t)->bos_id(), 7);
  write_file(dir_ + "/tokenizer_config.json",
             R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": {"content": "<bos>"}, "eos_token": "<eos>",
                 "add_bos_token": false, "add_eos_token": true})");
  t = load(j);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("ab", true), (std::vector<int>{3, 6}));
  EXPECT_EQ((*t)->eos_id(), 6);
  EXPECT_FALSE((*t)->add_bos());
}

TEST_F(HfTokenizerTest, DecodeOfASplitCharacterGivesReplacementLikeHf) {
  EXPECT_EQ(hf::utf8_lossy("a\xE4\xB8"), "a\xEF\xBF\xBD");            // truncated 3-byte char: one U+FFFD
  EXPECT_EQ(hf::utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");          // truncated emoji
  EXPECT_EQ(hf::utf8_lossy("\xE4\xB8\xAD"), "\xE4\xB8\xAD");          // complete
  EXPECT_EQ(hf::utf8_lossy("\xFF" "a"), "\xEF\xBF\xBD" "a");          // invalid byte
  EXPECT_EQ(hf::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3 subparts
  EXPECT_EQ(hf::utf8_lossy("\xE4" "a"), "\xEF\xBF\xBD" "a");
}

// Streams `ids` as the Scheduler does (src/moe/engine/scheduler.cc): decode a window,
// hold back a trailing U+FFFD until the character completes.
std::vector<std::string> stream(const Tokenizer& t, const std::vector<int>& ids) {
  std::vector<std::string> deltas;
  size_t prefix = 0, read = 0;
  for (size_t n = 1; n <= ids.size(); ++n) {
    const bool flush = n == ids.size();
    const std::string prefix_text = t.decode(std::vector<int>(ids.begin() + static_cast<long>(prefix),
                                                              ids.begin() + static_cast<long>(read)));
    const std::string new_text =
        t.decode(std::vector<int>(ids.begin() + static_cast<long>(prefix), ids.begin() + static_cast<long>(n)));
    if (new_text.size() > prefix_text.size() && (flush || unstable_suffix(new_text) == 0)) {
      deltas.push_back(new_text.substr(prefix_text.size()));
      prefix = read;
      read = n;
    }
  }
  return deltas;
}

TEST_F(HfTokenizerTest, StreamingHoldsBackCjkAndEmojiSplitAcrossTokens) {
  for (const char* family : {"qwen2", "llama3", "deepseek_v3", "gpt2"}) {
    SCOPED_TRACE(family);
    auto t = Tokenizer::load(family_dir(family));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    const std::string text = "Emoji 😀🤖 and 漢字テキスト, 👨‍👩‍👧 done.";
    const std::vector<int> ids = (*t)->encode(text, false);
    // The small vocabularies split these characters over byte-level tokens.
    int partial = 0;
    for (int id : ids) {
      const std::string b = (*t)->token_bytes(id);
      if (hf::utf8_lossy(b) != b) ++partial;
    }
    EXPECT_GT(partial, 0) << "no token holds part of a character: the test would not test splitting";
    std::string joined;
    for (const std::string& d : stream(**t, ids)) {
      EXPECT_EQ(d.find("\xEF\xBF\xBD"), std::string::npos) << "a partial character was streamed: " << d;
      joined += d;
    }
    EXPECT_EQ(joined, text);
    EXPECT_EQ((*t)->decode(ids), text);
  }
}

TEST_F(HfTokenizerTest, SentencePieceSpecialTokenTextEncodesToTheToken) {
  auto t = Tokenizer::load(testing::tiny_model_dir());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const int bos = (*t)->bos_id(), eos = (*t)->eos_id();
  EXPECT_EQ((*t)->encode("<s>", false), (std::vector<int>{bos}));
  std::vector<int> expected{bos};
  for (int id : (*t)->encode("To be", false)) expected.push_back(id);
  expected.push_back(eos);
  for (int id : (*t)->encode("or not", false)) expected.push_back(id);
  EXPECT_EQ((*t)->encode("<s>To be</s>or not", false), expected);
  // With add_special_tokens a BOS comes first, then the text's own <s>.
  std::vector<int> with_bos = (*t)->encode("<s>x", true);
  ASSERT_GE(with_bos.size(), 2u);
  EXPECT_EQ(with_bos[0], bos);
  EXPECT_EQ(with_bos[1], bos);
  EXPECT_EQ((*t)->decode((*t)->encode("<s>To be</s>", false)), "To be");
}

TEST_F(HfTokenizerTest, MissingBothFilesNamesBoth) {
  auto t = Tokenizer::load(dir_);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(t.status().message(), "tokenizer.json");
  EXPECT_CONTAINS(t.status().message(), "tokenizer.model");
}

TEST_F(HfTokenizerTest, MalformedJsonNamesTheFile) {
  auto t = load_text("{\"model\": ");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(t.status().message(), dir_ + "/tokenizer.json");
  EXPECT_CONTAINS(t.status().message(), "not a valid JSON");
  write_file(dir_ + "/tokenizer_config.json", "[1,");
  auto c = load(small(json::array()));
  ASSERT_FALSE(c.ok());
  EXPECT_CONTAINS(c.status().message(), dir_ + "/tokenizer_config.json");
}

TEST_F(HfTokenizerTest, UnknownModelTypeIsRefused) {
  json j = small(json::array());
  j["model"]["type"] = "WordPiece";
  const std::string msg = load_error(j);
  EXPECT_CONTAINS(msg, "tokenizer.json: model.type");
  EXPECT_CONTAINS(msg, "WordPiece");
}

TEST_F(HfTokenizerTest, BadMergesAreRefusedNamingTheEntry) {
  EXPECT_CONTAINS(load_error(small(json::array({"a b", "a x"}))), "model.merges[1]: merge \"a\" + \"x\": \"x\" is not");
  // Parts in the vocabulary but not their concatenation.
  EXPECT_CONTAINS(load_error(small(json::array({"c a"}))), "model.merges[0]: merge \"c\" + \"a\": \"ca\" is not in");
  EXPECT_CONTAINS(load_error(small(json::array({"ab"}))), "model.merges[0]: expected \"left right\"");
  EXPECT_CONTAINS(load_error(small(json::array({json::array({1, 2})}))), "model.merges[0]: expected");
  json no_vocab = small(json::array());
  no_vocab["model"]["vocab"] = json::array();
  EXPECT_CONTAINS(load_error(no_vocab), "model.vocab");
  json prefix = small(json::array());
  prefix["model"]["continuing_subword_prefix"] = "##";
  EXPECT_CONTAINS(load_error(prefix), "model.continuing_subword_prefix");
}

TEST_F(HfTokenizerTest, RegexThatDoesNotCompileNamesFieldMessageAndOffset) {
  json j = small(json::array());
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                      {{"type", "Split"}, {"pattern", {{"Regex", "(ab|[c"}}}, {"behavior", "Isolated"}}})}};
  const std::string msg = load_error(j);
  EXPECT_CONTAINS(msg, "pre_tokenizer.pretokenizers[1].pattern.Regex");
  EXPECT_CONTAINS(msg, "missing terminating ]");  // PCRE2's own message
  EXPECT_CONTAINS(msg, "at offset 6");
}

TEST_F(HfTokenizerTest, UnknownComponentTypesAreRefusedNamingTheField) {
  json pre = small(json::array());
  pre["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "BertPreTokenizer"}}})}};
  EXPECT_CONTAINS(load_error(pre), "pre_tokenizer.pretokenizers[0].type: unsupported pre-tokenizer type \"BertPreTokenizer\"");
  json norm = small(json::array());
  norm["normalizer"] = {{"type", "Precompiled"}};
  EXPECT_CONTAINS(load_error(norm), "normalizer.type: unsupported normalizer type \"Precompiled\"");
  json dec = small(json::array());
  dec["decoder"] = {{"type", "WordPiece"}};
  EXPECT_CONTAINS(load_error(dec), "decoder.type: unsupported decoder type \"WordPiece\"");
  json post = small(json::array());
  post["post_processor"] = {{"type", "RobertaProcessing"}};
  EXPECT_CONTAINS(load_error(post), "post_processor.type: unsupported post-processor type \"RobertaProcessing\"");
  json behavior = small(json::array());
  behavior["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  EXPECT_CONTAINS(load_error(behavior), "pre_tokenizer.behavior: unknown split behavior \"Sideways\"");
  json added = small(json::array());
  added["added_tokens"] = json::array({{{"content", "<x>"}}});
  EXPECT_CONTAINS(load_error(added), "added_tokens[0].id");
}

TEST_F(HfTokenizerTest, SplitBehaviorsAndDigits) {
  json j = small(json::array({"a b"}));
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "c"}}}, {"behavior", "MergedWithPrevious"}};
  // "abcab" -> "abc" + "ab": "abc" via merges a b -> ab, c (no "ab c" merge) = [3, 2], then [3].
  auto t = load(j);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("abcab", false), (std::vector<int>{3, 2, 3}));
  j["pre_tokenizer"]["behavior"] = "Removed";
  t = load(j);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->encode("abcab", false), (std::vector<int>{3, 3}));
}

}  // namespace
}  // namespace moe
