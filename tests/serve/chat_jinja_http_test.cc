// A chat request through a real Jinja chat template (Mixtral-8x7B-Instruct-v0.1's, from
// tests/data/chat_templates/): the server renders it, tokenizes the text without adding
// BOS again (the template wrote "<s>"), and answers a template's raise_exception() with a
// 400 naming "messages"; a service that cannot tokenize gets a 500, nothing submitted.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "moe/serve/chat_template.h"
#include "moe/serve/http_server.h"
#include "serve/fake_service.h"

namespace moe::serve {
namespace {

using nlohmann::json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(MOE_SOURCE_DIR) + "/tests/data/chat_templates/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// FakeService without tokenize() (GenerationService's default: Unimplemented).
class NoTokenizeService final : public GenerationService {
 public:
  explicit NoTokenizeService(testing::FakeService* inner) : inner_(inner) {}
  StatusOr<uint64_t> submit(SeqRequest request, SeqSink sink) override { return inner_->submit(std::move(request), std::move(sink)); }
  void cancel(uint64_t id) override { inner_->cancel(id); }
  ServiceSnapshot snapshot() const override { return inner_->snapshot(); }
  const ModelInfo& model_info() const override { return inner_->model_info(); }
  int count_tokens(const std::string& text) const override { return inner_->count_tokens(text); }

 private:
  testing::FakeService* inner_;
};

class ChatJinjaHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = ChatTemplate::from_jinja(read_template("Mixtral-8x7B-Instruct-v0.1.jinja"), "mixtral.jinja", "<s>", "</s>");
    ASSERT_TRUE(t.ok()) << t.status().message();
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.served_model_name = "fake";
    o.chat_template = t.value();
    server_ = std::make_unique<HttpServer>(service_, o);
    no_tokenize_server_ = std::make_unique<HttpServer>(no_tokenize_, std::move(o));
    Status st = server_->start();
    ASSERT_TRUE(st.ok()) << st.message();
    st = no_tokenize_server_->start();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  httplib::Result chat(const json& messages, HttpServer* server = nullptr) {
    httplib::Client c("127.0.0.1", (server ? server : server_.get())->port());
    c.set_read_timeout(10, 0);
    const json body = {{"model", "fake"}, {"messages", messages}, {"max_tokens", 2}};
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }

  testing::FakeService service_{256};
  NoTokenizeService no_tokenize_{&service_};
  std::unique_ptr<HttpServer> server_, no_tokenize_server_;
};

TEST_F(ChatJinjaHttpTest, RendersThroughTheTemplateAndTokenizesWithoutASecondBos) {
  auto r = chat(json::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},
                                {"role":"assistant","content":"Hello."},{"role":"user","content":"Who?"}])"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string expected = "<s> [INST] Be brief.\n\nHi [/INST] Hello.</s> [INST] Who? [/INST]";
  const SeqRequest seen = service_.last_request();
  EXPECT_EQ(seen.prompt, expected);
  std::vector<int> bytes;
  for (char c : expected) bytes.push_back(static_cast<unsigned char>(c));
  EXPECT_EQ(seen.prompt_token_ids, bytes);  // no BOS id (1) in front of the template's "<s>"
  const json j = json::parse(r->body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(expected.size()));
}

TEST_F(ChatJinjaHttpTest, TemplateRaiseIsA400OnMessages) {
  auto r = chat(json::parse(R"([{"role":"user","content":"one"},{"role":"user","content":"two"}])"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["param"], "messages");
  EXPECT_EQ(j["error"]["message"],
            "messages: the chat template (mixtral.jinja) failed: After the optional system message, conversation roles "
            "must alternate user/assistant/user/assistant/...");
  EXPECT_EQ(service_.submitted(), 0);
}

TEST_F(ChatJinjaHttpTest, ServiceWithoutTokenizeIsA500AndNothingIsSubmitted) {
  auto r = chat(json::parse(R"([{"role":"user","content":"Hi"}])"), no_tokenize_server_.get());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["message"], "tokenizing the chat prompt: tokenize is not supported by this service");
  EXPECT_EQ(service_.submitted(), 0);
}

TEST_F(ChatJinjaHttpTest, EmptyRenderedPromptIsA400OnMessages) {
  auto t = ChatTemplate::from_jinja("{# renders nothing #}", "empty.jinja", "", "");
  ASSERT_TRUE(t.ok()) << t.status().message();
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.served_model_name = "fake";
  o.chat_template = t.value();
  HttpServer server(service_, std::move(o));
  ASSERT_TRUE(server.start().ok());
  auto r = chat(json::parse(R"([{"role":"user","content":"Hi"}])"), &server);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["param"], "messages");
  EXPECT_EQ(j["error"]["message"], "messages: the chat template rendered an empty prompt");
  EXPECT_EQ(service_.submitted(), 0);
}

}  // namespace
}  // namespace moe::serve
