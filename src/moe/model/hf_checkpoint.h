// A Hugging Face checkpoint directory's weights: either one `model.safetensors` or a
// sharded set described by `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor_name: shard_file_name}}).
// It is a ModelSource (model_source.h): location() is the directory, read_file reads
// <dir>/<name>, every tensor is loaded (memory-mapped).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moe/model/model_source.h"
#include "moe/model/safetensors.h"
#include "moe/status.h"

namespace moe {

class HfCheckpoint final : public ModelSource {
 public:
  // Opens every shard under `dir` (memory-mapped). Prefers the index when present.
  // NotFound if neither file exists; DataLoss for a malformed index or shard, or a
  // tensor that the index places in a shard that does not hold it.
  static StatusOr<HfCheckpoint> open(const std::string& dir);

  HfCheckpoint() = default;
  HfCheckpoint(HfCheckpoint&&) = default;
  HfCheckpoint& operator=(HfCheckpoint&&) = default;

  // The tensor named `name`; NotFound naming the tensor and the checkpoint otherwise.
  StatusOr<const StoredTensor*> get(const std::string& name) const override;
  bool contains(const std::string& name) const override { return index_.count(name) > 0; }
  size_t num_tensors() const { return index_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  const std::string& dir() const { return dir_; }
  // Total bytes of tensor data over all shards.
  size_t total_bytes() const override;

  // ModelSource.
  std::string location() const override { return dir_; }
  // The bytes of <dir>/<name>; NotFound naming the path if missing; InvalidArgument for
  // a name that is not a plain relative path (absolute, or with a ".." component).
  StatusOr<std::string> read_file(const std::string& name) const override;
  // Every tensor, sorted by name.
  std::vector<TensorInfo> tensor_infos() const override;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const StoredTensor*> index_;
};

}  // namespace moe
