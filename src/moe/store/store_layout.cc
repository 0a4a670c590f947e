#include "moe/store/store_layout.h"

#include <filesystem>

#include <sys/stat.h>

#include <cstdio>

namespace moe {

std::string store_current_path(const std::string& store) { return store + "/CURRENT"; }
std::string store_lock_path(const std::string& store) { return store + "/LOCK"; }
std::string store_tmp_dir(const std::string& store) { return store + "/tmp"; }

std::string manifest_file_name(int64_t version) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "MANIFEST-%06lld", static_cast<long long>(version));
  return buf;
}

std::string store_manifest_path(const std::string& store, int64_t version) {
  return store + "/" + manifest_file_name(version);
}

StatusOr<int64_t> parse_manifest_file_name(const std::string& name) {
  const std::string prefix = "MANIFEST-";
  auto bad = [&] { return invalid_argument("'" + name + "' is not a manifest file name (MANIFEST-<digits>)"); };
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return bad();
  if (name.size() - prefix.size() > 18) return bad();  // fits int64
  int64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return bad();
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string store_shard_path(const std::string& store, const Hash128& hash) {
  const std::string hex = hash.hex();
  return store + "/shards/" + hex.substr(0, 2) + "/" + hex + ".shard";
}

bool is_store_dir(const std::string& dir) {
  struct stat st;
  if (::stat(store_current_path(dir).c_str(), &st) == 0 && S_ISREG(st.st_mode)) return true;
  // A store whose CURRENT was lost still has its manifests: opening it then says so.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (parse_manifest_file_name(entry.path().filename().string()).ok()) return true;
  }
  return false;
}

}  // namespace moe
