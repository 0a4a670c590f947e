// The OpenAI / vLLM parameters against the real engine (`moe serve` on the shipped
// model): each one changes the output as specified. References are independent runs
// of the same server (a lone request, temperature 0 for greedy) or exact properties
// (a +100 logit bias makes every token that token; min_p 1 is greedy; logprobs
// of greedy tokens are the top ones and within the top-k list).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "serve_process.h"

namespace moe {
namespace {

using nlohmann::json;
using testing::ServeProcess;

class ServeOpenAiParams : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServeProcess({"--threads", "1", "--max-num-seqs", "16"}); }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->terminate(), 0) << server_->log();
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << server_->log(); }

  static httplib::Result post(const std::string& path, const json& body) {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(120, 0);
    return cli.Post(path.c_str(), body.dump(), "application/json");
  }
  // A 200 response's JSON (a failed test otherwise).
  static json ok(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r) << body.dump();
    if (!r) return json::object();
    EXPECT_EQ(r->status, 200) << body.dump() << " -> " << r->body;
    json j = json::parse(r->body, nullptr, false);
    return j.is_discarded() || r->status != 200 ? json::object() : j;
  }
  static json completion(json extra) {
    json body = {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return ok("/v1/completions", body);
  }
  static std::string text(const json& j, int i = 0) { return j["choices"][i]["text"].get<std::string>(); }

  static constexpr const char* kPrompt = "First Citizen:\nBefore we proceed any further, hear me speak.";
  static ServeProcess* server_;
};
ServeProcess* ServeOpenAiParams::server_ = nullptr;

TEST_F(ServeOpenAiParams, NSamplesDifferAndEachIsItsSeededLoneRequest) {
  const json j = completion({{"n", 4}, {"temperature", 1.0}, {"seed", 123}, {"max_tokens", 16}});
  ASSERT_EQ(j["choices"].size(), 4u);
  std::set<std::string> distinct;
  for (int i = 0; i < 4; ++i) {
    distinct.insert(text(j, i));
    // Sample i is seeded 123 + i: a lone request with that seed gives the same text.
    const json alone = completion({{"temperature", 1.0}, {"seed", 123 + i}, {"max_tokens", 16}});
    EXPECT_EQ(text(j, i), text(alone)) << i;
  }
  EXPECT_GE(distinct.size(), 3u) << "n samples should differ";
  const json one = completion({{"max_tokens", 16}});
  EXPECT_EQ(j["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]);  // counted once
}

TEST_F(ServeOpenAiParams, PromptListEqualsSeparateRequests) {
  const std::vector<std::string> prompts = {"ROMEO:", "JULIET:\nO Romeo,", "KING LEAR:"};
  const json j = ok("/v1/completions", {{"prompt", prompts}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(j["choices"].size(), 3u);
  int prompt_tokens = 0, completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    const json alone = ok("/v1/completions", {{"prompt", prompts[i]}, {"max_tokens", 12}, {"temperature", 0}});
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(text(j, i), text(alone)) << prompts[i];
    prompt_tokens += alone["usage"]["prompt_tokens"].get<int>();
    completion_tokens += alone["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(j["usage"]["completion_tokens"], completion_tokens);
}

TEST_F(ServeOpenAiParams, EchoPrependsThePrompt) {
  const json plain = completion({});
  const json echoed = completion({{"echo", true}});
  EXPECT_EQ(text(echoed), std::string(kPrompt) + text(plain));
}

TEST_F(ServeOpenAiParams, PenaltiesChangeTheGreedyOutput) {
  // Long greedy output of a tiny model repeats itself; penalties must change that.
  const json base = completion({{"max_tokens", 48}, {"ignore_eos", true}});
  for (const char* p : {"presence_penalty", "frequency_penalty"}) {
    const json pen = completion({{"max_tokens", 48}, {"ignore_eos", true}, {p, 2.0}});
    EXPECT_NE(text(pen), text(base)) << p << " had no effect";
    const json zero = completion({{"max_tokens", 48}, {"ignore_eos", true}, {p, 0.0}});
    EXPECT_EQ(text(zero), text(base)) << p << " 0 must be neutral";
  }
  const json rep = completion({{"max_tokens", 48}, {"ignore_eos", true}, {"repetition_penalty", 2.0}});
  EXPECT_NE(text(rep), text(base)) << "repetition_penalty 2.0 had no effect";
  const json one = completion({{"max_tokens", 48}, {"ignore_eos", true}, {"repetition_penalty", 1.0}});
  EXPECT_EQ(text(one), text(base));
}

TEST_F(ServeOpenAiParams, MinPOfOneIsGreedy) {
  const json greedy = completion({});
  for (int seed : {1, 2, 3}) {
    const json j = completion({{"temperature", 1.0}, {"seed", seed}, {"min_p", 1.0}});
    EXPECT_EQ(text(j), text(greedy)) << seed;
  }
}

TEST_F(ServeOpenAiParams, LogitBiasAndStopTokenIds) {
  // +100 on one token: every generated token is that token.
  const json one = completion({{"max_tokens", 1}, {"logit_bias", {{"100", 100}}}});
  const json many = completion({{"max_tokens", 6}, {"logit_bias", {{"100", 100}}}, {"ignore_eos", true}});
  std::string expected;
  for (int i = 0; i < 6; ++i) expected += text(one);
  EXPECT_EQ(text(many), expected);
  EXPECT_EQ(many["usage"]["completion_tokens"], 6);
  // That token in stop_token_ids: generation stops at it, its text not output.
  const json stopped = completion({{"max_tokens", 6}, {"logit_bias", {{"100", 100}}}, {"stop_token_ids", json::array({100})}});
  EXPECT_EQ(text(stopped), "");
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stopped["usage"]["completion_tokens"], 1);
  EXPECT_NE(text(many), text(completion({{"max_tokens", 6}, {"ignore_eos", true}})));
}

TEST_F(ServeOpenAiParams, CompletionLogprobsAreConsistent) {
  const json j = completion({{"logprobs", 3}, {"max_tokens", 12}, {"ignore_eos", true}});
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << j.dump();
  ASSERT_EQ(lp["tokens"].size(), 12u);
  std::string joined;
  for (size_t i = 0; i < 12; ++i) {
    const double p = lp["token_logprobs"][i].get<double>();
    EXPECT_LE(p, 0.0);
    double best = -1e30, mass = 0;
    for (auto& [tok, v] : lp["top_logprobs"][i].items()) {
      best = std::max(best, v.get<double>());
      mass += std::exp(v.get<double>());
    }
    EXPECT_LE(lp["top_logprobs"][i].size(), 4u);
    EXPECT_NEAR(p, best, 1e-5) << "greedy picks the most likely token";
    EXPECT_LE(mass, 1.0 + 1e-4);
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, text(j));
  // echo with logprobs: the prompt's tokens first, the first with null.
  const json e = completion({{"logprobs", 0}, {"echo", true}, {"max_tokens", 4}});
  const json& elp = e["choices"][0]["logprobs"];
  ASSERT_TRUE(elp.is_object()) << e.dump();
  EXPECT_EQ(elp["tokens"].size(), e["usage"]["prompt_tokens"].get<size_t>() + 4);
  EXPECT_TRUE(elp["token_logprobs"][0].is_null());
  EXPECT_TRUE(elp["token_logprobs"][1].is_number());
}

TEST_F(ServeOpenAiParams, ChatLogprobsAndJsonResponseFormat) {
  const json msgs = json::parse(R"([{"role":"user","content":"Give me a JSON object."}])");
  const json c = ok("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 8}, {"temperature", 0},
                                              {"logprobs", true}, {"top_logprobs", 2}});
  const json& content = c["choices"][0]["logprobs"]["content"];
  ASSERT_TRUE(content.is_array()) << c.dump();
  EXPECT_EQ(content.size(), c["usage"]["completion_tokens"].get<size_t>());
  for (const json& t : content) {
    EXPECT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_NEAR(t["logprob"].get<double>(), t["top_logprobs"][0]["logprob"].get<double>(), 1e-5);
    EXPECT_TRUE(t["bytes"].is_array());
  }
  const json js = ok("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 400}, {"temperature", 0.7},
                                               {"seed", 5},
                                               {"response_format", json::parse(R"({"type": "json_schema", "json_schema":
                                                   {"name": "flag", "schema": {"type": "object", "properties":
                                                   {"ok": {"type": "boolean"}}, "required": ["ok"],
                                                   "additionalProperties": false}}})")}});
  const std::string out = js["choices"][0]["message"]["content"];
  // The schema's object is short: the grammar ends the request when it closes.
  EXPECT_EQ(js["choices"][0]["finish_reason"], "stop") << out;
  const json parsed = json::parse(out, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << "not JSON: " << out;
  ASSERT_TRUE(parsed.is_object()) << out;
  EXPECT_TRUE(parsed["ok"].is_boolean()) << out;
}

TEST_F(ServeOpenAiParams, BadValuesAre400sNamingTheField) {
  auto expect_400 = [](const json& body, const std::string& param) {
    auto r = post("/v1/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], param) << r->body;
  };
  expect_400({{"prompt", "x"}, {"n", 17}}, "n");
  expect_400({{"prompt", "x"}, {"logprobs", 21}}, "logprobs");
  expect_400({{"prompt", "x"}, {"logit_bias", {{"x1", 5}}}}, "logit_bias");
  expect_400({{"prompt", "x"}, {"logit_bias", {{"100000000", 5}}}}, "logit_bias");
  expect_400({{"prompt", "x"}, {"suffix", "y"}}, "suffix");
  auto r = post("/v1/chat/completions", {{"messages", json::parse(R"([{"role":"user","content":"x"}])")},
                                         {"logprobs", true}, {"top_logprobs", 30}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "top_logprobs");
}

// The official `openai` npm client: n, logprobs, penalties, JSON output and a streamed
// n = 2 chat with usage (equal to the same request unstreamed).
TEST_F(ServeOpenAiParams, OpenAiNpmClientUsesTheParameters) {
  const char* modules = std::getenv("MOE_NODE_MODULES");
  ASSERT_TRUE(modules != nullptr && *modules)
      << "MOE_NODE_MODULES is not set: ./scripts/test.sh installs the `openai` npm package and sets it "
         "(or: npm install --prefix DIR openai@4; MOE_NODE_MODULES=DIR/node_modules)";
  testing::CommandResult r = testing::run_command(std::string("NODE_PATH=") + modules + " node " +
                                                  testing::source_dir() + "/tests/e2e/node/openai_params.cjs " +
                                                  server_->base_url());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output.substr(r.output.find('{')));
  ASSERT_EQ(j["n_texts"].size(), 3u);
  EXPECT_EQ(j["n_indexes"], json({0, 1, 2}));
  EXPECT_GE(std::set<std::string>(j["n_texts"].begin(), j["n_texts"].end()).size(), 2u);
  const json& clp = j["completion_logprobs"];
  ASSERT_TRUE(clp.is_object()) << j.dump();
  std::string joined;
  for (const json& t : clp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, j["completion_text"]);
  EXPECT_EQ(clp["token_logprobs"].size(), clp["top_logprobs"].size());
  ASSERT_TRUE(j["chat_logprobs"].is_object()) << j.dump();
  EXPECT_EQ(j["chat_logprobs"]["content"].size(), j["chat_completion_tokens"].get<size_t>());
  EXPECT_NE(j["penalized"], j["base"]);
  EXPECT_TRUE(j["json_ok"].get<bool>()) << j["json_text"];
  ASSERT_EQ(j["whole_texts"].size(), 2u);
  EXPECT_EQ(j["stream_texts"]["0"], j["whole_texts"][0]);  // seeded: streamed = unstreamed
  EXPECT_EQ(j["stream_texts"]["1"], j["whole_texts"][1]);
  EXPECT_EQ(j["stream_finishes"].size(), 2u);
  EXPECT_EQ(j["stream_usage"], j["whole_usage"]);
  EXPECT_EQ(j["bad_n"]["status"], 400);
  EXPECT_EQ(j["bad_n"]["param"], "n");
}

}  // namespace
}  // namespace moe
