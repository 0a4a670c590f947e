// What a save stores, before any hashing: the shards of a Hugging Face directory (one
// per expert, per layer's other tensors, the model's other tensors, the 8 + N header
// bytes of each safetensors file, and every other file verbatim) as pieces of mapped
// memory, plus the manifest fields that come from the directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe/core/mapped_file.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/status.h"
#include "moe/store/content_hash.h"
#include "moe/store/manifest.h"

namespace moe {

struct ShardPiece {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// One shard to save: its manifest entry (hash, codec and stored_bytes not yet known)
// and its raw bytes as pieces in order (views into the plan's mappings).
struct PlannedShard {
  ShardEntry entry;
  std::vector<ShardPiece> pieces;
};

struct SavePlan {
  std::string model_type;
  Hash128 fingerprint;  // model_structure_fingerprint
  std::string config_json;
  std::string source_dir;  // absolute
  // Order: the model shard, then per layer its non-expert shard and its experts, then
  // kind-file shards by name.
  std::vector<PlannedShard> shards;
  std::vector<HfFileLayout> hf_files;

  // Owners of the bytes the pieces point into (movable: the pointees do not move).
  std::unique_ptr<HfCheckpoint> checkpoint;
  std::vector<std::unique_ptr<MappedFile>> files;
  std::vector<std::unique_ptr<std::string>> headers;
};

// Opens `model_dir` (config.json, the safetensors files, every other file under it,
// recursively, except anything under `store` should it lie inside) and plans its shards.
// NotFound naming the directory if missing; the config's and checkpoint's errors
// (NotFound / InvalidArgument / DataLoss naming the file); DataLoss naming the file if a
// safetensors file's tensors are not contiguous or do not cover its data section
// exactly, or if two files hold a tensor of the same name.
StatusOr<SavePlan> plan_save(const std::string& model_dir, const std::string& store);

}  // namespace moe
