// Content hash of a shard's raw bytes: XXH3-128 (libxxhash). Written as 32 lowercase
// hex digits in XXH128's canonical (big-endian) form, the same text `xxhsum -H2` prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "moe/status.h"

namespace moe {

struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const Hash128&) const = default;
  bool operator<(const Hash128& o) const { return high != o.high ? high < o.high : low < o.low; }
  // 32 hex digits, canonical order (as xxhsum -H2).
  std::string hex() const;
  // Inverse of hex(); InvalidArgument naming `text` unless it is 32 hex digits.
  static StatusOr<Hash128> parse(std::string_view text);
};

// XXH3-128 of `size` bytes at `data` (seed 0). Thread-safe.
Hash128 hash_bytes(const void* data, size_t size);

// Streaming form, for bytes that arrive in pieces (a shard's tensors in order).
// Not thread-safe per object.
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void update(const void* data, size_t size);
  Hash128 digest() const;

 private:
  void* state_;  // XXH3_state_t*
};

}  // namespace moe
