// XXH3-128 content hashes against the `xxhsum -H2` CLI (an independent implementation
// of the same hash and its canonical text).
#include "moe/store/content_hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "contains_util.h"
#include "test_util.h"

namespace moe {
namespace {

using testing::make_temp_dir;
using testing::run_command;
using testing::sh_quote;
using testing::write_file;

// The hex digest `xxhsum -H2` prints for `path` (first word of its output).
std::string xxhsum_h2(const std::string& path) {
  // xxhsum writes progress to stderr; keep stdout only.
  auto r = run_command("(xxhsum -H2 " + sh_quote(path) + " 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output.substr(0, r.output.find_first_of(" \t\n"));
}

std::string pseudo_random_bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

class ContentHashTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("content_hash"); ASSERT_FALSE(dir_.empty()); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ContentHashTest, MatchesXxhsumCli) {
  const std::vector<std::string> contents = {
      "", "x", "hello world\n", pseudo_random_bytes(240, 7),
      pseudo_random_bytes(3 * 1024 * 1024 + 17, 11),  // tensor-sized, odd length
  };
  for (size_t i = 0; i < contents.size(); ++i) {
    std::string path = dir_ + "/f" + std::to_string(i);
    write_file(path, contents[i]);
    Hash128 h = hash_bytes(contents[i].data(), contents[i].size());
    std::string cli = xxhsum_h2(path);
    ASSERT_EQ(cli.size(), 32u) << cli;
    EXPECT_EQ(h.hex(), cli) << "file of " << contents[i].size() << " bytes";
  }
}

TEST_F(ContentHashTest, StreamingEqualsOneShot) {
  std::string data = pseudo_random_bytes(1 << 20, 3);
  Hash128 one = hash_bytes(data.data(), data.size());
  Hasher128 h;
  size_t pos = 0;
  size_t step = 1;
  while (pos < data.size()) {
    size_t n = std::min(step, data.size() - pos);
    h.update(data.data() + pos, n);
    pos += n;
    step = step * 3 + 1;
  }
  EXPECT_EQ(h.digest(), one);
  Hasher128 empty;
  EXPECT_EQ(empty.digest(), hash_bytes(nullptr, 0));
  // A different byte changes it.
  data[12345] ^= 1;
  EXPECT_NE(hash_bytes(data.data(), data.size()), one);
}

TEST_F(ContentHashTest, HexRoundTripAndParseErrors) {
  std::string data = "abc";
  Hash128 h = hash_bytes(data.data(), data.size());
  auto parsed = Hash128::parse(h.hex());
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(*parsed, h);
  // Upper case parses too.
  std::string upper = h.hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto parsed_upper = Hash128::parse(upper);
  ASSERT_TRUE(parsed_upper.ok());
  EXPECT_EQ(*parsed_upper, h);
  // Canonical order: high 64 bits first.
  Hash128 known{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(known.hex(), "0123456789abcdeffedcba9876543210");

  for (std::string bad : {std::string(""), std::string(31, 'a'), std::string(33, 'a'),
                          std::string(31, 'a') + "g", std::string("0x") + std::string(30, '0')}) {
    auto r = Hash128::parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(r.status().message(), "'" + bad + "'");
  }
}

}  // namespace
}  // namespace moe
