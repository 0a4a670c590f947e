// One stored shard on disk: a fixed header, then the encoded bytes.
//
//   offset size
//   0      8    magic "MOESHRD1"
//   8      4    u32 codec (0 raw, 1 zstd, 2 zstd-planes)
//   12     4    u32 element_bytes (1 or 2; planes split width)
//   16     8    u64 raw_bytes
//   24     8    u64 stored_bytes (= file size - 48)
//   32     16   XXH3-128 of the raw bytes, high then low, big-endian (content_hash.h)
//   48     stored_bytes of payload
//
// Files are content-addressed (store_layout.h: shards/<first 2 hex>/<hash>.shard), so
// shards with the same raw bytes are stored once, whatever their names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moe/status.h"
#include "moe/store/codec.h"
#include "moe/store/content_hash.h"
#include "moe/store/store_env.h"

namespace moe {

inline constexpr size_t kShardHeaderBytes = 48;

struct ShardHeader {
  Codec codec = Codec::kRaw;
  int element_bytes = 1;
  uint64_t raw_bytes = 0;
  uint64_t stored_bytes = 0;
  Hash128 hash;
};

// Writes header + payload to `file` (does not sync or close it). InvalidArgument if
// payload.size() != header.stored_bytes; the file's append error otherwise.
Status write_shard(WritableFile& file, const ShardHeader& header, std::span<const uint8_t> payload);

// Reads only the header of the shard at `path`. NotFound (missing), DataLoss naming the
// path for a bad magic, unknown codec, or a file size that disagrees with stored_bytes
// (truncated or extended).
StatusOr<ShardHeader> read_shard_header(const std::string& path);

// Reads, decodes and verifies the shard at `path` into `raw`, which must have exactly
// the shard's raw_bytes (the manifest's). `expected` is the hash the manifest records.
// DataLoss naming the path when the file is truncated, does not decode, holds another
// size, or its raw bytes hash to something other than `expected` (both hashes in the
// message); NotFound if the file is missing. Thread-safe for different `raw` buffers.
Status read_shard(const std::string& path, const Hash128& expected, std::span<uint8_t> raw);

}  // namespace moe
