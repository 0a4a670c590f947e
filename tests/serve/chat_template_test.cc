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
  TempDir qwen, listed, none, broken;
  qwen.write("tokenizer_config.json",
             R"({"chat_template":"{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}","eos_token":"<|im_end|>"})");
  listed.write("tokenizer_config.json",
               R"({"chat_template":[{"name":"tool_use","template":"x"},{"name":"default","template":"[INST] {{ messages[0].content }}"}]})");
  none.write("tokenizer_config.json", R"({"add_bos_token":true})");
  broken.write("tokenizer_config.json", "{not json");
  // A tokenizer_config.json chat_template is rendered as Jinja (for a list: "default").
  auto q = ChatTemplate::select("", qwen.str(), "mixtral");
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q.value().name(), qwen.str() + "/tokenizer_config.json");
  EXPECT_TRUE(q.value().renders_special_tokens());
  EXPECT_EQ(q.value().render(kConversation).value(), "<|im_start|>system<|im_start|>user<|im_start|>assistant<|im_start|>user");
  EXPECT_EQ(ChatTemplate::select("", listed.str(), "qwen2_moe").value().render(kConversation).value(), "[INST] Be brief.");
  // Without one: by model family, else plain; an unreadable config is ignored.
  EXPECT_EQ(ChatTemplate::select("", none.str(), "qwen3_moe").value().name(), "chatml");
  EXPECT_EQ(ChatTemplate::select("", none.str(), "mixtral").value().name(), "plain");
  EXPECT_EQ(ChatTemplate::select("", broken.str(), "mixtral").value().name(), "plain");
  EXPECT_EQ(ChatTemplate::select("", "/nonexistent", "qwen2_moe").value().name(), "chatml");
  EXPECT_FALSE(ChatTemplate::select("", none.str(), "qwen3_moe").value().renders_special_tokens());
  // --chat-template wins over the model's.
  EXPECT_EQ(ChatTemplate::select("mistral", qwen.str(), "qwen2_moe").value().name(), "mistral");
  // The shipped Shakespeare model has no chat template: plain.
  EXPECT_EQ(ChatTemplate::select("", std::string(MOE_SOURCE_DIR) + "/models/tiny-mixtral-shakespeare", "mixtral")
                .value()
                .name(),
            "plain");
}

TEST(ChatTemplate, JinjaGetsBosAndEosFromTheTokenizerConfig) {
  TempDir dir;
  // bos as a string, eos as an AddedToken object.
  dir.write("tokenizer_config.json",
            R"({"bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false},)"
            R"("chat_template":"{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"})");
  auto t = ChatTemplate::select("", dir.str(), "mixtral");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t.value().render(kConversation).value(),
            "<s>[system]Be brief.[user]Hi[assistant]Hello.</s>[user]Who are you?[assistant]");
}

TEST(ChatTemplate, ChatTemplateFlagTakesJinjaFiles) {
  TempDir model, files;
  model.write("tokenizer_config.json", R"({"bos_token":"<s>","eos_token":"</s>"})");
  // A .jinja file, and a file of another name whose text is Jinja (not a JSON object).
  const std::string a = files.write("t.jinja", "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n{% endfor %}");
  const std::string b = files.write("template.txt", "{%- for m in messages -%}{{ m.content | upper }};{%- endfor -%}\n");
  auto ta = ChatTemplate::select(a, model.str(), "mixtral");
  ASSERT_TRUE(ta.ok()) << ta.status().message();
  EXPECT_EQ(ta.value().name(), a);
  EXPECT_EQ(ta.value().render({{"user", "  hi  "}, {"assistant", "yo"}}).value(), "<s><user>hi\n<assistant>yo\n");
  auto tb = ChatTemplate::select(b, "", "mixtral");
  ASSERT_TRUE(tb.ok()) << tb.status().message();
  EXPECT_EQ(tb.value().render({{"user", "hi"}, {"assistant", "yo"}}).value(), "HI;YO;");
  // Today's JSON format still works under any name.
  const std::string c = files.write("turns.txt", R"({"user":"U:{content}\n","assistant":"A:{content}\n"})");
  auto tc = ChatTemplate::select(c, "", "mixtral");
  ASSERT_TRUE(tc.ok()) << tc.status().message();
  EXPECT_FALSE(tc.value().renders_special_tokens());
  EXPECT_EQ(tc.value().render({{"user", "hi"}}).value(), "U:hi\n");
}

TEST(ChatTemplate, UnsupportedJinjaFailsAtSelectNamingFeatureAndLine) {
  TempDir model, files;
  model.write("tokenizer_config.json", R"({"chat_template":"{% for m in messages %}\n{{ m.content | wordwrap(5) }}{% endfor %}"})");
  auto s = ChatTemplate::select("", model.str(), "mixtral");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("tokenizer_config.json"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("line 2: unsupported filter 'wordwrap'"), std::string::npos) << s.status().message();
  const std::string f = files.write("t.jinja", "ok\n{% include 'other.jinja' %}");
  auto t = ChatTemplate::select(f, "", "mixtral");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 2: unsupported tag 'include'"), std::string::npos) << t.status().message();
}

TEST(ChatTemplate, JinjaRaiseAndRuntimeErrorsAreInvalidArgumentOnMessages) {
  auto t = ChatTemplate::from_jinja(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first turn must be user') }}{% endif %}"
      "{{ messages[0].content }}{% if messages|length > 1 %}{{ messages[1].content + 1 }}{% endif %}",
      "test.jinja", "", "");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t.value().render({{"user", "hi"}}).value(), "hi");
  auto raised = t.value().render({{"assistant", "x"}});
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(raised.status().message(), "messages: the chat template (test.jinja) failed: first turn must be user");
  auto type_error = t.value().render({{"user", "hi"}, {"assistant", "there"}});
  ASSERT_FALSE(type_error.ok());
  EXPECT_NE(type_error.status().message().find("line 1: unsupported operand types for +: string and int"), std::string::npos)
      << type_error.status().message();
  auto runtime = ChatTemplate::from_jinja("{{ messages[0].content.missing.deeper }}", "t2", "", "");
  ASSERT_TRUE(runtime.ok());
  auto r = runtime.value().render({{"user", "x"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 1: attribute 'deeper' of undefined 'missing'"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace moe::serve
