#include "moe/store/store_reader.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <set>

#include "moe/core/logging.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/store/content_hash.h"
#include "moe/store/shard_file.h"
#include "moe/store/store_commit.h"
#include "moe/store/store_env.h"
#include "moe/store/store_layout.h"

namespace moe {
namespace {

constexpr char kHeaderSuffix[] = "#header";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A kind-file shard from the source directory: the file itself, or for a safetensors
// header shard ("<name>#header") the first raw_bytes bytes of <name>.
StatusOr<std::string> rebuild_file_shard(const std::string& source_dir, const ShardEntry& entry,
                                         std::span<uint8_t> raw) {
  const bool header = ends_with(entry.file_name, kHeaderSuffix);
  const std::string name =
      header ? entry.file_name.substr(0, entry.file_name.size() - (sizeof(kHeaderSuffix) - 1)) : entry.file_name;
  if (name.empty() || name.front() == '/' || name.find("..") != std::string::npos) {
    return invalid_argument("file name '" + name + "' is not a plain relative path");
  }
  const std::string path = source_dir + "/" + name;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return not_found(path + " is missing");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (header ? size < raw.size() : size != raw.size()) {
    return data_loss(path + " has " + std::to_string(size) + " bytes, the shard " +
                     std::to_string(raw.size()));
  }
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
  if (!in || static_cast<size_t>(in.gcount()) != raw.size()) return internal_error("cannot read " + path);
  return path;
}

// A tensor shard from the HF checkpoint: its tensors in the shard's order.
StatusOr<std::string> rebuild_tensor_shard(const std::string& source_dir, const ShardEntry& entry,
                                           std::span<uint8_t> raw) {
  MOE_ASSIGN_OR_RETURN(HfCheckpoint ckpt, HfCheckpoint::open(source_dir));
  std::set<std::string> files;
  for (const ShardTensor& t : entry.tensors) {
    MOE_ASSIGN_OR_RETURN(const StoredTensor* view, ckpt.get(t.name));
    if (view->nbytes != t.nbytes || view->dtype_name != t.dtype || view->shape != t.shape) {
      return data_loss("tensor '" + t.name + "' in " + view->file + " is " + view->dtype_name + " " +
                       view->shape_string() + " (" + std::to_string(view->nbytes) + " bytes), not what the shard holds");
    }
    if (t.offset + t.nbytes > raw.size()) return data_loss("tensor '" + t.name + "' lies outside the shard");
    std::memcpy(raw.data() + t.offset, view->data, t.nbytes);
    files.insert(view->file);
  }
  std::string paths;
  for (const std::string& f : files) paths += (paths.empty() ? "" : ", ") + f;
  return paths;
}

}  // namespace

StatusOr<int64_t> current_version(const std::string& store) {
  MOE_ASSIGN_OR_RETURN(int64_t version, read_current_or_zero(store));
  if (version == 0) return no_current_error(store);
  return version;
}

StatusOr<std::vector<int64_t>> list_versions(const std::string& store) {
  return manifest_versions(default_store_env(), store);
}

StatusOr<Manifest> read_manifest(const std::string& store, int64_t version) { return load_manifest(store, version); }

StatusOr<ShardReadResult> read_shard_verified(const std::string& store, const Manifest& manifest,
                                              const ShardEntry& entry, std::span<uint8_t> raw) {
  const std::string path = store_shard_path(store, entry.hash);
  if (raw.size() != entry.raw_bytes) {
    return invalid_argument(entry.describe() + ": buffer of " + std::to_string(raw.size()) + " bytes for a shard of " +
                            std::to_string(entry.raw_bytes));
  }
  const Status stored = read_shard(path, entry.hash, raw);
  if (stored.ok()) return ShardReadResult{ShardSource::kStore, path};
  const Status first = stored.with_context(entry.describe() + " (shard " + entry.id + ")");
  if (manifest.source_dir.empty()) return first;
  auto rebuilt = entry.kind == ShardKind::kFile ? rebuild_file_shard(manifest.source_dir, entry, raw)
                                                : rebuild_tensor_shard(manifest.source_dir, entry, raw);
  Status why = rebuilt.status();
  if (rebuilt.ok()) {
    const Hash128 actual = hash_bytes(raw.data(), raw.size());
    if (actual == entry.hash) {
      MOE_LOG_WARN("store {}: {}: the stored copy {} is bad ({}); using the good copy from {}", store,
                   entry.describe(), path, stored.message(), *rebuilt);
      return ShardReadResult{ShardSource::kHfSource, *rebuilt};
    }
    why = data_loss(*rebuilt + " hashes to " + actual.hex() + ", expected " + entry.hash.hex());
  }
  return Status(first.code(), first.message() + "; no good copy in the source checkpoint " + manifest.source_dir +
                                  " either: " + why.message());
}

}  // namespace moe
