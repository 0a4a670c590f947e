// Codecs against independent references: numpy for the byte planes, the `zstd` CLI for
// frames in both directions, and the shipped bf16 model for the planes' claimed gain.
#include "moe/store/codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::read_file;
using testing::run_command;
using testing::ScopedTempDir;
using testing::sh_quote;
using testing::write_file;

std::vector<uint8_t> pseudo_random(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::span<const uint8_t> as_span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// All BF16 expert weights of the shipped model, concatenated (about 6 MB).
std::vector<uint8_t> tiny_model_expert_bf16() {
  std::vector<uint8_t> out;
  for (const auto& t : testing::parse_safetensors(testing::tiny_model_dir() + "/model.safetensors")) {
    if (t.dtype == "BF16" && t.name.find(".experts.") != std::string::npos) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  }
  return out;
}

TEST(CodecTest, NamesRoundTrip) {
  for (Codec c : {Codec::kRaw, Codec::kZstd, Codec::kZstdPlanes}) {
    auto parsed = parse_codec(codec_name(c));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, c);
  }
  EXPECT_STREQ(codec_name(Codec::kZstdPlanes), "zstd-planes");
  auto bad = parse_codec("lz4");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(bad.status().message(), "'lz4'");
  EXPECT_CONTAINS(bad.status().message(), "zstd-planes");
}

TEST(CodecTest, BytePlanesMatchNumpy) {
  ScopedTempDir dir("codec_planes");
  const std::vector<uint8_t> data = pseudo_random(4096, 5);
  write_file(dir.file("in.bin"), as_string(data));
  for (int w : {1, 2, 4}) {
    const std::string out = dir.file("planes" + std::to_string(w) + ".bin");
    auto r = run_command("/usr/bin/python3 -c " +
                         sh_quote("import numpy as np, sys\n"
                                  "a = np.fromfile(sys.argv[1], dtype=np.uint8)\n"
                                  "a.reshape(-1, int(sys.argv[3]))[:, ::-1].T.ravel().tofile(sys.argv[2])\n") +
                         " " + sh_quote(dir.file("in.bin")) + " " + sh_quote(out) + " " + std::to_string(w));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string expected = read_file(out);
    ASSERT_EQ(expected.size(), data.size());
    std::vector<uint8_t> planes(data.size());
    split_byte_planes(data.data(), data.size(), w, planes.data());
    EXPECT_EQ(as_string(planes), expected) << "element_bytes " << w;
    std::vector<uint8_t> back(data.size());
    join_byte_planes(planes.data(), planes.size(), w, back.data());
    EXPECT_EQ(back, data) << "element_bytes " << w;
  }
  // Hand-computed: two bf16 values 0x3f80 (1.0), 0xc000 (-2.0), little-endian.
  const uint8_t two[4] = {0x80, 0x3f, 0x00, 0xc0};
  uint8_t split[4];
  split_byte_planes(two, 4, 2, split);
  EXPECT_EQ(split[0], 0x3f);
  EXPECT_EQ(split[1], 0xc0);
  EXPECT_EQ(split[2], 0x80);
  EXPECT_EQ(split[3], 0x00);
}

TEST(CodecTest, ZstdOutputDecodesWithTheCli) {
  ScopedTempDir dir("codec_cli");
  std::vector<uint8_t> data = pseudo_random(100000, 9);
  for (size_t i = 0; i < data.size(); i += 3) data[i] = 0;  // compressible
  for (int threads : {1, 2}) {
    auto enc = encode(Codec::kZstd, data, 1, CodecOptions{5, threads});
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    EXPECT_LT(enc->size(), data.size());
    write_file(dir.file("a.zst"), as_string(*enc));
    auto r = run_command("zstd -q -d -f " + sh_quote(dir.file("a.zst")) + " -o " + sh_quote(dir.file("a.out")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(read_file(dir.file("a.out")), as_string(data)) << "threads " << threads;
  }
}

TEST(CodecTest, CliOutputDecodesWithOurs) {
  ScopedTempDir dir("codec_cli2");
  std::vector<uint8_t> data = pseudo_random(70001, 4);
  for (size_t i = 0; i < data.size(); i += 2) data[i] = 7;
  write_file(dir.file("b.bin"), as_string(data));
  // From a file (content size in the frame) and from a pipe (no content size).
  auto r = run_command("zstd -q -3 -f " + sh_quote(dir.file("b.bin")) + " -o " + sh_quote(dir.file("b.zst")) +
                       " && cat " + sh_quote(dir.file("b.bin")) + " | zstd -q -3 -c > " + sh_quote(dir.file("p.zst")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"b.zst", "p.zst"}) {
    const std::string stored = read_file(dir.file(name));
    std::vector<uint8_t> out(data.size());
    Status s = decode(Codec::kZstd, as_span(stored), 1, out);
    ASSERT_TRUE(s.ok()) << name << ": " << s.to_string();
    EXPECT_EQ(out, data) << name;
    // One byte too few or too many expected: DataLoss.
    std::vector<uint8_t> small(data.size() - 1), big(data.size() + 1);
    Status s_small = decode(Codec::kZstd, as_span(stored), 1, small);
    Status s_big = decode(Codec::kZstd, as_span(stored), 1, big);
    EXPECT_EQ(s_small.code(), StatusCode::kDataLoss) << name << ": " << s_small.to_string();
    EXPECT_EQ(s_big.code(), StatusCode::kDataLoss) << name << ": " << s_big.to_string();
  }
}

TEST(CodecTest, RoundTripsOnModelBf16AndPlanesWin) {
  const std::vector<uint8_t> bf16 = tiny_model_expert_bf16();
  ASSERT_GT(bf16.size(), 1000000u);
  size_t sizes[3] = {0, 0, 0};
  for (Codec c : {Codec::kRaw, Codec::kZstd, Codec::kZstdPlanes}) {
    auto enc = encode(c, bf16, 2, CodecOptions{});
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    sizes[static_cast<int>(c)] = enc->size();
    std::vector<uint8_t> back(bf16.size());
    Status s = decode(c, *enc, 2, back);
    ASSERT_TRUE(s.ok()) << codec_name(c) << ": " << s.to_string();
    EXPECT_TRUE(back == bf16) << codec_name(c);
  }
  EXPECT_EQ(sizes[0], bf16.size());
  EXPECT_LT(sizes[2], sizes[1]) << "zstd-planes " << sizes[2] << " bytes vs zstd " << sizes[1] << " of " << bf16.size();
  ::testing::Test::RecordProperty("raw", static_cast<int>(sizes[0]));
  ::testing::Test::RecordProperty("zstd", static_cast<int>(sizes[1]));
  ::testing::Test::RecordProperty("zstd_planes", static_cast<int>(sizes[2]));
  std::printf("bf16 experts: raw %zu, zstd %zu (%.3f), zstd-planes %zu (%.3f)\n", sizes[0], sizes[1],
              double(sizes[1]) / double(sizes[0]), sizes[2], double(sizes[2]) / double(sizes[0]));

  Codec chosen = Codec::kRaw;
  std::vector<CodecTrial> trials;
  auto best = encode_best(bf16, 2, CodecOptions{}, &chosen, &trials);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(chosen, Codec::kZstdPlanes);
  EXPECT_EQ(best->size(), sizes[2]);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[0].codec, Codec::kZstd);
  EXPECT_EQ(trials[0].stored_bytes, sizes[1]);
  EXPECT_EQ(trials[1].codec, Codec::kZstdPlanes);
  EXPECT_EQ(trials[1].stored_bytes, sizes[2]);
  EXPECT_GT(trials[0].seconds, 0.0);
}

TEST(CodecTest, EncodeBestFallsBackToRaw) {
  const std::vector<uint8_t> noise = pseudo_random(50000, 77);  // incompressible
  Codec chosen = Codec::kZstd;
  std::vector<CodecTrial> trials;
  auto best = encode_best(noise, 1, CodecOptions{}, &chosen, &trials);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(chosen, Codec::kRaw);
  EXPECT_TRUE(*best == noise);
  ASSERT_EQ(trials.size(), 1u);  // element_bytes 1: zstd only
  EXPECT_EQ(trials[0].codec, Codec::kZstd);
  EXPECT_GE(trials[0].stored_bytes, noise.size());
  // Compressible 1-byte data: zstd.
  std::vector<uint8_t> zeros(50000, 0);
  auto z = encode_best(zeros, 1, CodecOptions{}, &chosen, nullptr);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(chosen, Codec::kZstd);
  EXPECT_LT(z->size(), 1000u);
}

TEST(CodecTest, DecodeErrorsAreDataLoss) {
  std::vector<uint8_t> data(20000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i % 251);
  auto enc = encode(Codec::kZstd, data, 1, CodecOptions{});
  ASSERT_TRUE(enc.ok());
  std::vector<uint8_t> out(data.size());

  const std::vector<uint8_t> garbage = pseudo_random(500, 1);
  Status g = decode(Codec::kZstd, garbage, 1, out);
  EXPECT_EQ(g.code(), StatusCode::kDataLoss) << g.to_string();

  for (size_t cut : {size_t{3}, enc->size() / 2, enc->size() - 1}) {
    std::vector<uint8_t> truncated(enc->begin(), enc->begin() + static_cast<std::ptrdiff_t>(cut));
    Status t = decode(Codec::kZstd, truncated, 1, out);
    EXPECT_EQ(t.code(), StatusCode::kDataLoss) << "cut at " << cut << ": " << t.to_string();
    Status tp = decode(Codec::kZstdPlanes, truncated, 2, out);
    EXPECT_EQ(tp.code(), StatusCode::kDataLoss) << "planes, cut at " << cut;
  }

  std::vector<uint8_t> wrong(data.size() + 10);
  Status w = decode(Codec::kZstd, *enc, 1, wrong);
  EXPECT_EQ(w.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(w.message(), std::to_string(data.size()));

  std::vector<uint8_t> trailing = *enc;
  trailing.push_back(0);
  Status tr = decode(Codec::kZstd, trailing, 1, out);
  EXPECT_EQ(tr.code(), StatusCode::kDataLoss) << tr.to_string();

  std::vector<uint8_t> raw_short(data.size() - 1);
  Status r = decode(Codec::kRaw, std::span<const uint8_t>(data).first(data.size() - 1), 1, out);
  EXPECT_EQ(r.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(decode(Codec::kZstd, *enc, 1, out).ok());
  EXPECT_EQ(out, data);
}

TEST(CodecTest, BadOptionsAreInvalidArgument) {
  std::vector<uint8_t> data(100, 1);
  for (int level : {0, 20, -1}) {
    auto r = encode(Codec::kZstd, data, 1, CodecOptions{level, 1});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(r.status().message(), "level " + std::to_string(level));
    auto b = encode_best(data, 1, CodecOptions{level, 1}, nullptr, nullptr);
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  }
  auto t = encode(Codec::kZstd, data, 1, CodecOptions{3, 0});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(t.status().message(), "threads 0");
  auto e = encode(Codec::kZstdPlanes, data, 3, CodecOptions{});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(e.status().message(), "element_bytes 3");
  std::vector<uint8_t> odd(101, 1);
  auto o = encode(Codec::kZstdPlanes, odd, 2, CodecOptions{});
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(o.status().message(), "101");
}

TEST(CodecTest, EmptyInput) {
  std::vector<uint8_t> empty;
  for (Codec c : {Codec::kRaw, Codec::kZstd, Codec::kZstdPlanes}) {
    auto enc = encode(c, empty, 2, CodecOptions{});
    ASSERT_TRUE(enc.ok()) << codec_name(c);
    std::vector<uint8_t> out;
    EXPECT_TRUE(decode(c, *enc, 2, out).ok()) << codec_name(c);
  }
}

}  // namespace
}  // namespace moe
