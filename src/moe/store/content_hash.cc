#include "moe/store/content_hash.h"

#include <xxhash.h>

#include <cstring>
#include <new>

namespace moe {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Hash128 from_xxh(XXH128_hash_t h) { return Hash128{h.high64, h.low64}; }

}  // namespace

std::string Hash128::hex() const {
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH128_hash_t{low, high});
  static const char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[2 * i] = kDigits[canon.digest[i] >> 4];
    out[2 * i + 1] = kDigits[canon.digest[i] & 0xf];
  }
  return out;
}

StatusOr<Hash128> Hash128::parse(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("content hash '" + std::string(text) + "': " + why);
  };
  if (text.size() != 32) return bad("expected 32 hex digits, got " + std::to_string(text.size()) + " characters");
  XXH128_canonical_t canon;
  for (int i = 0; i < 16; ++i) {
    int hi = hex_value(text[2 * i]);
    int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return bad("not a hex digit at position " + std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    canon.digest[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return from_xxh(XXH128_hashFromCanonical(&canon));
}

Hash128 hash_bytes(const void* data, size_t size) { return from_xxh(XXH3_128bits(data, size)); }

Hasher128::Hasher128() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}

Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Hasher128::update(const void* data, size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

Hash128 Hasher128::digest() const { return from_xxh(XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_))); }

}  // namespace moe
