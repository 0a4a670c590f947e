// libFuzzer target: the checkpoint store's manifest (parse_manifest: shards, kinds,
// hashes, codecs, tensor spans), then its JSON written back and parsed again, which must
// give the same manifest text.
#include <cstdint>
#include <string>

#include "moe/store/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = moe::parse_manifest(text, "fuzz/manifest.json");
  if (!m.ok()) return 0;
  const std::string again = moe::manifest_to_json(m.value());
  auto m2 = moe::parse_manifest(again, "fuzz/again");
  if (!m2.ok() || moe::manifest_to_json(m2.value()) != again) __builtin_trap();  // round trip
  return 0;
}
