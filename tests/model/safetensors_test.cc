// SafetensorsFile::open on hand-built files: every malformed layout is rejected with a
// message naming the file (and the tensor, where there is one); valid files read back
// exact values.
#include "moe/model/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "moe/model/hf_checkpoint.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/tensor/dtype.h"
#include "contains_util.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe {
namespace {

using nlohmann::json;
using moe::testing::ScopedTempDir;
using moe::testing::serialize_safetensors;
using moe::testing::serialize_safetensors_raw;
using moe::testing::StTensor;
using moe::testing::to_bytes;
using moe::testing::write_file;

std::string f32_bytes(std::vector<float> v) { return to_bytes(v); }

class SafetensorsTest : public ::testing::Test {
 protected:
  // Writes `bytes` to a file in the temp dir and opens it; expects failure.
  Status open_expect_error(const std::string& name, const std::string& bytes) {
    path_ = dir_.file(name);
    write_file(path_, bytes);
    auto f = SafetensorsFile::open(path_);
    EXPECT_FALSE(f.ok()) << "opened " << path_ << " without error";
    if (f.ok()) return ok_status();
    EXPECT_CONTAINS(f.status().message(), path_);
    return f.status();
  }

  ScopedTempDir dir_{"safetensors"};
  std::string path_;
};

TEST_F(SafetensorsTest, MissingFileIsNotFoundNamingPath) {
  const std::string path = dir_.file("absent.safetensors");
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(f.status().message(), path);
}

TEST_F(SafetensorsTest, DirectoryInsteadOfFileNamesPath) {
  auto f = SafetensorsFile::open(dir_.path());
  ASSERT_FALSE(f.ok());
  EXPECT_CONTAINS(f.status().message(), dir_.path());
  EXPECT_CONTAINS(f.status().message(), "directory");
}

TEST_F(SafetensorsTest, EmptyFile) {
  Status s = open_expect_error("empty.safetensors", "");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "0 bytes");
}

TEST_F(SafetensorsTest, FileShorterThanHeaderLength) {
  Status s = open_expect_error("short.safetensors", std::string("\x05\x00\x00\x00", 4));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "4 bytes");
  EXPECT_CONTAINS(s.message(), "too small");
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFileSize) {
  std::string bytes = serialize_safetensors_raw(std::string("{}"), "");
  bytes[0] = static_cast<char>(200);  // claims a 200-byte header in a 10-byte file
  Status s = open_expect_error("hdrlen.safetensors", bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "header length 200");
  EXPECT_CONTAINS(s.message(), "exceeds file size 10");
}

TEST_F(SafetensorsTest, HugeHeaderLengthDoesNotOverflow) {
  std::string bytes = serialize_safetensors_raw(std::string("{}"), "");
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(0xff);
  Status s = open_expect_error("hdrlen_max.safetensors", bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "header length");
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  Status s = open_expect_error("notjson.safetensors", serialize_safetensors_raw(std::string("{\"a\": [1,"), ""));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "not a valid JSON object");
}

TEST_F(SafetensorsTest, HeaderJsonButNotObject) {
  Status s = open_expect_error("array.safetensors", serialize_safetensors_raw(std::string("[1, 2]"), ""));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "JSON object");
}

TEST_F(SafetensorsTest, EntryMissingDataOffsets) {
  json h = {{"model.w", {{"dtype", "F32"}, {"shape", {2}}}}};
  Status s = open_expect_error("nooffsets.safetensors", serialize_safetensors_raw(h, std::string(8, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "data_offsets");
}

TEST_F(SafetensorsTest, EntryMissingDtypeOrShape) {
  json h1 = {{"t.nodtype", {{"shape", {2}}, {"data_offsets", {0, 8}}}}};
  Status s1 = open_expect_error("nodtype.safetensors", serialize_safetensors_raw(h1, std::string(8, '\0')));
  EXPECT_CONTAINS(s1.message(), "'t.nodtype'");
  EXPECT_CONTAINS(s1.message(), "dtype");

  json h2 = {{"t.noshape", {{"dtype", "F32"}, {"data_offsets", {0, 8}}}}};
  Status s2 = open_expect_error("noshape.safetensors", serialize_safetensors_raw(h2, std::string(8, '\0')));
  EXPECT_CONTAINS(s2.message(), "'t.noshape'");
  EXPECT_CONTAINS(s2.message(), "shape");
}

TEST_F(SafetensorsTest, EntryNotAnObject) {
  json h = {{"t.scalar", 5}};
  Status s = open_expect_error("scalar.safetensors", serialize_safetensors_raw(h, ""));
  EXPECT_CONTAINS(s.message(), "'t.scalar'");
  EXPECT_CONTAINS(s.message(), "malformed");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  json h = {{"model.w", {{"dtype", "FOO"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  Status s = open_expect_error("foo.safetensors", serialize_safetensors_raw(h, std::string(8, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "unknown dtype 'FOO'");
}

TEST_F(SafetensorsTest, NegativeDimension) {
  json h = {{"model.w", {{"dtype", "F32"}, {"shape", {2, -3}}, {"data_offsets", {0, 24}}}}};
  Status s = open_expect_error("negdim.safetensors", serialize_safetensors_raw(h, std::string(24, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "negative");
}

TEST_F(SafetensorsTest, NonIntegerDimension) {
  json h = {{"model.w", {{"dtype", "F32"}, {"shape", {2.5}}, {"data_offsets", {0, 8}}}}};
  Status s = open_expect_error("floatdim.safetensors", serialize_safetensors_raw(h, std::string(8, '\0')));
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "non-integer dimension");
}

TEST_F(SafetensorsTest, ShapeTooLargeToAddress) {
  json h = {{"model.w", {{"dtype", "F32"}, {"shape", {int64_t{1} << 40, int64_t{1} << 40}}, {"data_offsets", {0, 8}}}}};
  Status s = open_expect_error("hugeshape.safetensors", serialize_safetensors_raw(h, std::string(8, '\0')));
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "too large");
}

TEST_F(SafetensorsTest, NegativeDataOffsets) {
  json h = {{"model.w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {-8, 0}}}}};
  Status s = open_expect_error("negoffs.safetensors", serialize_safetensors_raw(h, std::string(8, '\0')));
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "data_offsets");
}

TEST_F(SafetensorsTest, DataTruncated) {
  // Header says 6 floats (24 bytes) but only 16 bytes of data follow.
  json h = {{"model.layers.0.w", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}}};
  Status s = open_expect_error("truncated.safetensors", serialize_safetensors_raw(h, std::string(16, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'model.layers.0.w'");
  EXPECT_CONTAINS(s.message(), "[0, 24]");
  EXPECT_CONTAINS(s.message(), "beyond the data section (16 bytes)");
}

TEST_F(SafetensorsTest, ValidFileTruncatedOnDisk) {
  std::string good = serialize_safetensors({{"a", "F32", {4}, f32_bytes({1, 2, 3, 4})},
                                            {"b", "F32", {4}, f32_bytes({5, 6, 7, 8})}});
  Status s = open_expect_error("cut.safetensors", good.substr(0, good.size() - 3));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'b'");
  EXPECT_CONTAINS(s.message(), "truncated");
}

TEST_F(SafetensorsTest, SpanSizeNotNumelTimesElementSize) {
  json h = {{"model.w", {{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 10}}}}};
  Status s = open_expect_error("span.safetensors", serialize_safetensors_raw(h, std::string(16, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "spans 10 bytes");
  EXPECT_CONTAINS(s.message(), "[2, 3]");
  EXPECT_CONTAINS(s.message(), "needs 12");
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  json h = {{"first", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
            {"second", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}}}};
  Status s = open_expect_error("overlap.safetensors", serialize_safetensors_raw(h, std::string(24, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'first'");
  EXPECT_CONTAINS(s.message(), "'second'");
  EXPECT_CONTAINS(s.message(), "overlapping");
}

TEST_F(SafetensorsTest, IdenticalSpansOverlap) {
  json h = {{"x", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
            {"y", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}};
  Status s = open_expect_error("same.safetensors", serialize_safetensors_raw(h, std::string(8, '\0')));
  EXPECT_CONTAINS(s.message(), "overlapping");
  EXPECT_CONTAINS(s.message(), "'x'");
  EXPECT_CONTAINS(s.message(), "'y'");
}

TEST_F(SafetensorsTest, OverlapNotHiddenByEmptyTensorBetween) {
  // "big" covers [0, 16); "inner" [8, 12) lies inside it; an empty tensor at offset 4
  // sorts between them and must not hide the overlap.
  json h = {{"big", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
            {"empty", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {4, 4}}}},
            {"inner", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 12}}}}};
  Status s = open_expect_error("hidden_overlap.safetensors", serialize_safetensors_raw(h, std::string(16, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'big'");
  EXPECT_CONTAINS(s.message(), "'inner'");
  EXPECT_CONTAINS(s.message(), "overlapping");
}

TEST_F(SafetensorsTest, EndBeforeBegin) {
  json h = {{"model.w", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 4}}}}};
  Status s = open_expect_error("endbegin.safetensors", serialize_safetensors_raw(h, std::string(8, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_CONTAINS(s.message(), "'model.w'");
  EXPECT_CONTAINS(s.message(), "[8, 4]");
  EXPECT_CONTAINS(s.message(), "end before begin");
}

TEST_F(SafetensorsTest, ValidFileReadsBackExactValues) {
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0e-8f, 65504.0f, -0.0f, 1e30f};
  // bf16 1.0, -2.0, 0.5, 3.140625; f16 1.0, -2.0, 0.5, 65504, smallest subnormal 2^-24, 0.099975586
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x3f00, 0x4049};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x2e66};
  const std::string path = dir_.file("valid.safetensors");
  // Larger element sizes first, so every tensor is aligned to its element size.
  write_file(path, serialize_safetensors({{"w.ids", "I64", {2}, to_bytes(std::vector<int64_t>{7, -1})},
                                          {"w.f32", "F32", {2, 3}, to_bytes(f32)},
                                          {"w.empty", "F32", {0, 5}, ""},
                                          {"w.bf16", "BF16", {4}, to_bytes(bf16)},
                                          {"w.f16", "F16", {3, 2}, to_bytes(f16)}},
                                         json{{"format", "pt"}, {"ignored_number", 3}}));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->tensors().size(), 5u);
  EXPECT_EQ(file->metadata().size(), 1u);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->find("absent"), nullptr);
  EXPECT_EQ(file->find("__metadata__"), nullptr);

  for (const auto& [name, view] : file->tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view.data) % (view.nbytes ? view.nbytes / view.numel() : 1), 0u) << name;
  }

  const StoredTensor* a = file->find("w.f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->name, "w.f32");
  EXPECT_EQ(a->file, path);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->shape_string(), "[2, 3]");
  EXPECT_EQ(a->numel(), 6);
  EXPECT_EQ(a->nbytes, 24u);
  std::vector<float> got(6);
  convert_to_f32(a->data, *a->dtype, got.data(), got.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_EQ(got[i], f32[i]) << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(f32[i])) << i;
  }

  const StoredTensor* b = file->find("w.bf16");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_EQ(b->dtype_name, "BF16");
  std::vector<float> got_b(4);
  convert_to_f32(b->data, *b->dtype, got_b.data(), got_b.size());
  EXPECT_EQ(got_b, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.140625f}));

  const StoredTensor* c = file->find("w.f16");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->nbytes, 12u);
  std::vector<float> got_c(6);
  convert_to_f32(c->data, *c->dtype, got_c.data(), got_c.size());
  EXPECT_EQ(got_c, (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, std::ldexp(1.0f, -24), 0.0999755859375f}));

  const StoredTensor* e = file->find("w.empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->nbytes, 0u);

  // I64 is a valid safetensors dtype: accepted by open(), but not one we compute with.
  const StoredTensor* ids = file->find("w.ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype_name, "I64");
  EXPECT_FALSE(ids->dtype.has_value());
  EXPECT_EQ(ids->nbytes, 16u);
  int64_t second = 0;
  std::memcpy(&second, ids->data + 8, 8);
  EXPECT_EQ(second, -1);
}

TEST_F(SafetensorsTest, HeaderOnlyFileIsValid) {
  const std::string path = dir_.file("header_only.safetensors");
  write_file(path, serialize_safetensors_raw(std::string("{}"), ""));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_TRUE(file->tensors().empty());
}

TEST_F(SafetensorsTest, EveryValidSpecDtypeIsAccepted) {
  const std::vector<std::pair<std::string, size_t>> dtypes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};
  std::vector<StTensor> tensors;
  for (const auto& [name, size] : dtypes) tensors.push_back({"t." + name, name, {3}, std::string(3 * size, '\x01')});
  const std::string path = dir_.file("alldtypes.safetensors");
  write_file(path, serialize_safetensors(tensors));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  for (const auto& [name, size] : dtypes) {
    const StoredTensor* t = file->find("t." + name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->nbytes, 3 * size) << name;
    const bool computable = name == "F32" || name == "BF16" || name == "F16" || name == "F8_E4M3";
    EXPECT_EQ(t->dtype.has_value(), computable) << name;
  }
}

// Binding an I64 tensor as a weight fails naming the tensor, its file and the dtype.
TEST(SafetensorsBindTest, I64WeightRejectedByBindWeights) {
  ScopedTempDir dir("st_i64");
  moe::testing::copy_model_dir(moe::testing::sharded_model_dir(), dir.path());
  const std::string shard = dir.file("model-00002-of-00002.safetensors");
  auto tensors = moe::testing::parse_safetensors(shard);
  bool replaced = false;
  for (auto& t : tensors) {
    if (t.name == "model.norm.weight") {
      t.dtype = "I64";
      t.bytes = std::string(static_cast<size_t>(t.shape[0]) * 8, '\0');
      replaced = true;
    }
  }
  ASSERT_TRUE(replaced);
  write_file(shard, serialize_safetensors(tensors));

  auto ckpt = HfCheckpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();  // I64 is valid safetensors
  auto config = load_model_config(dir.path());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto weights = bind_weights(config.value(), ckpt.value());
  ASSERT_FALSE(weights.ok());
  EXPECT_EQ(weights.status().code(), StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(weights.status().message(), "'model.norm.weight'");
  EXPECT_CONTAINS(weights.status().message(), shard);
  EXPECT_CONTAINS(weights.status().message(), "dtype I64");
}

}  // namespace
}  // namespace moe
