// A ModelSource over in-memory files, for the fuzz targets: read_file() answers from a
// map; it holds no tensors.
#pragma once

#include <map>
#include <string>

#include "moe/model/model_source.h"

namespace moe::fuzz {

class MemorySource final : public ModelSource {
 public:
  std::map<std::string, std::string> files;
  std::string location() const override { return "fuzz"; }
  StatusOr<std::string> read_file(const std::string& name) const override {
    auto it = files.find(name);
    if (it == files.end()) return not_found(name + " not in fuzz source");
    return it->second;
  }
  bool contains(const std::string&) const override { return false; }
  StatusOr<const StoredTensor*> get(const std::string& name) const override { return not_found(name); }
  std::vector<TensorInfo> tensor_infos() const override { return {}; }
  size_t total_bytes() const override { return 0; }
};

}  // namespace moe::fuzz
