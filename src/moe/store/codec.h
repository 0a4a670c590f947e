// Codecs of stored shards.
//   raw:         the bytes as they are.
//   zstd:        zstd (libzstd) of the raw bytes.
//   zstd-planes: for 2-byte (bf16/f16) data, the bytes split into planes first (every
//                element's high byte, then every low byte), then zstd. The high byte holds
//                the sign and most of the exponent, which repeat a lot; the low byte is
//                mostly mantissa. Idea from ZipNN (Hershcovitch et al., "ZipNN: Lossless
//                Compression for AI Models", 2024), which reports about a third saved on
//                BF16 models where plain zstd saves little.
// A shard mixing dtypes uses planes only if all its tensors are 2-byte; `element_bytes`
// is 2 then, else 1 (no split).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moe/status.h"

namespace moe {

enum class Codec { kRaw, kZstd, kZstdPlanes };

// "raw", "zstd", "zstd-planes".
const char* codec_name(Codec codec);
// InvalidArgument naming `name` and the valid names.
StatusOr<Codec> parse_codec(const std::string& name);

struct CodecOptions {
  int level = 3;    // zstd level, 1..19 (ZSTD_c_compressionLevel)
  int threads = 1;  // zstd worker threads (ZSTD_c_nbWorkers; 1 = compress in the caller)
};

// Byte planes: dst[p * n + i] = src[i * element_bytes + (element_bytes - 1 - p)] for
// n = size / element_bytes elements (plane 0 = the most significant byte, little-endian
// input). `size` must be a multiple of element_bytes; dst has `size` bytes.
void split_byte_planes(const uint8_t* src, size_t size, int element_bytes, uint8_t* dst);
// Inverse of split_byte_planes.
void join_byte_planes(const uint8_t* src, size_t size, int element_bytes, uint8_t* dst);

// Encodes `raw` with `codec`. InvalidArgument for a bad level or element size (naming
// it); Internal with zstd's message if compression fails.
StatusOr<std::vector<uint8_t>> encode(Codec codec, std::span<const uint8_t> raw, int element_bytes,
                                      const CodecOptions& options);

// Decodes `stored` into `raw` (exactly raw.size() bytes expected). DataLoss if the
// stored bytes are not a valid frame of that codec or decode to another size.
// Thread-safe (no shared state).
Status decode(Codec codec, std::span<const uint8_t> stored, int element_bytes, std::span<uint8_t> raw);

// What encoding one shard with each candidate codec gave; encode_best() fills it.
struct CodecTrial {
  Codec codec = Codec::kRaw;
  size_t stored_bytes = 0;
  double seconds = 0;
};

// Encodes with zstd and (when element_bytes == 2) zstd-planes, keeps the smaller; raw
// if neither is smaller than the input. `trials` (optional) receives every attempt.
StatusOr<std::vector<uint8_t>> encode_best(std::span<const uint8_t> raw, int element_bytes,
                                           const CodecOptions& options, Codec* chosen,
                                           std::vector<CodecTrial>* trials);

}  // namespace moe
