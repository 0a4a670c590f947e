// The Jinja subset (src/moe/jinja/) against the reference renderer @huggingface/jinja
// (node, tests/jinja/node/render.cjs) on the real chat templates of
// tests/data/chat_templates/ (see PROVENANCE.md there): every template x conversation
// must render byte-identically, and where the reference raises (bad role order), so do we.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "moe/jinja/template.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;

json msg(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

struct Family {
  std::string file;
  std::string bos, eos;
};

const std::vector<Family>& families() {
  static const std::vector<Family> k = {
      {"Mixtral-8x7B-Instruct-v0.1.jinja", "<s>", "</s>"},
      {"Qwen2-57B-A14B-Instruct.jinja", "", "<|im_end|>"},
      {"Qwen3-0.6B.jinja", "", "<|im_end|>"},
      {"DeepSeek-V3.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"},
      {"Meta-Llama-3-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"},
      {"Llama-3.3-70B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"},
  };
  return k;
}

// Conversations: system prompt, multi-turn, empty content, unicode, whitespace to trim,
// reasoning text, and orders some templates reject.
std::vector<json> conversations() {
  return {
      json::array({msg("user", "Hello")}),
      json::array({msg("system", "You are terse."), msg("user", "What is 2+2?")}),
      json::array({msg("system", "Be kind."), msg("user", "Hi"), msg("assistant", "Hello! How can I help?"),
                   msg("user", "Tell me a joke.")}),
      json::array({msg("user", "")}),
      json::array({msg("user", "héllo — 日本語 🎉 \"quoted\" and 'single' \\ backslash\ttab")}),
      json::array({msg("user", "  padded  \n"), msg("assistant", "\n answer \n"), msg("user", "next")}),
      json::array({msg("user", "Think first."), msg("assistant", "<think>\nreasoning here\n</think>\n\nThe answer."),
                   msg("user", "And again?")}),
      json::array({msg("user", "one"), msg("user", "two")}),
      json::array({msg("assistant", "I start"), msg("user", "odd order")}),
      json::array({msg("system", "s1"), msg("system", "s2"), msg("user", "u")}),
  };
}

TEST(JinjaReference, RealChatTemplatesMatchHuggingFaceJinja) {
  const char* modules = std::getenv("MOE_NODE_MODULES");
  ASSERT_TRUE(modules != nullptr && *modules)
      << "MOE_NODE_MODULES is not set: ./scripts/test.sh installs @huggingface/jinja@0.5.13 and sets it "
         "(or: npm install --prefix DIR @huggingface/jinja@0.5.13; MOE_NODE_MODULES=DIR/node_modules)";
  json cases = json::array();
  std::vector<std::string> names;
  const std::string dir = testing::source_dir() + "/tests/data/chat_templates/";
  for (const Family& f : families()) {
    const std::string text = testing::read_file(dir + f.file);
    ASSERT_FALSE(text.empty()) << dir + f.file;
    int k = 0;
    for (const json& conv : conversations()) {
      for (bool gen : {true, false}) {
        json ctx = {{"messages", conv}, {"bos_token", f.bos}, {"eos_token", f.eos}, {"add_generation_prompt", gen}};
        cases.push_back({{"template", text}, {"context", ctx}});
        names.push_back(f.file + " conversation " + std::to_string(k) + (gen ? " +gen" : ""));
      }
      ++k;
    }
  }
  // Template-specific variables: Qwen3's enable_thinking, Llama 3.1's tools (tojson indent).
  const json tool = json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
  {
    const std::string qwen3 = testing::read_file(dir + "Qwen3-0.6B.jinja");
    cases.push_back({{"template", qwen3},
                     {"context", {{"messages", conversations()[2]}, {"add_generation_prompt", true}, {"enable_thinking", false}}}});
    names.push_back("Qwen3 enable_thinking=false");
    cases.push_back({{"template", qwen3},
                     {"context", {{"messages", conversations()[1]}, {"add_generation_prompt", true}, {"tools", {tool}}}}});
    names.push_back("Qwen3 tools");
    const std::string llama = testing::read_file(dir + "Llama-3.3-70B-Instruct.jinja");
    cases.push_back({{"template", llama},
                     {"context", {{"messages", conversations()[1]}, {"add_generation_prompt", true},
                                  {"bos_token", "<|begin_of_text|>"}, {"tools", {tool}}}}});
    names.push_back("Llama 3.3 tools in the user message");
    cases.push_back({{"template", llama},
                     {"context", {{"messages", conversations()[2]}, {"add_generation_prompt", true},
                                  {"bos_token", "<|begin_of_text|>"}, {"date_string", "02 Dec 2026"}}}});
    names.push_back("Llama 3.3 date_string");
  }

  testing::ScopedTempDir tmp("jinja_ref");
  ASSERT_FALSE(tmp.path().empty());
  testing::write_file(tmp.file("cases.json"), cases.dump());
  const testing::CommandResult r =
      testing::run_command(std::string("NODE_PATH=") + modules + " node " + testing::source_dir() +
                           "/tests/jinja/node/render.cjs " + tmp.file("cases.json") + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json expected = json::parse(r.output);
  ASSERT_EQ(expected.size(), cases.size());

  int compared = 0, raised = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(names[i]);
    auto t = jinja::Template::parse(cases[i]["template"].get<std::string>());
    ASSERT_TRUE(t.ok()) << t.status().message();
    auto out = t.value().render(cases[i]["context"], {});
    if (expected[i].contains("error")) {
      EXPECT_FALSE(out.ok()) << "the reference raised (" << expected[i]["error"] << ") but we rendered:\n"
                             << out.value();
      if (!out.ok()) {
        // Every raise here is the template's raise_exception(): the same message.
        EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
        EXPECT_EQ(out.status().message(), expected[i]["error"].get<std::string>());
      }
      ++raised;
      continue;
    }
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(out.value(), expected[i]["text"].get<std::string>());
    ++compared;
  }
  // The suite exercises both outcomes: renders and template-raised errors.
  EXPECT_GT(compared, 100);
  EXPECT_GT(raised, 4);
}

}  // namespace
}  // namespace moe
