// Helpers of the checkpoint store tests: copying and comparing model directories, and
// rewriting one tensor's bytes inside a safetensors file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "moe/store/store_writer.h"
#include "safetensors_util.h"
#include "test_util.h"

namespace moe::testing {

// A temp directory on tmpfs when there is one (fsync is free there: the fault tests run
// hundreds of saves), else under /tmp. Removed with its contents.
class ShmTempDir {
 public:
  explicit ShmTempDir(const std::string& tag) {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string templ = base + "/moe_test_" + tag + "_XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    char* dir = mkdtemp(buf.data());
    path_ = dir ? std::string(dir) : std::string();
  }
  ~ShmTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ShmTempDir(const ShmTempDir&) = delete;
  ShmTempDir& operator=(const ShmTempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// `moe ckpt convert`: the model directory into a new store (a test failure otherwise).
inline void convert_to_new_store(const std::string& model, const std::string& store) {
  SaveOptions o;
  o.require_new_store = true;
  auto saved = save_to_store(model, store, o);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
}

// XORs the byte at `offset` of file `path` with 0x40 (corrupts a shard in place).
inline void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Copies a directory tree.
inline void copy_tree(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(to);
  std::filesystem::copy(from, to,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
}

// Regular files under `dir` (relative names, '/'-separated) -> their bytes.
inline std::map<std::string, std::string> tree_files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) {
      files[e.path().lexically_relative(dir).generic_string()] = read_file(e.path().string());
    }
  }
  return files;
}

// "" if `a` and `b` hold the same files with the same bytes, else what differs.
inline std::string tree_diff(const std::string& a, const std::string& b) {
  const auto fa = tree_files(a);
  const auto fb = tree_files(b);
  std::string diff;
  for (const auto& [name, bytes] : fa) {
    auto it = fb.find(name);
    if (it == fb.end()) diff += "missing in " + b + ": " + name + "\n";
    else if (it->second != bytes) diff += "differs: " + name + " (" + std::to_string(bytes.size()) + " vs " +
                                          std::to_string(it->second.size()) + " bytes)\n";
  }
  for (const auto& [name, bytes] : fb) {
    if (!fa.count(name)) diff += "extra in " + b + ": " + name + "\n";
  }
  return diff;
}

// The same comparison by `cmp` (an independent check): "" if every file of `a` is
// byte-identical to the one in `b` and both have the same file count.
inline std::string cmp_trees(const std::string& a, const std::string& b) {
  const auto fa = tree_files(a);
  if (fa.size() != tree_files(b).size()) return "file counts differ";
  std::string diff;
  for (const auto& [name, bytes] : fa) {
    const std::string cmd = "cmp -s '" + a + "/" + name + "' '" + b + "/" + name + "'";
    if (std::system(cmd.c_str()) != 0) diff += "cmp: " + name + " differs\n";
  }
  return diff;
}

// Where tensor `name`'s bytes lie in safetensors file `path`: {file offset, size}.
inline std::pair<uint64_t, uint64_t> tensor_span_in_file(const std::string& path, const std::string& name) {
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[static_cast<size_t>(i)])) << (8 * i);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const uint64_t begin = header.at(name).at("data_offsets")[0].get<uint64_t>();
  const uint64_t end = header.at(name).at("data_offsets")[1].get<uint64_t>();
  return {8 + n + begin, end - begin};
}

// Adds `delta` to every byte of tensor `name` in safetensors file `path`, in place (the
// header, and so the file's size, stay the same).
inline void bump_tensor_bytes(const std::string& path, const std::string& name, int delta = 1) {
  const auto [offset, size] = tensor_span_in_file(path, name);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string region(size, '\0');
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(region.data(), static_cast<std::streamsize>(size));
  for (auto& c : region) c = static_cast<char>(static_cast<uint8_t>(c) + delta);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(region.data(), static_cast<std::streamsize>(size));
}

// Names of every tensor in a safetensors file.
inline std::vector<std::string> tensor_names(const std::string& path) {
  std::vector<std::string> names;
  for (const auto& t : parse_safetensors(path)) names.push_back(t.name);
  return names;
}

// The expert tensor names of the tiny Mixtral model (its naming).
inline std::string mixtral_expert_tensor(int layer, int expert, const std::string& w) {
  return "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." + std::to_string(expert) + "." + w +
         ".weight";
}

// Number of regular files under `dir` (recursively); 0 if it does not exist.
inline int count_files(const std::string& dir) {
  if (!std::filesystem::exists(dir)) return 0;
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

}  // namespace moe::testing
