// A Hugging Face checkpoint directory's weights: either one `model.safetensors` or a
// sharded set described by `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor_name: shard_file_name}}).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moe/model/safetensors.h"
#include "moe/status.h"

namespace moe {

class HfCheckpoint {
 public:
  // Opens every shard under `dir` (memory-mapped). Prefers the index when present.
  // NotFound if neither file exists; DataLoss for a malformed index or shard, or a
  // tensor that the index places in a shard that does not hold it.
  static StatusOr<HfCheckpoint> open(const std::string& dir);

  // The tensor named `name`; NotFound naming the tensor and the checkpoint otherwise.
  StatusOr<const StoredTensor*> get(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  size_t num_tensors() const { return index_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  const std::string& dir() const { return dir_; }
  // Total bytes of tensor data over all shards.
  size_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const StoredTensor*> index_;
};

}  // namespace moe
