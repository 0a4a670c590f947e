#include "moe/store/store_commit.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <system_error>

#include "moe/core/mapped_file.h"
#include "moe/store/store_layout.h"

namespace moe {

std::string unique_tmp_name(const std::string& tag) {
  static std::atomic<uint64_t> counter{0};
  return tag + "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + ".tmp";
}

Status write_file_durably(StoreEnv& env, const std::string& store, const std::string& final_path,
                          std::string_view bytes) {
  const std::string tmp = store_tmp_dir(store) + "/" +
                          unique_tmp_name(std::filesystem::path(final_path).filename().string());
  Status st = [&]() -> Status {
    MOE_ASSIGN_OR_RETURN(auto file, env.new_writable_file(tmp));
    MOE_RETURN_IF_ERROR(file->append(bytes.data(), bytes.size()));
    MOE_RETURN_IF_ERROR(file->sync());
    MOE_RETURN_IF_ERROR(file->close());
    return env.rename_file(tmp, final_path);
  }();
  if (!st.ok()) (void)env.remove_file(tmp);
  return st;
}

StatusOr<int64_t> read_current_or_zero(const std::string& store) {
  const std::string path = store_current_path(store);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return int64_t{0};
  MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  auto version = parse_manifest_file_name(text);
  if (!version.ok()) {
    return data_loss(path + " does not name a manifest (holds '" + text.substr(0, 64) + "'): " +
                     version.status().message());
  }
  return *version;
}

StatusOr<Manifest> load_manifest(const std::string& store, int64_t version) {
  const std::string path = store_manifest_path(store, version);
  auto text = read_text_file(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return not_found("manifest " + path + " of version " + std::to_string(version) + " is missing");
    }
    return text.status();
  }
  MOE_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(*text, path));
  if (manifest.version != version) {
    return data_loss(path + " holds version " + std::to_string(manifest.version) + ", not " +
                     std::to_string(version));
  }
  return manifest;
}

Status no_current_error(const std::string& store) {
  auto versions = manifest_versions(default_store_env(), store);
  if (versions.ok() && !versions->empty()) {
    // CURRENT deleted or lost (or a first save that never committed).
    const std::string newest = manifest_file_name(versions->back());
    return data_loss(store_current_path(store) + " is missing, but the store holds " +
                     std::to_string(versions->size()) + " manifest(s), the newest " + newest +
                     ": CURRENT names the live version; if that is the newest, restore it with: echo " + newest +
                     " > " + store_current_path(store));
  }
  return not_found(store + " is not a checkpoint store (no CURRENT file)");
}

StatusOr<Manifest> load_version(const std::string& store, int64_t version) {
  if (version <= 0) {
    MOE_ASSIGN_OR_RETURN(version, read_current_or_zero(store));
    if (version == 0) return no_current_error(store);
  }
  return load_manifest(store, version);
}

StatusOr<std::vector<int64_t>> manifest_versions(StoreEnv& env, const std::string& store) {
  MOE_ASSIGN_OR_RETURN(auto names, env.list_dir(store));
  std::vector<int64_t> versions;
  for (const auto& name : names) {
    auto v = parse_manifest_file_name(name);
    if (v.ok()) versions.push_back(*v);
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

StatusOr<uint64_t> clear_store_tmp(StoreEnv& env, const std::string& store) {
  const std::string dir = store_tmp_dir(store);
  if (!env.file_exists(dir)) return uint64_t{0};
  MOE_ASSIGN_OR_RETURN(auto names, env.list_dir(dir));
  uint64_t bytes = 0;
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    MOE_RETURN_IF_ERROR(env.remove_file(path));
    if (!ec) bytes += size;
  }
  return bytes;
}

}  // namespace moe
