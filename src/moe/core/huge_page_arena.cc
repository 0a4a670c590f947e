#include "moe/core/huge_page_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <fstream>

#include "moe/core/check.h"

namespace moe {
namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

bool transparent_hugepages_available() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return false;
  // e.g. "always [madvise] never": the bracketed word is the mode.
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

size_t anon_huge_page_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key) {
    if (key == "AnonHugePages:") {
      in >> kb >> unit;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

HugePageArena::HugePageArena(size_t chunk_bytes) : chunk_bytes_(round_up(std::max<size_t>(chunk_bytes, 1), kHugePage)) {}

HugePageArena::~HugePageArena() {
  for (const Chunk& c : chunks_) ::munmap(c.base, c.size);
}

HugePageArena::Chunk HugePageArena::map_chunk(size_t bytes) {
  const size_t size = round_up(bytes, kHugePage);
  // Over-map by one huge page, then trim both ends to a 2 MiB-aligned range: mmap only
  // promises 4 KiB alignment, and a huge page needs a 2 MiB-aligned virtual range.
  void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MOE_CHECK(raw != MAP_FAILED && "HugePageArena: mmap of anonymous memory failed");
  uint8_t* begin = static_cast<uint8_t*>(raw);
  uint8_t* aligned = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(begin), kHugePage));
  if (aligned > begin) ::munmap(begin, static_cast<size_t>(aligned - begin));
  uint8_t* end = begin + size + kHugePage;
  if (end > aligned + size) ::munmap(aligned + size, static_cast<size_t>(end - (aligned + size)));
  // Before the first touch, so the faults take huge pages. EINVAL (a kernel without
  // THP) leaves ordinary pages.
  (void)::madvise(aligned, size, MADV_HUGEPAGE);
  mapped_ += size;
  return {aligned, size, 0};
}

uint8_t* HugePageArena::allocate(size_t bytes) {
  const size_t need = round_up(bytes, 64);
  if (chunks_.empty() || chunks_.back().size - chunks_.back().used < need) {
    chunks_.push_back(map_chunk(std::max(need, chunk_bytes_)));
  }
  Chunk& c = chunks_.back();
  uint8_t* p = c.base + c.used;
  c.used += need;
  allocated_ += bytes;
  return p;
}

}  // namespace moe
