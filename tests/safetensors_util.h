// Test helpers for building, reading back and rewriting safetensors files and model
// directories (error-path tests corrupt copies of the shipped checkpoints).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moe::testing {

// A temp directory removed (with its contents) when the object goes out of scope.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& tag) : path_(make_temp_dir(tag)) {}
  ~ScopedTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// u64 little-endian header length + header bytes + data: the safetensors layout,
// with the header given verbatim (so tests can write invalid headers).
inline std::string serialize_safetensors_raw(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

inline std::string serialize_safetensors_raw(const nlohmann::json& header, const std::string& data) {
  return serialize_safetensors_raw(header.dump(), data);
}

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

// A well-formed file: tensors laid out back to back in the given order (put larger
// element sizes first to keep every tensor aligned, as real writers do).
inline std::string serialize_safetensors(const std::vector<StTensor>& tensors,
                                         const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  // Like the safetensors library: pad the header with spaces so the data section starts
  // 8-byte aligned (tensors of the same element size then stay aligned too).
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return serialize_safetensors_raw(text, data);
}

template <typename T>
std::string to_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// Reads a well-formed safetensors file back into tensors (file order is not kept:
// sorted by data offset). Used to rewrite shards of the shipped checkpoints.
inline std::vector<StTensor> parse_safetensors(const std::string& path) {
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[static_cast<size_t>(i)])) << (8 * i);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const std::string data = bytes.substr(8 + n);
  std::vector<std::pair<uint64_t, StTensor>> items;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    const uint64_t begin = e["data_offsets"][0].get<uint64_t>();
    const uint64_t end = e["data_offsets"][1].get<uint64_t>();
    items.push_back({begin, StTensor{it.key(), e["dtype"].get<std::string>(),
                                     e["shape"].get<std::vector<int64_t>>(), data.substr(begin, end - begin)}});
  }
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<StTensor> out;
  for (auto& [off, t] : items) out.push_back(std::move(t));
  return out;
}

// Copies every file of `src_dir` into `dst_dir` (flat; model dirs have no subfolders).
inline void copy_model_dir(const std::string& src_dir, const std::string& dst_dir) {
  for (const auto& entry : std::filesystem::directory_iterator(src_dir)) {
    if (entry.is_regular_file()) {
      std::filesystem::copy_file(entry.path(), std::filesystem::path(dst_dir) / entry.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
}

inline std::string sharded_model_dir() { return source_dir() + "/tests/data/models/random-mixtral-sharded"; }

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }
inline void write_json(const std::string& path, const nlohmann::json& j) { write_file(path, j.dump(2)); }

}  // namespace moe::testing
