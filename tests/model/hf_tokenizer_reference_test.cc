// tokenizer.json tokenizers against two independent references run by node: the npm
// `tokenizers` package (the Rust library) and `@huggingface/tokenizers` (pure JS), on the
// checked-in test tokenizers of each family (tests/data/tokenizers/<family>/) and ~3000
// strings (ShareGPT prompts and their lines, hand-written unicode/emoji/CJK/code/
// whitespace/special-token cases, random mixed-script strings). Asserts identical ids with
// and without special tokens, decode equal to the Rust library's decode, and
// decode(encode(s)) == s wherever the reference round-trips (not for special-token text,
// which decode drops, or for text NFC changes).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moe/model/tokenizer.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::read_file;
using testing::run_command;
using testing::sh_quote;
using testing::source_dir;

const char* const kFamilies[] = {"gpt2", "llama3", "qwen2", "deepseek_v3"};

class HfTokenizerReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* modules = std::getenv("MOE_NODE_MODULES");
    ASSERT_NE(modules, nullptr)
        << "MOE_NODE_MODULES is not set: ./scripts/test.sh installs the npm references (tokenizers@0.23.2, "
           "@huggingface/tokenizers@0.2.0) and sets it (or: npm install --prefix DIR tokenizers@0.23.2 "
           "@huggingface/tokenizers@0.2.0; MOE_NODE_MODULES=DIR/node_modules)";
    const std::string tmp = testing::make_temp_dir("tok_ref");
    const std::string out = tmp + "/ref.json";
    std::string cmd = std::string("NODE_PATH=") + sh_quote(modules) + " node " +
                      sh_quote(source_dir() + "/tests/model/node/tokenizer_reference.cjs") + " " +
                      sh_quote(source_dir() + "/tests/data/tokenizers/reference_strings.json") + " " + sh_quote(out);
    for (const char* f : kFamilies) cmd += " " + sh_quote(source_dir() + "/tests/data/tokenizers/" + f);
    const auto r = run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    ref_ = new json(json::parse(read_file(out)));
    std::filesystem::remove_all(tmp);
  }
  static void TearDownTestSuite() {
    delete ref_;
    ref_ = nullptr;
  }

  static void check_family(const std::string& family) {
    ASSERT_NE(ref_, nullptr);
    auto tok = Tokenizer::load(source_dir() + "/tests/data/tokenizers/" + family);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const json& strings = (*ref_)["strings"];
    const json& f = (*ref_)[family];
    ASSERT_GE(strings.size(), 3000u);
    size_t mismatched = 0, round_trips = 0, references_disagree = 0;
    for (size_t i = 0; i < strings.size(); ++i) {
      const std::string s = strings[i];
      const auto rust = f["rust"][i].get<std::vector<int>>();
      const auto rust_plain = f["rust_plain"][i].get<std::vector<int>>();
      if (rust != f["js"][i].get<std::vector<int>>() || rust_plain != f["js_plain"][i].get<std::vector<int>>()) {
        ++references_disagree;
        ADD_FAILURE() << family << ": the two references disagree on string " << i << ": " << s;
      }
      const std::vector<int> ours = (*tok)->encode(s, true);
      const std::vector<int> ours_plain = (*tok)->encode(s, false);
      if (ours != rust || ours_plain != rust_plain) {
        if (++mismatched <= 5) {
          ADD_FAILURE() << family << ": string " << i << " " << json(s).dump() << "\n  ours: " << json(ours_plain).dump()
                        << "\n  ref:  " << json(rust_plain).dump();
        }
      }
      const std::string decoded = (*tok)->decode(ours_plain);
      const std::string ref_decoded = f["rust_decode"][i];
      EXPECT_EQ(decoded, ref_decoded) << family << ": decode of string " << i;
      if (ref_decoded == s) {
        EXPECT_EQ(decoded, s) << family << ": decode(encode(s)) != s for string " << i;
        ++round_trips;
      }
    }
    EXPECT_EQ(mismatched, 0u) << family << ": " << mismatched << " of " << strings.size() << " strings differ";
    EXPECT_EQ(references_disagree, 0u);
    // Nearly all strings round-trip (the rest hold special-token text or non-NFC text).
    EXPECT_GE(round_trips, strings.size() - 40) << family;
    std::printf("%s: %zu strings identical to both references, %zu round-trip exactly\n", family.c_str(),
                strings.size() - mismatched, round_trips);
  }

  static json* ref_;
};

json* HfTokenizerReferenceTest::ref_ = nullptr;

TEST_F(HfTokenizerReferenceTest, Gpt2) { check_family("gpt2"); }
TEST_F(HfTokenizerReferenceTest, Llama3) { check_family("llama3"); }
TEST_F(HfTokenizerReferenceTest, Qwen2) { check_family("qwen2"); }
TEST_F(HfTokenizerReferenceTest, DeepSeekV3) { check_family("deepseek_v3"); }

}  // namespace
}  // namespace moe
