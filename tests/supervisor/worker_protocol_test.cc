// The supervisor's internal JSON forms round-trip exactly, and malformed input is an
// error naming the field, never a silently default value.
#include "moe/supervisor/worker_protocol.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "test_util.h"

namespace moe::supervisor {
namespace {

TEST(WorkerProtocolTest, RequestRoundTripsEveryField) {
  SeqRequest r;
  r.prompt = "ROMEO:\n\"quoted\" \xc3\xa9";
  r.prompt_token_ids = {1, 2, 3};
  r.max_tokens = 77;
  r.sampling.temperature = 0.7f;
  r.sampling.top_k = 12;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 18446744073709551615ull;  // the largest seed survives
  r.sampling.min_p = 0.05f;
  r.sampling.presence_penalty = -1.5f;
  r.sampling.frequency_penalty = 0.3f;
  r.sampling.repetition_penalty = 1.7f;
  r.sampling.logit_bias = {{42, -100.0f}, {7, 0.1f}};
  r.stop = {"\n\n", "END"};
  r.ignore_eos = true;
  r.stop_token_ids = {13, 2};
  r.logprobs = 5;
  r.prompt_logprobs = 0;
  r.response_format = "json_schema";
  r.json_schema = R"({"type":"object"})";
  r.resume_token_ids = {5, 6, 7};
  r.cache_salt = "tenant:ab\nsession-1";
  auto d = decode_request(encode_request(r));
  ASSERT_TRUE(d.ok()) << d.status().message();
  const SeqRequest& g = d.value();
  EXPECT_EQ(g.prompt, r.prompt);
  EXPECT_EQ(g.prompt_token_ids, r.prompt_token_ids);
  EXPECT_EQ(g.max_tokens, 77);
  EXPECT_EQ(g.sampling.temperature, 0.7f);  // float -> JSON -> float is exact
  EXPECT_EQ(g.sampling.top_k, 12);
  EXPECT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.seed, r.sampling.seed);
  EXPECT_EQ(g.sampling.min_p, 0.05f);
  EXPECT_EQ(g.sampling.presence_penalty, -1.5f);
  EXPECT_EQ(g.sampling.frequency_penalty, 0.3f);
  EXPECT_EQ(g.sampling.repetition_penalty, 1.7f);
  EXPECT_EQ(g.sampling.logit_bias, r.sampling.logit_bias);
  EXPECT_EQ(g.stop, r.stop);
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.stop_token_ids, r.stop_token_ids);
  EXPECT_EQ(g.logprobs, 5);
  EXPECT_EQ(g.prompt_logprobs, 0);
  EXPECT_EQ(g.response_format, "json_schema");
  EXPECT_EQ(g.json_schema, r.json_schema);
  EXPECT_EQ(g.resume_token_ids, r.resume_token_ids);
  EXPECT_EQ(g.cache_salt, r.cache_salt);

  SeqRequest unseeded;
  unseeded.prompt = "x";
  auto u = decode_request(encode_request(unseeded));
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u.value().sampling.seed.has_value());
  EXPECT_EQ(u.value().max_tokens, unseeded.max_tokens);
  // Defaults survive as defaults (logprobs off, no penalties).
  EXPECT_EQ(u.value().logprobs, -1);
  EXPECT_EQ(u.value().prompt_logprobs, -1);
  EXPECT_EQ(u.value().sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(u.value().response_format, "text");
}

TEST(WorkerProtocolTest, RequestCarriesResponseFormat) {
  SeqRequest r;
  r.prompt = "x";
  r.response_format = "json_schema";
  r.json_schema = R"({"type":"object","properties":{"a\u00e9":{"enum":["\"q\""]}}})";
  auto d = decode_request(encode_request(r));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d.value().response_format, "json_schema");
  EXPECT_EQ(d.value().json_schema, r.json_schema);
  auto plain = decode_request(R"({"prompt":"x"})");  // absent: no constraint
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value().response_format, "text");
  EXPECT_TRUE(plain.value().json_schema.empty());
  auto bad = decode_request(R"({"prompt":"x","response_format":7})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("response_format"), std::string::npos) << bad.status().message();
}

TEST(WorkerProtocolTest, EventRoundTrips) {
  SeqEvent e;
  e.text = "lo, \xe2\x9c\x93";
  e.token_ids = {10, 11};
  e.prompt_tokens = 4;
  e.completion_tokens = 9;
  e.cached_tokens = 3;
  auto d = decode_event(encode_event(e));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().text, e.text);
  EXPECT_EQ(d.value().token_ids, e.token_ids);
  EXPECT_FALSE(d.value().finished);
  EXPECT_EQ(d.value().prompt_tokens, 4);
  EXPECT_EQ(d.value().completion_tokens, 9);
  EXPECT_EQ(d.value().cached_tokens, 3);

  SeqEvent f;
  f.finished = true;
  f.finish_reason = "error";
  f.error = "rank 1: peer gone";
  auto df = decode_event(encode_event(f));
  ASSERT_TRUE(df.ok());
  EXPECT_TRUE(df.value().finished);
  EXPECT_EQ(df.value().finish_reason, "error");
  EXPECT_EQ(df.value().error, "rank 1: peer gone");
  EXPECT_TRUE(df.value().logprobs.empty());
}

TEST(WorkerProtocolTest, EventLogprobsRoundTripExactlyIncludingMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  SeqEvent e;
  e.token_ids = {10, 11};
  e.logprobs = {{.token_id = 10, .logprob = -0.1234567f, .top = {{10, -0.1234567f}, {3, -2.5f}}},
                {.token_id = 11, .logprob = -inf, .top = {}}};
  e.prompt_logprobs = {{.token_id = 1, .logprob = 0.0f, .top = {}},
                       {.token_id = 9, .logprob = -7.25f, .top = {{4, -0.01f}, {5, -inf}}}};
  auto d = decode_event(encode_event(e));
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto same = [](const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].token_id, b[i].token_id);
      EXPECT_EQ(a[i].logprob, b[i].logprob);  // exact, -inf included
      EXPECT_EQ(a[i].top, b[i].top);
    }
  };
  same(d.value().logprobs, e.logprobs);
  same(d.value().prompt_logprobs, e.prompt_logprobs);

  for (const char* bad : {R"({"logprobs":{"id":1}})", R"({"logprobs":[{"logprob":-1}]})",
                          R"({"logprobs":[{"id":1,"logprob":"low"}]})", R"({"prompt_logprobs":[{"id":1,"logprob":-1,"top":[[1]]}]})",
                          R"({"prompt_logprobs":[{"id":1,"logprob":-1,"top":5}]})"}) {
    auto b = decode_event(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("logprobs"), std::string::npos) << b.status().message();
  }
}

TEST(WorkerProtocolTest, ModelInfoSnapshotAndHealthRoundTrip) {
  ModelInfo m;
  m.model_dir = "/m/tiny";
  m.model_type = "mixtral";
  m.vocab_size = 32000;
  m.hidden_size = 64;
  m.num_layers = 4;
  m.num_experts = 8;
  m.top_k = 2;
  m.num_moe_layers = 4;
  m.max_context = 512;
  m.num_parameters = 123456789012;
  m.num_active_parameters = 3;
  m.weight_bytes = 7;
  m.decode_bytes_per_token = 8;
  auto dm = decode_model_info(encode_model_info(m));
  ASSERT_TRUE(dm.ok());
  EXPECT_EQ(encode_model_info(dm.value()), encode_model_info(m));
  EXPECT_EQ(dm.value().num_parameters, 123456789012);

  ServiceSnapshot s;
  s.running = 2;
  s.waiting = 3;
  s.kv_blocks_total = 100;
  s.kv_blocks_used = 5;
  s.kv_block_size = 16;
  s.steps = 99;
  s.prompt_tokens_total = 1;
  s.generation_tokens_total = 2;
  s.requests_finished = 4;
  s.moe_layers = {0, 2};
  s.expert_tokens = {{1, 2}, {3, 4}};
  s.worker_failures = 1;
  s.recoveries = 1;
  s.replayed_requests = 6;
  s.recovery_seconds = {1.25};
  s.preemptions = 7;
  s.prefix_cache_queries = 800;
  s.prefix_cache_hits = 640;
  s.kv_disk_hits = 9;
  s.kv_disk_hit_bytes = 90;
  s.kv_disk_writes = 11;
  s.kv_disk_write_bytes = 110;
  s.kv_disk_rejects = 1;
  s.kv_disk_write_failures = 2;
  auto ds = decode_snapshot(encode_snapshot(s));
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(encode_snapshot(ds.value()), encode_snapshot(s));
  EXPECT_EQ(ds.value().expert_tokens, s.expert_tokens);
  EXPECT_EQ(ds.value().recovery_seconds, s.recovery_seconds);
  EXPECT_EQ(ds.value().prefix_cache_hits, 640);
  EXPECT_EQ(ds.value().kv_disk_write_failures, 2);

  ServiceHealth h;
  h.state = "stalled";
  h.detail = "step running for 12.5 s";
  h.worker_pids = {100, 101};
  auto dh = decode_health(encode_health(h));
  ASSERT_TRUE(dh.ok());
  EXPECT_EQ(dh.value().state, "stalled");
  EXPECT_EQ(dh.value().detail, h.detail);
  EXPECT_EQ(dh.value().worker_pids, h.worker_pids);
}

TEST(WorkerProtocolTest, SubmitReplyCarriesTheIdOrTheRefusal) {
  auto ok = decode_submit_reply(encode_submit_reply(StatusOr<uint64_t>(uint64_t{42})));
  ASSERT_TRUE(ok.ok());
  ASSERT_TRUE(ok.value().ok());
  EXPECT_EQ(ok.value().value(), 42u);
  auto no = decode_submit_reply(encode_submit_reply(invalid_argument("prompt too long")));
  ASSERT_TRUE(no.ok());
  ASSERT_FALSE(no.value().ok());
  EXPECT_EQ(no.value().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(no.value().status().message(), "prompt too long");
  EXPECT_FALSE(decode_submit_reply(R"({"rejected":{"code":999,"message":"x"}})").ok());
  EXPECT_FALSE(decode_submit_reply(R"({"something":1})").ok());
}

TEST(WorkerProtocolTest, MalformedInputIsAnErrorNamingTheField) {
  auto bad_type = decode_request(R"({"prompt":"x","max_tokens":"many"})");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_type.status().message().find("max_tokens"), std::string::npos);
  EXPECT_FALSE(decode_request("not json").ok());
  EXPECT_FALSE(decode_request("[1,2]").ok());
  EXPECT_FALSE(decode_event(R"({"finished":true})").ok());  // no finish_reason
  EXPECT_FALSE(decode_event(R"({"token_ids":[1,"a"]})").ok());
  EXPECT_FALSE(decode_model_info(R"({"model_dir":"x"})").ok());  // no context
  EXPECT_FALSE(decode_health(R"({"detail":"x"})").ok());         // no state
  EXPECT_FALSE(decode_snapshot(R"({"running":"two"})").ok());
  auto bad_bias = decode_request(R"({"prompt":"x","logit_bias":[[1,"up"]]})");
  ASSERT_FALSE(bad_bias.ok());
  EXPECT_NE(bad_bias.status().message().find("logit_bias"), std::string::npos);
  auto bad_stop_ids = decode_request(R"({"prompt":"x","stop_token_ids":"13"})");
  ASSERT_FALSE(bad_stop_ids.ok());
  EXPECT_NE(bad_stop_ids.status().message().find("stop_token_ids"), std::string::npos);
}

TEST(WorkerProtocolTest, RendezvousFilesPublishPortAndRankPids) {
  const std::string dir = moe::testing::make_temp_dir("rendezvous");
  EXPECT_EQ(read_endpoint_port(dir).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(publish_rank_pid(dir, 1, 4321).ok());
  EXPECT_EQ(read_rank_pids(dir, 2), (std::vector<int64_t>{-1, 4321}));
  ASSERT_TRUE(publish_endpoint(dir, 5555, 1234).ok());
  ASSERT_TRUE(publish_rank_pid(dir, 0, 1234).ok());
  auto port = read_endpoint_port(dir);
  ASSERT_TRUE(port.ok());
  EXPECT_EQ(port.value(), 5555);
  EXPECT_EQ(read_rank_pids(dir, 2), (std::vector<int64_t>{1234, 4321}));
  std::ofstream(dir + "/endpoint.json") << "{\"port\":\"x\"}";
  EXPECT_EQ(read_endpoint_port(dir).status().code(), StatusCode::kDataLoss);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moe::supervisor
