// Where a model's files and tensors come from: a Hugging Face directory (HfCheckpoint)
// or a per-expert checkpoint store (store/store_model.h). Config, tokenizer and weight
// binding read through this interface, so they do not care which one it is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moe/model/safetensors.h"
#include "moe/status.h"

namespace moe {

// One tensor's description without its data.
struct TensorInfo {
  std::string name;
  std::string dtype_name;  // as stored, e.g. "BF16"
  std::vector<int64_t> shape;
  size_t nbytes = 0;
};

// XXH3-128 of an expert's raw bytes (its tensors sorted by name, concatenated; see
// weight_checks.h), as XXH128's two halves.
struct ExpertDigest {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const ExpertDigest&) const = default;
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;

  // Where the model is, for messages: the directory, or "store DIR (version N)".
  virtual std::string location() const = 0;

  // The bytes of a small file of the model by its name in a Hugging Face directory,
  // e.g. "config.json", "tokenizer.model". NotFound naming the file and location().
  virtual StatusOr<std::string> read_file(const std::string& name) const = 0;

  // Whether the model has a tensor of this name (loaded on this rank or not).
  virtual bool contains(const std::string& name) const = 0;

  // The tensor's bytes, valid while this source lives. NotFound naming the tensor and
  // location() if the model has none of that name; FailedPrecondition if the model has
  // it but this process did not load it (an expert another rank holds).
  virtual StatusOr<const StoredTensor*> get(const std::string& name) const = 0;

  // Every tensor of the model (loaded here or not), sorted by name.
  virtual std::vector<TensorInfo> tensor_infos() const = 0;

  // Bytes of all tensor data of the model (not only what this process loaded).
  virtual size_t total_bytes() const = 0;

  // Expert (layer, expert)'s digest when the source records one without reading the
  // bytes (a store's manifest); nullopt otherwise (then it is hashed from the bytes).
  virtual std::optional<ExpertDigest> recorded_expert_digest(int layer, int expert) const {
    (void)layer;
    (void)expert;
    return std::nullopt;
  }
};

}  // namespace moe
