// Manifests: JSON round trip, lookups, and every validation error naming the origin
// file and the field or shard.
#include "moe/store/manifest.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "contains_util.h"

namespace moe {
namespace {

using nlohmann::json;

const char* kOrigin = "/store/MANIFEST-000002";

Manifest sample_manifest() {
  Manifest m;
  m.version = 2;
  m.parent_version = 1;
  m.created_unix_ms = 1764640000123;
  m.model_type = "mixtral";
  m.fingerprint = Hash128{0x1111, 0x2222};
  m.config_json = "{\"model_type\": \"mixtral\",\n \"x\": \"q\\\"\"}";
  m.source_dir = "/models/tiny";
  ShardEntry e;
  e.id = "layer.0.expert.1";
  e.kind = ShardKind::kExpert;
  e.layer = 0;
  e.expert = 1;
  e.hash = Hash128{0xaaaabbbbccccddddULL, 0x0123456789abcdefULL};
  e.codec = Codec::kZstdPlanes;
  e.element_bytes = 2;
  e.raw_bytes = 96;
  e.stored_bytes = 50;
  e.tensors = {{"model.layers.0.block_sparse_moe.experts.1.w1.weight", "BF16", {4, 8}, 0, 64},
               {"model.layers.0.block_sparse_moe.experts.1.w2.weight", "BF16", {2, 8}, 64, 32}};
  ShardEntry l;
  l.id = "layer.0";
  l.kind = ShardKind::kLayer;
  l.layer = 0;
  l.hash = Hash128{3, 4};
  l.codec = Codec::kZstd;
  l.element_bytes = 1;
  l.raw_bytes = 16;
  l.stored_bytes = 20;
  l.tensors = {{"model.layers.0.input_layernorm.weight", "F32", {4}, 0, 16}};
  ShardEntry f;
  f.id = "file:model.safetensors#header";
  f.kind = ShardKind::kFile;
  f.file_name = "model.safetensors#header";
  f.hash = Hash128{5, 6};
  f.codec = Codec::kRaw;
  f.raw_bytes = 300;
  f.stored_bytes = 300;
  ShardEntry c = f;
  c.id = "file:config.json";
  c.file_name = "config.json";
  c.hash = Hash128{7, 8};
  m.shards = {e, l, f, c};
  m.hf_files = {{"model.safetensors", "file:model.safetensors#header",
                 {"model.layers.0.input_layernorm.weight", "model.layers.0.block_sparse_moe.experts.1.w1.weight",
                  "model.layers.0.block_sparse_moe.experts.1.w2.weight"}}};
  return m;
}

TEST(ManifestTest, RoundTripAndLookups) {
  const Manifest m = sample_manifest();
  const std::string text = manifest_to_json(m);
  // Plain JSON with the documented field names.
  json j = json::parse(text);
  EXPECT_EQ(j["format"], "moe-expert-store");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["fingerprint"], "00000000000011110000000000002222");
  EXPECT_EQ(j["shards"][0]["codec"], "zstd-planes");
  EXPECT_EQ(j["shards"][0]["hash"], "aaaabbbbccccdddd0123456789abcdef");
  EXPECT_EQ(j["shards"][3]["file_name"], "config.json");

  auto p = parse_manifest(text, kOrigin);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->version, 2);
  EXPECT_EQ(p->parent_version, 1);
  EXPECT_EQ(p->created_unix_ms, 1764640000123);
  EXPECT_EQ(p->model_type, "mixtral");
  EXPECT_EQ(p->fingerprint, m.fingerprint);
  EXPECT_EQ(p->config_json, m.config_json);
  EXPECT_EQ(p->source_dir, m.source_dir);
  ASSERT_EQ(p->shards.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const auto& a = p->shards[i];
    const auto& b = m.shards[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.expert, b.expert);
    EXPECT_EQ(a.file_name, b.file_name);
    EXPECT_EQ(a.hash, b.hash);
    EXPECT_EQ(a.codec, b.codec);
    EXPECT_EQ(a.element_bytes, b.element_bytes);
    EXPECT_EQ(a.raw_bytes, b.raw_bytes);
    EXPECT_EQ(a.stored_bytes, b.stored_bytes);
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (size_t t = 0; t < a.tensors.size(); ++t) {
      EXPECT_EQ(a.tensors[t].name, b.tensors[t].name);
      EXPECT_EQ(a.tensors[t].dtype, b.tensors[t].dtype);
      EXPECT_EQ(a.tensors[t].shape, b.tensors[t].shape);
      EXPECT_EQ(a.tensors[t].offset, b.tensors[t].offset);
      EXPECT_EQ(a.tensors[t].nbytes, b.tensors[t].nbytes);
    }
  }
  ASSERT_EQ(p->hf_files.size(), 1u);
  EXPECT_EQ(p->hf_files[0].name, "model.safetensors");
  EXPECT_EQ(p->hf_files[0].header_shard, "file:model.safetensors#header");
  EXPECT_EQ(p->hf_files[0].tensors, m.hf_files[0].tensors);
  EXPECT_EQ(manifest_to_json(*p), text);

  EXPECT_EQ(p->find_shard("layer.0"), &p->shards[1]);
  EXPECT_EQ(p->find_shard("layer.9"), nullptr);
  EXPECT_EQ(p->find_expert(0, 1), &p->shards[0]);
  EXPECT_EQ(p->find_expert(0, 2), nullptr);
  EXPECT_EQ(p->find_file("config.json"), &p->shards[3]);
  EXPECT_EQ(p->find_file("tokenizer.model"), nullptr);
  auto [s, t] = p->find_tensor("model.layers.0.block_sparse_moe.experts.1.w2.weight");
  EXPECT_EQ(s, &p->shards[0]);
  EXPECT_EQ(t, &p->shards[0].tensors[1]);
  EXPECT_EQ(p->find_tensor("nope").first, nullptr);
  EXPECT_EQ(p->total_raw_bytes(), 96u + 16u + 300u + 300u);
  EXPECT_EQ(p->total_stored_bytes(), 50u + 20u + 300u + 300u);
}

TEST(ManifestTest, Describe) {
  const Manifest m = sample_manifest();
  EXPECT_EQ(m.shards[0].describe(), "layer 0, expert 1");
  EXPECT_EQ(m.shards[1].describe(), "layer 0 (non-expert tensors)");
  EXPECT_EQ(m.shards[3].describe(), "file config.json");
  ShardEntry model;
  model.kind = ShardKind::kModel;
  EXPECT_CONTAINS(model.describe(), "model");
  EXPECT_STREQ(shard_kind_name(ShardKind::kExpert), "expert");
  EXPECT_STREQ(shard_kind_name(ShardKind::kFile), "file");
}

// Parses the sample after `mutate` and expects DataLoss whose message has `needles`.
void expect_rejected(const std::function<void(json&)>& mutate, std::vector<std::string> needles) {
  json j = json::parse(manifest_to_json(sample_manifest()));
  mutate(j);
  auto p = parse_manifest(j.dump(), kOrigin);
  ASSERT_FALSE(p.ok()) << "accepted: " << j.dump();
  EXPECT_EQ(p.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(p.status().message(), kOrigin);
  for (const auto& n : needles) EXPECT_CONTAINS(p.status().message(), n);
}

TEST(ManifestTest, GarbageAndTruncatedText) {
  const std::string text = manifest_to_json(sample_manifest());
  for (const std::string& bad : {std::string("not json at all"), text.substr(0, text.size() / 2), std::string(""),
                                 std::string("[1, 2]")}) {
    auto p = parse_manifest(bad, kOrigin);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::kDataLoss);
    EXPECT_CONTAINS(p.status().message(), kOrigin);
  }
}

TEST(ManifestTest, TopLevelFields) {
  expect_rejected([](json& j) { j["format"] = "other"; }, {"'format'", "other"});
  expect_rejected([](json& j) { j["format_version"] = 2; }, {"'format_version'"});
  for (const char* field : {"version", "parent_version", "created_unix_ms", "model_type", "fingerprint",
                            "config_json", "source_dir", "shards", "hf_files"}) {
    expect_rejected([&](json& j) { j.erase(field); }, {std::string("'") + field + "'", "missing"});
  }
  expect_rejected([](json& j) { j["version"] = "2"; }, {"'version'", "not an integer"});
  expect_rejected([](json& j) { j["model_type"] = 5; }, {"'model_type'", "not a string"});
  expect_rejected([](json& j) { j["shards"] = json::object(); }, {"'shards'", "not an array"});
  expect_rejected([](json& j) { j["fingerprint"] = "abc"; }, {"'fingerprint'", "abc"});
  expect_rejected([](json& j) { j["parent_version"] = 2; }, {"'parent_version'"});
}

TEST(ManifestTest, ShardFields) {
  for (const char* field : {"id", "kind", "layer", "expert", "hash", "codec", "element_bytes", "raw_bytes",
                            "stored_bytes", "tensors"}) {
    expect_rejected([&](json& j) { j["shards"][1].erase(field); }, {std::string("'") + field + "'", "missing"});
  }
  expect_rejected([](json& j) { j["shards"][3].erase("file_name"); }, {"file:config.json", "'file_name'"});
  expect_rejected([](json& j) { j["shards"][0]["hash"] = "zz" + std::string(30, '0'); },
                  {"layer.0.expert.1", "'hash'"});
  expect_rejected([](json& j) { j["shards"][0]["codec"] = "lz4"; }, {"layer.0.expert.1", "'codec'", "lz4"});
  expect_rejected([](json& j) { j["shards"][0]["kind"] = "blob"; }, {"layer.0.expert.1", "'kind'", "blob"});
  expect_rejected([](json& j) { j["shards"][0]["element_bytes"] = 3; }, {"layer.0.expert.1", "'element_bytes'"});
  expect_rejected([](json& j) { j["shards"][0]["raw_bytes"] = -5; }, {"layer.0.expert.1", "'raw_bytes'"});
  expect_rejected([](json& j) { j["shards"][0]["expert"] = -1; }, {"layer.0.expert.1", "'expert'"});
  expect_rejected([](json& j) { j["shards"][3]["stored_bytes"] = 299; }, {"file:config.json", "'stored_bytes'"});
  expect_rejected([](json& j) { j["shards"][0]["tensors"][0].erase("dtype"); },
                  {"layer.0.expert.1", "experts.1.w1.weight", "'dtype'"});
  expect_rejected([](json& j) { j["shards"][0]["tensors"][0]["shape"] = json::array({4, -8}); },
                  {"layer.0.expert.1", "'shape'"});
}

TEST(ManifestTest, DuplicatesAndSpans) {
  expect_rejected([](json& j) { j["shards"][1]["id"] = "layer.0.expert.1"; }, {"duplicate shard id", "layer.0.expert.1"});
  expect_rejected([](json& j) { j["shards"][1]["tensors"][0]["name"] = j["shards"][0]["tensors"][0]["name"]; },
                  {"experts.1.w1.weight", "layer.0.expert.1", "'layer.0'"});
  // Span past the end of the shard.
  expect_rejected([](json& j) { j["shards"][0]["tensors"][1]["nbytes"] = 40; }, {"layer.0.expert.1", "outside", "[64, 104)"});
  expect_rejected([](json& j) { j["shards"][0]["tensors"][1]["offset"] = UINT64_MAX - 8; },
                  {"layer.0.expert.1", "outside"});
  // Gap / overlap.
  expect_rejected([](json& j) { j["shards"][0]["tensors"][1]["offset"] = 60; }, {"layer.0.expert.1", "w2.weight"});
  // Not covering the shard.
  expect_rejected([](json& j) { j["shards"][0]["raw_bytes"] = 100; }, {"layer.0.expert.1", "cover 96 of its 100"});
}

TEST(ManifestTest, HfFiles) {
  expect_rejected([](json& j) { j["hf_files"][0]["header_shard"] = "file:missing#header"; },
                  {"model.safetensors", "file:missing#header"});
  expect_rejected([](json& j) { j["hf_files"][0]["header_shard"] = "layer.0"; }, {"model.safetensors", "not a file shard"});
  expect_rejected([](json& j) { j["hf_files"][0]["tensors"].push_back("lm_head.weight"); },
                  {"model.safetensors", "lm_head.weight"});
  expect_rejected([](json& j) { j["hf_files"][0].erase("tensors"); }, {"model.safetensors", "'tensors'"});
  expect_rejected([](json& j) { j["hf_files"].push_back(j["hf_files"][0]); }, {"model.safetensors", "twice"});
}

}  // namespace
}  // namespace moe
