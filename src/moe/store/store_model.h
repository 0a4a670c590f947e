// A model loaded from a checkpoint store: a ModelSource (model/model_source.h) whose
// tensors are restored into memory, only the experts this rank wants, in parallel.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "moe/model/model_source.h"
#include "moe/model/weights.h"
#include "moe/status.h"
#include "moe/store/manifest.h"
#include "moe/store/store_writer.h"

namespace moe {

struct RestoreOptions {
  int threads = 1;           // reader threads (each reads, decodes and hashes whole shards)
  StoreProgressFn progress;  // optional; called from the calling thread
  // An expert shard with no good copy (neither the store's nor the HF source's) does not
  // fail restore(): it is listed in RestoreReport::missing, for a peer to supply
  // (engine/peer_expert_recovery.h). Non-expert shards still fail restore().
  bool tolerate_missing_experts = false;
};

// An expert shard restore() found no good copy of (with tolerate_missing_experts).
struct MissingExpert {
  int layer = -1;
  int expert = -1;
  std::string error;  // why: the read error naming the shard file(s) and what was wrong
};

struct RestoreReport {
  int shards_read = 0;
  int expert_shards_read = 0;
  int expert_shards_total = 0;
  uint64_t raw_bytes = 0;     // restored
  uint64_t stored_bytes = 0;  // read from disk
  int fallbacks = 0;          // shards taken from another copy (logged)
  double seconds = 0;
  std::vector<MissingExpert> missing;  // tolerate_missing_experts only; by (layer, expert)
};

class StoreModel final : public ModelSource {
 public:
  // Reads CURRENT (or `version` if > 0) and its manifest; no shard data yet.
  // Errors as current_version/read_manifest (store_reader.h).
  static StatusOr<std::unique_ptr<StoreModel>> open(const std::string& store, int64_t version = 0);

  // Restores every non-expert shard (kinds layer, model and file) and the expert shards
  // `want` selects (all if null) on options.threads threads, each shard read, decoded
  // and hash-verified straight into its own buffer (fallback as store_reader.h).
  // `report` (optional) receives counts, bytes and seconds. Errors: the first shard that
  // has no good copy (DataLoss/NotFound naming layer, expert and file); nothing is kept
  // then. FailedPrecondition if called a second time. Call before get(); not
  // thread-safe with the other methods.
  Status restore(const ExpertFilter& want, const RestoreOptions& options, RestoreReport* report);

  // One expert's shard (w1/w2/w3 and any scales), read and verified now, for a rank
  // that takes over or replicates an expert. Returned bytes are the shard's raw bytes;
  // `tensors` says where each tensor is. NotFound naming the layer and expert if the
  // manifest has no such expert.
  struct ExpertShard {
    std::vector<uint8_t> bytes;
    std::vector<ShardTensor> tensors;
  };
  StatusOr<ExpertShard> read_expert(int layer, int expert) const;

  // Takes expert (layer, expert)'s shard bytes from elsewhere (a peer's replica), after
  // restore(): checks their size and XXH3-128 against the manifest's entry, then
  // registers the shard's tensors so get() serves them (replacing any restored copy).
  // `origin` says where the bytes came from, for StoredTensor::file ("rank 0").
  // Errors (nothing changes): FailedPrecondition before restore(); NotFound naming the
  // layer and expert if the manifest has no such expert; DataLoss naming the layer, the
  // expert, the origin and the expected vs actual size or hash. Not thread-safe.
  Status adopt_expert_shard(int layer, int expert, std::vector<uint8_t> bytes, const std::string& origin);

  const Manifest& manifest() const { return manifest_; }
  const std::string& store() const { return store_; }

  // ModelSource. location(): "store DIR (version N)". read_file: a kind-file shard by
  // its file name (restored, or read and verified now, e.g. config.json before
  // restore()). get(): FailedPrecondition naming the tensor, layer and expert for a
  // tensor restore() did not load. Const methods are thread-safe after restore().
  std::string location() const override;
  StatusOr<std::string> read_file(const std::string& name) const override;
  bool contains(const std::string& name) const override;
  StatusOr<const StoredTensor*> get(const std::string& name) const override;
  std::vector<TensorInfo> tensor_infos() const override;
  size_t total_bytes() const override;
  // The manifest's hash of the expert's shard (no bytes read).
  std::optional<ExpertDigest> recorded_expert_digest(int layer, int expert) const override;

 private:
  StoreModel() = default;
  std::string store_;
  Manifest manifest_;
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;  // not zero-filled: the shard's bytes are read into it
    size_t size = 0;
  };
  // Points tensors_ at `buffer`'s bytes (views per e.tensors) and keeps it as e's bytes.
  void register_shard(const ShardEntry& e, Buffer buffer, const std::string& file);
  bool restored_ = false;
  std::map<std::string, Buffer> shard_bytes_;    // shard id -> restored raw bytes
  std::map<std::string, StoredTensor> tensors_;  // restored tensors, views into shard_bytes_
};

}  // namespace moe
