#include "moe/model/hf_checkpoint.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "moe/core/mapped_file.h"

namespace moe {
namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

size_t HfCheckpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, view] : index_) n += view->nbytes;
  return n;
}

StatusOr<std::string> HfCheckpoint::read_file(const std::string& name) const {
  if (name.empty() || name.front() == '/' || name == ".." || name.rfind("../", 0) == 0 ||
      name.find("/../") != std::string::npos || (name.size() >= 3 && name.compare(name.size() - 3, 3, "/..") == 0)) {
    return invalid_argument("file name '" + name + "' must be a relative path inside " + dir_);
  }
  return read_text_file(dir_ + "/" + name);
}

std::vector<TensorInfo> HfCheckpoint::tensor_infos() const {
  std::vector<TensorInfo> out;
  out.reserve(index_.size());
  for (const auto& [name, view] : index_) {  // std::map: sorted by name
    out.push_back(TensorInfo{name, view->dtype_name, view->shape, view->nbytes});
  }
  return out;
}

StatusOr<const StoredTensor*> HfCheckpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return not_found("tensor '" + name + "' not found in checkpoint " + dir_);
  return it->second;
}

StatusOr<HfCheckpoint> HfCheckpoint::open(const std::string& dir) {
  HfCheckpoint ckpt;
  ckpt.dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  if (file_exists(index_path)) {
    MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
    nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return data_loss(index_path + ": not a JSON object with a \"weight_map\" object");
    }
    std::map<std::string, SafetensorsFile*> by_file;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return data_loss(index_path + ": weight_map entry for '" + it.key() + "' is not a file name");
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..") {
        return data_loss(index_path + ": shard name '" + shard + "' must be a plain file name");
      }
      if (!by_file.count(shard)) {
        auto file = SafetensorsFile::open(dir + "/" + shard);
        if (!file.ok()) return file.status().with_context(index_path + " lists shard " + shard);
        ckpt.shards_.push_back(std::make_unique<SafetensorsFile>(std::move(file).value()));
        by_file[shard] = ckpt.shards_.back().get();
      }
      const StoredTensor* view = by_file[shard]->find(it.key());
      if (view == nullptr) {
        return data_loss(index_path + " places tensor '" + it.key() + "' in " + shard +
                         ", which does not contain it");
      }
      ckpt.index_[it.key()] = view;
    }
  } else if (file_exists(single_path)) {
    MOE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(single_path));
    ckpt.shards_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
    for (const auto& [name, view] : ckpt.shards_.back()->tensors()) ckpt.index_[name] = &view;
  } else {
    return not_found("no model.safetensors or model.safetensors.index.json in " + dir);
  }
  return ckpt;
}

}  // namespace moe
