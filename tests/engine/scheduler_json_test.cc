// Grammar-constrained decoding through the Scheduler on the tiny model
// (SeqRequest::response_format): sampled outputs (temperature 1, several seeds) are
// JSON objects, or conform to the schema, as /usr/bin/python3 judges them; a replay
// (resume_token_ids) continues the grammar; bad formats and schemas are refused at
// submit, naming response_format.
#include <gtest/gtest.h>

#include <cctype>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "constrain/json_reference.h"
#include "moe/constrain/json_grammar.h"
#include "moe/model/tokenizer.h"
#include "moe/scheduler.h"
#include "test_util.h"

namespace moe {
namespace {

struct Outcome {
  std::vector<int> tokens;
  std::string text, finish_reason, error;
  bool done = false;
};

class Collector {
 public:
  SeqSink sink(int key) {
    return [this, key](SeqEvent&& ev) {
      std::lock_guard<std::mutex> lock(mu_);
      Outcome& o = out_[key];
      o.tokens.insert(o.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      o.text += ev.text;
      if (ev.finished) {
        o.done = true;
        o.finish_reason = ev.finish_reason;
        o.error = ev.error;
        cv_.notify_all();
      }
    };
  }
  Outcome wait(int key) {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(120), [&] { return out_[key].done; })) << key;
    return out_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Outcome> out_;
};

class SchedulerJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.model_dir = testing::tiny_model_dir();
    auto e = Engine::open(o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(e).value();
    SchedulerOptions so;
    so.max_num_seqs = 8;
    auto s = Scheduler::create(engine_.get(), so);
    ASSERT_TRUE(s.ok()) << s.status().message();
    sched_ = std::move(s).value();
    loop_ = std::thread([this] { status_ = sched_->run(); });
    dir_ = testing::make_temp_dir("scheduler_json");
  }
  void TearDown() override {
    if (sched_) sched_->shutdown(0);
    if (loop_.joinable()) loop_.join();
    EXPECT_TRUE(status_.ok()) << status_.message();
    std::filesystem::remove_all(dir_);
  }
  SeqRequest request(const std::string& format, const std::string& schema, uint64_t seed, int max_tokens) {
    SeqRequest r;
    r.prompt = "ROMEO:\nWhat say you?";
    r.max_tokens = max_tokens;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.response_format = format;
    r.json_schema = schema;
    return r;
  }
  // Submits every request, waits for all.
  std::vector<Outcome> run_all(const std::vector<SeqRequest>& reqs) {
    Collector c;
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto id = sched_->submit(reqs[i], c.sink(static_cast<int>(i)));
      EXPECT_TRUE(id.ok()) << id.status().message();
    }
    std::vector<Outcome> out;
    for (size_t i = 0; i < reqs.size(); ++i) out.push_back(c.wait(static_cast<int>(i)));
    return out;
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Scheduler> sched_;
  std::thread loop_;
  Status status_ = ok_status();
  std::string dir_;
};

const char* kSchema = R"({"type": "object", "properties": {
    "mood": {"enum": ["merry", "sad", "wroth"]}, "count": {"type": "integer"},
    "ok": {"type": "boolean"}, "note": {"type": ["null", "boolean"]},
    "pair": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}},
  "required": ["mood", "count", "ok", "pair"], "additionalProperties": false})";

TEST_F(SchedulerJsonTest, SampledOutputsConformToTheSchema) {
  std::vector<SeqRequest> reqs;
  for (uint64_t seed = 1; seed <= 4; ++seed) reqs.push_back(request("json_schema", kSchema, seed, 300));
  const std::vector<Outcome> out = run_all(reqs);
  std::vector<std::pair<std::string, std::string>> cases;
  std::set<std::string> distinct;
  for (const Outcome& o : out) {
    EXPECT_EQ(o.finish_reason, "stop") << o.text << " " << o.error;  // the value ended it
    cases.emplace_back(o.text, kSchema);
    distinct.insert(o.text);
  }
  EXPECT_GT(distinct.size(), 1u);  // sampled, not one fixed text
  const std::vector<int> ref = testing::python_verdicts(dir_, cases);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(ref[i], 1) << cases[i].first;
}

TEST_F(SchedulerJsonTest, SampledJsonObjectsAreValidOrValidPrefixes) {
  std::vector<SeqRequest> reqs;
  for (uint64_t seed = 1; seed <= 4; ++seed) reqs.push_back(request("json_object", "", seed, 60));
  const std::vector<Outcome> out = run_all(reqs);
  const JsonGrammar grammar = json_object_grammar();
  std::vector<std::pair<std::string, std::string>> cases;
  for (const Outcome& o : out) {
    ASSERT_TRUE(o.finish_reason == "stop" || o.finish_reason == "length") << o.finish_reason << " " << o.error;
    std::string text = o.text;
    // Cut short by max_tokens: Python judges the shortest completion of what came.
    if (o.finish_reason == "length") {
      ASSERT_TRUE(testing::complete_greedily(grammar, o.text, &text)) << o.text;
    }
    cases.emplace_back(text, R"({"type": "object"})");
  }
  const std::vector<int> ref = testing::python_verdicts(dir_, cases);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(ref[i], 1) << cases[i].first << " from " << out[i].text;
  // Unconstrained, the same requests are not JSON (the constraint did the work).
  std::vector<SeqRequest> plain;
  for (uint64_t seed = 1; seed <= 3; ++seed) plain.push_back(request("text", "", seed, 20));
  for (const Outcome& o : run_all(plain)) EXPECT_EQ(o.text.find('{'), std::string::npos) << o.text;
}

TEST_F(SchedulerJsonTest, IgnoreEosStillEndsAtTheEndOfTheValue) {
  SeqRequest r = request("json_schema", R"({"enum": ["merry", "sad"]})", 3, 50);
  r.ignore_eos = true;
  const Outcome o = run_all({r})[0];
  EXPECT_EQ(o.finish_reason, "stop");
  // One whitespace byte may come before the value.
  const std::string value = !o.text.empty() && std::isspace(static_cast<unsigned char>(o.text[0])) ? o.text.substr(1) : o.text;
  EXPECT_TRUE(value == "\"merry\"" || value == "\"sad\"") << "'" << o.text << "' " << testing::to_hex(o.text);
}

TEST_F(SchedulerJsonTest, AResumedRequestContinuesTheGrammar) {
  const SeqRequest r = request("json_schema", kSchema, 5, 300);
  const Outcome whole = run_all({r})[0];
  ASSERT_EQ(whole.finish_reason, "stop");
  ASSERT_GT(whole.tokens.size(), 6u);
  SeqRequest resumed = r;
  resumed.resume_token_ids.assign(whole.tokens.begin(), whole.tokens.begin() + 5);
  const Outcome rest = run_all({resumed})[0];
  EXPECT_EQ(rest.finish_reason, "stop");
  std::vector<int> joined = resumed.resume_token_ids;
  joined.insert(joined.end(), rest.tokens.begin(), rest.tokens.end());
  EXPECT_EQ(joined, whole.tokens);  // as if uninterrupted

  // Tokens the grammar could not have produced are refused, naming the position.
  SeqRequest bad = r;
  auto tokenizer = Tokenizer::load(testing::tiny_model_dir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  bad.resume_token_ids = (*tokenizer)->encode("hello", false);
  Collector c;
  auto refused = sched_->submit(bad, c.sink(0));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("resume_token_ids[0]"), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("does not continue the response_format's JSON value"), std::string::npos)
      << refused.status().message();
}

TEST_F(SchedulerJsonTest, BadFormatsAndSchemasAreRefusedAtSubmit) {
  Collector c;
  for (const auto& [format, schema, message] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"yaml", "", "response_format must be"},
           {"json_schema", "", "response_format.json_schema: missing"},
           {"json_schema", R"({"type":"object","properties":{"x":{"type":"string","pattern":"^a"}}})",
            "response_format.json_schema: unsupported keyword 'pattern' at #/properties/x"},
           {"json_schema", "{", "response_format.json_schema: not valid JSON"}}) {
    SeqRequest r = request(format, schema, 1, 10);
    auto id = sched_->submit(r, c.sink(0));
    ASSERT_FALSE(id.ok()) << format << " " << schema;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(id.status().message().find(message), std::string::npos) << id.status().message();
  }
}

}  // namespace
}  // namespace moe
