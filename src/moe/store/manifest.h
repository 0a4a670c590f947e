// A store version's manifest: which shards make up the model, what each holds, and how
// to rebuild the Hugging Face directory it came from byte for byte.
//
// JSON (one file per version, STORE/MANIFEST-<version>):
// {
//   "format": "moe-expert-store", "format_version": 1,
//   "version": 3, "parent_version": 2 (0 for the first), "created_unix_ms": ...,
//   "model_type": "mixtral",
//   "fingerprint": "<32 hex>",            // model_structure_fingerprint (shard_grouping.h)
//   "config_json": "<config.json's text>",
//   "source_dir": "/abs/path/of/the/hf/dir",  // where it was saved from (a fallback copy)
//   "shards": [ {
//       "id": "layer.3.expert.5",        // unique in the manifest
//       "kind": "expert" | "layer" | "model" | "file",
//       "layer": 3, "expert": 5,         // -1 when not applicable
//       "file_name": "tokenizer.model",  // kind "file" only: path relative to the HF dir
//       "hash": "<32 hex>", "codec": "zstd-planes", "element_bytes": 2,
//       "raw_bytes": N, "stored_bytes": M,
//       "tensors": [ {"name": ..., "dtype": "BF16", "shape": [..], "offset": 0, "nbytes": ..} ]
//   } ],
//   "hf_files": [ {                      // each safetensors file of the source directory
//       "name": "model-00001-of-00003.safetensors",
//       "header_shard": "file:model-00001-of-00003.safetensors#header",  // 8-byte length + JSON header, verbatim
//       "tensors": ["lm_head.weight", ...]  // in data-offset order; their bytes are contiguous
//   } ]
// }
// A shard's raw bytes are its tensors' bytes concatenated in "tensors" order (offsets
// are within the shard). Other files of the directory (config.json, tokenizer.model,
// the index json...) are shards of kind "file" with their bytes verbatim.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moe/status.h"
#include "moe/store/codec.h"
#include "moe/store/content_hash.h"

namespace moe {

enum class ShardKind { kExpert, kLayer, kModel, kFile };
const char* shard_kind_name(ShardKind kind);  // "expert", "layer", "model", "file"

struct ShardTensor {
  std::string name;
  std::string dtype;  // safetensors dtype name, e.g. "BF16"
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // within the shard's raw bytes
  uint64_t nbytes = 0;
};

struct ShardEntry {
  std::string id;
  ShardKind kind = ShardKind::kModel;
  int layer = -1;
  int expert = -1;
  std::string file_name;  // kind kFile
  Hash128 hash;           // XXH3-128 of the raw bytes
  Codec codec = Codec::kRaw;
  int element_bytes = 1;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  std::vector<ShardTensor> tensors;
  // "layer 3, expert 5" / "layer 3 (non-expert tensors)" / "file config.json": for messages.
  std::string describe() const;
};

struct HfFileLayout {
  std::string name;
  std::string header_shard;          // id of a kFile shard with the 8 + N header bytes
  std::vector<std::string> tensors;  // data-offset order
};

struct Manifest {
  int64_t version = 0;
  int64_t parent_version = 0;
  int64_t created_unix_ms = 0;
  std::string model_type;
  Hash128 fingerprint;
  std::string config_json;
  std::string source_dir;
  std::vector<ShardEntry> shards;
  std::vector<HfFileLayout> hf_files;

  // Builds the lookup index of the find_* functions (parse_manifest calls it). Call it
  // again after changing `shards`; without a current index they scan linearly (a
  // DeepSeek-V3 manifest lists ~90k tensors: lookups per tensor would be quadratic).
  void build_index();

  // nullptr if absent. Pointers valid while the manifest is unchanged.
  const ShardEntry* find_shard(const std::string& id) const;
  const ShardEntry* find_expert(int layer, int expert) const;
  const ShardEntry* find_file(const std::string& file_name) const;
  // The shard and tensor entry holding tensor `name`; {nullptr, nullptr} if none.
  std::pair<const ShardEntry*, const ShardTensor*> find_tensor(const std::string& name) const;
  uint64_t total_raw_bytes() const;
  uint64_t total_stored_bytes() const;  // as listed (a hash shared by two shards counts twice)

 private:
  bool index_current() const { return indexed_shards_ == shards.size() && indexed_shards_ > 0; }
  size_t indexed_shards_ = 0;
  std::unordered_map<std::string, size_t> shard_index_;                   // id -> shard
  std::unordered_map<std::string, std::pair<size_t, size_t>> tensor_index_;  // name -> (shard, tensor)
  std::map<std::pair<int, int>, size_t> expert_index_;                    // (layer, expert) -> shard
  std::unordered_map<std::string, size_t> file_index_;                    // file_name -> shard
};

std::string manifest_to_json(const Manifest& manifest);

// Parses and validates a manifest. `origin` (its path) names it in errors. DataLoss for
// text that is not JSON, a wrong "format", a missing or mistyped field (named), a bad
// hash, an unknown codec or kind, duplicate shard ids or tensor names, tensor spans
// outside their shard or not covering it, an hf_files entry naming an unknown shard or
// tensor.
StatusOr<Manifest> parse_manifest(const std::string& text, const std::string& origin);

}  // namespace moe
