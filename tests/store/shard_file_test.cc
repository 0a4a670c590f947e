// Shard files: round trips per codec and every corruption the reader must name.
#include "moe/store/shard_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::read_file;
using testing::ScopedTempDir;
using testing::write_file;

std::vector<uint8_t> sample_bf16(size_t n) {
  std::vector<uint8_t> v(n * 2);
  uint32_t x = 17;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[2 * i] = static_cast<uint8_t>(x >> 24);
    v[2 * i + 1] = static_cast<uint8_t>(0x3c + ((x >> 8) & 3));  // bf16-like high bytes
  }
  return v;
}

// Writes `raw` with `codec` to `path`; returns the header it wrote.
ShardHeader write_test_shard(const std::string& path, const std::vector<uint8_t>& raw, Codec codec) {
  auto enc = encode(codec, raw, 2, CodecOptions{});
  EXPECT_TRUE(enc.ok());
  ShardHeader h{codec, 2, raw.size(), enc->size(), hash_bytes(raw.data(), raw.size())};
  auto f = default_store_env().new_writable_file(path);
  EXPECT_TRUE(f.ok());
  EXPECT_TRUE(write_shard(**f, h, *enc).ok());
  EXPECT_TRUE((*f)->close().ok());
  return h;
}

TEST(ShardFileTest, RoundTripEachCodecAndLayout) {
  ScopedTempDir dir("shard_rt");
  const auto raw = sample_bf16(5000);
  for (Codec c : {Codec::kRaw, Codec::kZstd, Codec::kZstdPlanes}) {
    const std::string path = dir.file(std::string(codec_name(c)) + ".shard");
    ShardHeader h = write_test_shard(path, raw, c);
    const std::string bytes = read_file(path);
    ASSERT_EQ(bytes.size(), kShardHeaderBytes + h.stored_bytes);
    // Layout by hand: magic, little-endian fields, big-endian canonical hash.
    EXPECT_EQ(bytes.substr(0, 8), "MOESHRD1");
    EXPECT_EQ(static_cast<uint8_t>(bytes[8]), static_cast<uint8_t>(c));
    EXPECT_EQ(bytes.substr(9, 3), std::string(3, '\0'));
    EXPECT_EQ(static_cast<uint8_t>(bytes[12]), 2);
    EXPECT_EQ(static_cast<uint8_t>(bytes[16]), static_cast<uint8_t>(raw.size() & 0xff));
    EXPECT_EQ(static_cast<uint8_t>(bytes[17]), static_cast<uint8_t>(raw.size() >> 8));
    std::string hex;
    for (int i = 32; i < 48; ++i) {
      char buf[3];
      std::snprintf(buf, sizeof(buf), "%02x", static_cast<uint8_t>(bytes[static_cast<size_t>(i)]));
      hex += buf;
    }
    EXPECT_EQ(hex, h.hash.hex());

    auto rh = read_shard_header(path);
    ASSERT_TRUE(rh.ok()) << rh.status().to_string();
    EXPECT_EQ(rh->codec, c);
    EXPECT_EQ(rh->element_bytes, 2);
    EXPECT_EQ(rh->raw_bytes, raw.size());
    EXPECT_EQ(rh->stored_bytes, h.stored_bytes);
    EXPECT_EQ(rh->hash, h.hash);

    std::vector<uint8_t> out(raw.size());
    Status s = read_shard(path, h.hash, out);
    ASSERT_TRUE(s.ok()) << codec_name(c) << ": " << s.to_string();
    EXPECT_TRUE(out == raw) << codec_name(c);
  }
}

TEST(ShardFileTest, FlippedPayloadByteIsDataLossNamingThePath) {
  ScopedTempDir dir("shard_flip");
  const auto raw = sample_bf16(5000);
  for (Codec c : {Codec::kRaw, Codec::kZstd, Codec::kZstdPlanes}) {
    const std::string path = dir.file(std::string(codec_name(c)) + ".shard");
    ShardHeader h = write_test_shard(path, raw, c);
    std::string bytes = read_file(path);
    bytes[kShardHeaderBytes + h.stored_bytes / 2] ^= 0x10;
    write_file(path, bytes);
    std::vector<uint8_t> out(raw.size());
    Status s = read_shard(path, h.hash, out);
    ASSERT_EQ(s.code(), StatusCode::kDataLoss) << codec_name(c) << ": " << s.to_string();
    EXPECT_CONTAINS(s.message(), path);
    const bool named = s.message().find("hash mismatch") != std::string::npos ||
                       s.message().find("does not decode") != std::string::npos;
    EXPECT_TRUE(named) << s.message();
    if (c == Codec::kRaw) {
      EXPECT_CONTAINS(s.message(), h.hash.hex());  // both hashes
      EXPECT_CONTAINS(s.message(), hash_bytes(out.data(), out.size()).hex());
    }
  }
}

TEST(ShardFileTest, HeaderDisagreeingWithManifest) {
  ScopedTempDir dir("shard_expect");
  const auto raw = sample_bf16(100);
  const std::string path = dir.file("s.shard");
  ShardHeader h = write_test_shard(path, raw, Codec::kZstd);
  Hash128 other = h.hash;
  other.low ^= 1;
  std::vector<uint8_t> out(raw.size());
  Status s = read_shard(path, other, out);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "hash mismatch");
  EXPECT_CONTAINS(s.message(), h.hash.hex());
  EXPECT_CONTAINS(s.message(), other.hex());
  std::vector<uint8_t> wrong(raw.size() + 2);
  Status w = read_shard(path, h.hash, wrong);
  EXPECT_EQ(w.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(w.message(), std::to_string(raw.size()));
}

TEST(ShardFileTest, TruncatedExtendedBadMagicMissing) {
  ScopedTempDir dir("shard_bad");
  const auto raw = sample_bf16(3000);
  const std::string path = dir.file("s.shard");
  ShardHeader h = write_test_shard(path, raw, Codec::kZstdPlanes);
  const std::string good = read_file(path);
  std::vector<uint8_t> out(raw.size());

  for (size_t len : {size_t{0}, size_t{20}, kShardHeaderBytes, good.size() - 1}) {
    write_file(path, good.substr(0, len));
    Status s = read_shard(path, h.hash, out);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << len;
    EXPECT_CONTAINS(s.message(), path);
    EXPECT_CONTAINS(s.message(), "truncated");
    EXPECT_EQ(read_shard_header(path).status().code(), StatusCode::kDataLoss) << len;
  }
  write_file(path, good + "x");
  auto ext = read_shard_header(path);
  EXPECT_EQ(ext.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(ext.status().message(), "extended");

  std::string magic = good;
  magic[0] = 'X';
  write_file(path, magic);
  Status m = read_shard(path, h.hash, out);
  EXPECT_EQ(m.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(m.message(), "bad magic");
  EXPECT_CONTAINS(m.message(), path);

  std::string codec = good;
  codec[8] = 7;
  write_file(path, codec);
  auto c = read_shard_header(path);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(c.status().message(), "unknown codec 7");

  const std::string missing = dir.file("missing.shard");
  EXPECT_EQ(read_shard(missing, h.hash, out).code(), StatusCode::kNotFound);
  auto mh = read_shard_header(missing);
  EXPECT_EQ(mh.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(mh.status().message(), missing);
}

TEST(ShardFileTest, WriteRejectsPayloadSizeMismatch) {
  ScopedTempDir dir("shard_w");
  auto f = default_store_env().new_writable_file(dir.file("x"));
  ASSERT_TRUE(f.ok());
  std::vector<uint8_t> payload(10);
  ShardHeader h{Codec::kRaw, 1, 10, 11, Hash128{}};
  EXPECT_EQ(write_shard(**f, h, payload).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
