// The per-step token mask (src/moe/constrain/json_constraint.h) on a synthetic
// vocabulary: the trie walk (and its plain-string shortcut) allows exactly the tokens
// whose bytes the recogniser accepts one by one, EOS only when the value is complete,
// special tokens never; random walks over allowed tokens end in JSON that Python
// accepts (and that conforms to the schema).
#include "moe/constrain/json_constraint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "json_reference.h"
#include "moe/constrain/json_schema_compiler.h"

namespace moe {
namespace {

constexpr int kEos = 3;

// Ids 0..2: specials (empty bytes), 3: EOS; then every byte; then multi-byte tokens.
std::vector<std::string> synthetic_vocab() {
  std::vector<std::string> v(4);
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\":", "\": \"", "\",", "\"}", "true", "false", "null", "\n  ", "  ", "abc", " the",
                        "12", "-0.5", "e+1", "\xc3\xa9", "\xe4\xb8", "\xad", "\xe4\xb8\xad", "\\n", "\\u00", "[{",
                        "}]", "},", "{}", "[]", "\"\"", "name", "\"name\"", "\"tags\":[", "\xf0\x9f\x98\x80", "\xf0\x9f"}) {
    v.push_back(t);
  }
  return v;
}

std::shared_ptr<const ConstraintVocab> vocab() {
  static auto v = std::make_shared<const ConstraintVocab>(ConstraintVocab::build(synthetic_vocab(), {kEos}));
  return v;
}

// The reference: token t is allowed iff the recogniser accepts its bytes one by one.
std::vector<uint8_t> brute_force(const JsonState& state, const ConstraintVocab& v) {
  std::vector<uint8_t> out(static_cast<size_t>(v.vocab_size), 0);
  for (int t = 0; t < v.vocab_size; ++t) {
    const std::string& bytes = v.token_bytes[static_cast<size_t>(t)];
    if (bytes.empty()) continue;
    JsonState s = state;
    out[static_cast<size_t>(t)] = s.advance(bytes) ? 1 : 0;
  }
  if (state.complete()) out[kEos] = 1;
  return out;
}

TEST(JsonConstraint, MaskEqualsTokenByTokenCheck) {
  const auto grammar = std::make_shared<const JsonGrammar>(json_object_grammar());
  for (const std::string prefix : {"", " ", "{", "{\"a", "{\"a\\", "{\"a\\u0", "{\"a\xe4", "{\"a\":", "{\"a\":1",
                                   "{\"a\":-", "{\"a\":[", "{\"a\":[1,", "{\"a\":tr", "{\"a\":\"x\"}", "{\"a\":{\"b\":\"\xf0\x9f"}) {
    JsonConstraint c(grammar, vocab());
    for (char ch : prefix) {
      // Advance byte-token by byte-token (ids 4 + byte).
      ASSERT_TRUE(c.accept(4 + static_cast<unsigned char>(ch))) << prefix;
    }
    std::vector<uint8_t> mask;
    const int count = c.allowed(&mask);
    const std::vector<uint8_t> want = brute_force(c.state(), *vocab());
    EXPECT_EQ(mask, want) << "prefix '" << prefix << "'";
    EXPECT_EQ(count, static_cast<int>(std::count(want.begin(), want.end(), uint8_t{1})));
    EXPECT_EQ(mask[0] + mask[1] + mask[2], 0);
    EXPECT_EQ(mask[kEos] == 1, c.complete()) << prefix;
  }
}

TEST(JsonConstraint, MaskLogitsAndAccept) {
  const auto grammar = std::make_shared<const JsonGrammar>(json_object_grammar());
  JsonConstraint c(grammar, vocab());
  const int n = vocab()->vocab_size + 5;  // logits past the vocabulary are masked too
  std::vector<float> logits(static_cast<size_t>(n), 1.0f);
  const int allowed = c.mask_logits(logits.data(), n);
  int finite = 0;
  for (float x : logits) finite += std::isfinite(x) ? 1 : 0;
  EXPECT_EQ(finite, allowed);
  EXPECT_TRUE(std::isfinite(logits[4 + '{']));
  EXPECT_FALSE(std::isfinite(logits[4 + '[']));
  EXPECT_FALSE(std::isfinite(logits[static_cast<size_t>(n - 1)]));
  EXPECT_FALSE(c.accept(4 + '['));  // not allowed: state unchanged
  EXPECT_FALSE(c.accept(kEos));     // not complete yet
  EXPECT_FALSE(c.accept(1));        // special
  EXPECT_FALSE(c.accept(-1));
  EXPECT_FALSE(c.accept(100000));
  EXPECT_TRUE(c.accept(4 + '{'));
  EXPECT_TRUE(c.accept(4 + '}'));
  EXPECT_TRUE(c.closed());
  std::vector<uint8_t> mask;
  EXPECT_EQ(c.allowed(&mask), 1);  // only EOS
  EXPECT_EQ(mask[kEos], 1);
  EXPECT_TRUE(c.accept(kEos));
  EXPECT_EQ(c.allowed(&mask), 0);
}

// Random walks: each step a uniformly random allowed token, until closed.
std::vector<std::string> random_walks(const std::shared_ptr<const JsonGrammar>& grammar, int walks, int max_tokens) {
  std::mt19937 rng(14);
  std::vector<std::string> out;
  for (int w = 0; w < walks; ++w) {
    JsonConstraint c(grammar, vocab());
    std::string text;
    std::vector<uint8_t> mask;
    for (int i = 0; i < max_tokens && !c.closed(); ++i) {
      std::vector<int> ids;
      c.allowed(&mask);
      for (size_t t = 0; t < mask.size(); ++t) {
        if (mask[t]) ids.push_back(static_cast<int>(t));
      }
      EXPECT_FALSE(ids.empty()) << text;
      if (ids.empty()) break;
      // Prefer closing tokens as the walk grows, so it ends.
      int pick = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
      if (i > max_tokens / 2) {  // the first allowed of these, in this order
        const std::vector<std::string> closing =
            c.state().in_plain_string() ? std::vector<std::string>{"\""} : std::vector<std::string>{"}", "]", "\"", "0", ":", ","};
        size_t best = closing.size() + 1;
        for (int t : ids) {
          const std::string& b = vocab()->token_bytes[static_cast<size_t>(t)];
          const size_t rank = t == kEos ? 0 : static_cast<size_t>(std::find(closing.begin(), closing.end(), b) - closing.begin()) + 1;
          if (rank < best) best = rank, pick = t;
        }
      }
      EXPECT_TRUE(c.accept(pick));
      if (pick != kEos) text += vocab()->token_bytes[static_cast<size_t>(pick)];
    }
    EXPECT_TRUE(c.complete()) << text;
    out.push_back(text);
  }
  return out;
}

TEST(JsonConstraint, RandomWalksGiveValidJson) {
  const std::string dir = testing::make_temp_dir("json_constraint");
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string"},
      "tags":{"type":"array","items":{"enum":["a","b\u00e9"]},"minItems":1},"n":{"type":["integer","null"]}},
      "required":["name","tags"]})";
  auto compiled = compile_json_schema(schema);
  ASSERT_TRUE(compiled.ok()) << compiled.status().message();
  std::vector<std::pair<std::string, std::string>> cases;
  for (const std::string& t : random_walks(std::make_shared<const JsonGrammar>(json_object_grammar()), 30, 200)) {
    cases.emplace_back(t, R"({"type":"object"})");
  }
  for (const std::string& t : random_walks(std::make_shared<const JsonGrammar>(std::move(*compiled)), 30, 200)) {
    cases.emplace_back(t, schema);
  }
  const std::vector<int> ref = testing::python_verdicts(dir, cases);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(ref[i], 1) << cases[i].first;
  std::filesystem::remove_all(dir);
}

TEST(ConstraintVocab, PlainTokensAndTries) {
  for (const auto& [bytes, plain] : std::vector<std::pair<std::string, bool>>{
           {"abc", true}, {" the", true}, {"\xc3\xa9", true}, {"\xe4\xb8", false}, {"\xad", false}, {"\"", false},
           {"\\n", false}, {"\n", false}, {"\x7f", true}, {"\xed\xa0\x80", false}, {"\xf4\x90\x80\x80", false},
           {"\xf0\x9f\x98\x80", true}, {"\xc0\xaf", false}}) {
    EXPECT_EQ(plain_string_bytes(bytes), plain) << testing::to_hex(bytes);
  }
  const ConstraintVocab& v = *vocab();
  size_t leaves = 0;
  for (const auto& n : v.all.nodes) leaves += n.tok_end - n.tok_begin;
  EXPECT_EQ(leaves, synthetic_vocab().size() - 4);  // every non-empty token once
  EXPECT_EQ(v.all.max_len, std::string("\"tags\":[").size());
}

}  // namespace
}  // namespace moe
