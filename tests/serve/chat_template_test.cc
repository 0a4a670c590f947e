#include "moe/serve/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace moe::serve {
namespace {

namespace fs = std::filesystem;

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Who are you?"}};

std::string render(const std::string& name, const std::vector<ChatMessage>& messages) {
  auto t = ChatTemplate::builtin(name);
  EXPECT_TRUE(t.ok());
  auto s = t.value().render(messages);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? s.value() : "";
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("chat_template_test_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(ChatTemplate, ChatmlExact) {
  EXPECT_EQ(render("chatml", kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nWho are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, MistralExact) {
  EXPECT_EQ(render("mistral", kConversation), "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Who are you? [/INST]");
  EXPECT_EQ(render("mistral", {{"user", "Hi"}}), "[INST] Hi [/INST]");
  auto t = ChatTemplate::builtin("mistral").value();
  auto bad = t.render({{"user", "a"}, {"user", "b"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("alternate"), std::string::npos);
  EXPECT_FALSE(t.render({{"assistant", "a"}}).ok());
}

TEST(ChatTemplate, PlainJoinsContents) {
  EXPECT_EQ(render("plain", {{"user", "ROMEO:"}}), "ROMEO:");
  EXPECT_EQ(render("plain", kConversation), "Be brief.\n\nHi\n\nHello.\n\nWho are you?");
  EXPECT_EQ(ChatTemplate().name(), "plain");
}

TEST(ChatTemplate, UnknownNameAndBadFiles) {
  auto t = ChatTemplate::builtin("jinja");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("chatml"), std::string::npos);
  auto s = ChatTemplate::select("no-such-template", "/nonexistent", "mixtral");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no-such-template"), std::string::npos);
  TempDir dir;
  EXPECT_FALSE(ChatTemplate::from_file(dir.write("a.json", "{not json")).ok());
  EXPECT_FALSE(ChatTemplate::from_file(dir.write("b.json", R"({"user":"{content}"})")).ok());  // no assistant
  EXPECT_FALSE(ChatTemplate::from_file(dir.write("c.json", R"({"user":"x","assistant":1})")).ok());
  auto unknown = ChatTemplate::from_file(dir.write("d.json", R"({"user":"x","assistant":"y","bot":"z"})"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("bot"), std::string::npos);
  EXPECT_FALSE(ChatTemplate::from_file(dir.str() + "/missing.json").ok());
}

TEST(ChatTemplate, FileTemplate) {
  TempDir dir;
  const std::string path = dir.write("t.json", R"({"prefix":"<BEGIN>","system":"S:{content};","user":"U:{content};",
      "assistant":"A:{content}|{content};","generation_prompt":"A:"})");
  auto t = ChatTemplate::select(path, "/nonexistent", "mixtral");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t.value().name(), path);
  EXPECT_EQ(t.value().render(kConversation).value(), "<BEGIN>S:Be brief.;U:Hi;A:Hello.|Hello.;U:Who are you?;A:");
  // Without "system", system text goes before the next user message.
  auto t2 = ChatTemplate::from_file(dir.write("t2.json", R"({"user":"[{content}]","assistant":"{content}"})"));
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(t2.value().render(kConversation).value(), "[Be brief.\n\nHi]Hello.[Who are you?]");
}

TEST(ChatTemplate, SelectionOrder) {
  TempDir qwen, mixtral, none, other;
  qwen.write("tokenizer_config.json", R"({"chat_template":"{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}"})");
  mixtral.write("tokenizer_config.json",
                R"({"chat_template":[{"name":"tool_use","template":"x"},{"name":"default","template":"[INST] {{m}}"}]})");
  none.write("tokenizer_config.json", R"({"add_bos_token":true})");
  other.write("tokenizer_config.json", R"({"chat_template":"{{ messages }}"})");
  EXPECT_EQ(ChatTemplate::select("", qwen.str(), "mixtral").value().name(), "chatml");
  EXPECT_EQ(ChatTemplate::select("", mixtral.str(), "qwen2_moe").value().name(), "mistral");
  EXPECT_EQ(ChatTemplate::select("", none.str(), "qwen3_moe").value().name(), "chatml");
  EXPECT_EQ(ChatTemplate::select("", none.str(), "mixtral").value().name(), "plain");
  EXPECT_EQ(ChatTemplate::select("", other.str(), "mixtral").value().name(), "plain");
  EXPECT_EQ(ChatTemplate::select("", "/nonexistent", "qwen2_moe").value().name(), "chatml");
  EXPECT_EQ(ChatTemplate::select("mistral", qwen.str(), "qwen2_moe").value().name(), "mistral");
  // The shipped Shakespeare model has no chat template: plain.
  EXPECT_EQ(ChatTemplate::select("", std::string(MOE_SOURCE_DIR) + "/models/tiny-mixtral-shakespeare", "mixtral")
                .value()
                .name(),
            "plain");
}

}  // namespace
}  // namespace moe::serve
