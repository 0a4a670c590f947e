// HugePageArena: 64-byte aligned, zero-filled, non-overlapping allocations from 2 MiB-
// aligned chunks (a large one gets its own chunk), and, where the kernel offers
// transparent huge pages and compacts for madvised memory, touched chunks in 2 MiB pages
// (AnonHugePages of /proc/self/smaps_rollup).
#include "moe/core/huge_page_arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

namespace moe {
namespace {

TEST(HugePageArenaTest, AlignedZeroedDisjointAllocations) {
  HugePageArena arena(4 << 20);  // 4 MiB chunks
  uint8_t* a = arena.allocate(100);
  uint8_t* b = arena.allocate(1);
  uint8_t* c = arena.allocate((4 << 20) - 64);  // does not fit the first chunk's rest
  uint8_t* d = arena.allocate(10 << 20);  // larger than a chunk: a chunk of its own
  for (uint8_t* p : {a, b, c, d}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(b, a + 128);  // 100 rounded up to 64
  // c and d start chunks: 2 MiB-aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % HugePageArena::kHugePage, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % HugePageArena::kHugePage, 0u);
  for (size_t i = 0; i < (10u << 20); i += 4096) ASSERT_EQ(d[i], 0) << i;
  std::memset(a, 1, 100);
  std::memset(b, 2, 1);
  std::memset(c, 3, (4 << 20) - 64);
  std::memset(d, 4, 10 << 20);
  EXPECT_EQ(a[99], 1);
  EXPECT_EQ(b[0], 2);
  EXPECT_EQ(c[(4 << 20) - 65], 3);
  EXPECT_EQ(d[0], 4);
  EXPECT_EQ(arena.allocated_bytes(), 100u + 1u + (4u << 20) - 64 + (10u << 20));
  EXPECT_EQ(arena.mapped_bytes(), (4u << 20) + (4u << 20) + (10u << 20));
  EXPECT_NE(arena.allocate(0), nullptr);
}

std::string thp_setting(const char* file) {
  std::ifstream in(std::string("/sys/kernel/mm/transparent_hugepage/") + file);
  std::string line;
  std::getline(in, line);
  return line;
}

TEST(HugePageArenaTest, TouchedChunkIsInHugePagesWhereTheKernelOffersThem) {
  const std::string enabled = thp_setting("enabled"), defrag = thp_setting("defrag");
  EXPECT_EQ(transparent_hugepages_available(),
            enabled.find("[always]") != std::string::npos || enabled.find("[madvise]") != std::string::npos);
  // A madvised fault compacts memory for a huge page when defrag is always, madvise or
  // defer+madvise; with defer or never it may get 4 KiB pages on a fragmented machine.
  const bool compacts = defrag.find("[always]") != std::string::npos || defrag.find("[madvise]") != std::string::npos ||
                        defrag.find("[defer+madvise]") != std::string::npos;
  if (!transparent_hugepages_available() || !compacts) {
    GTEST_SKIP() << "transparent huge pages: enabled '" << enabled << "', defrag '" << defrag
                 << "': a huge page is not promised here, skipped";
  }
  const size_t before = anon_huge_page_bytes();
  HugePageArena arena(8 << 20);
  uint8_t* p = arena.allocate(8 << 20);
  std::memset(p, 1, 8 << 20);
  EXPECT_GE(anon_huge_page_bytes(), before + (2u << 20)) << "no 2 MiB page among 8 MiB of touched madvised memory";
}

}  // namespace
}  // namespace moe
