// A ModelSource over in-memory files, for the fuzz targets: read_file() answers from a
// map; `tensors` lists tensors by name and shape only (none has data: get() fails).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "moe/model/model_source.h"

namespace moe::fuzz {

class MemorySource final : public ModelSource {
 public:
  std::map<std::string, std::string> files;
  std::vector<TensorInfo> tensors;  // sorted by name, as tensor_infos() promises
  std::string location() const override { return "fuzz"; }
  StatusOr<std::string> read_file(const std::string& name) const override {
    auto it = files.find(name);
    if (it == files.end()) return not_found(name + " not in fuzz source");
    return it->second;
  }
  bool contains(const std::string& name) const override {
    for (const TensorInfo& t : tensors) {
      if (t.name == name) return true;
    }
    return false;
  }
  StatusOr<const StoredTensor*> get(const std::string& name) const override { return not_found(name); }
  std::vector<TensorInfo> tensor_infos() const override { return tensors; }
  size_t total_bytes() const override { return 0; }
};

}  // namespace moe::fuzz
