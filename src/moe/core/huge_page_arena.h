// Anonymous memory backed by transparent huge pages (2 MiB), for the weights decode
// streams: a sequential read of a 4 KiB-page mapping (a mapped safetensors file) runs at
// ~0.65x the rate of the same bytes in 2 MiB pages on the machines measured
// (docs/history/single-stream.md, "Decode reads"), since every 4 KiB page costs a TLB
// miss and restarts the hardware prefetcher's stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace moe {

// Whether the kernel offers transparent huge pages to a process that asks with
// madvise(MADV_HUGEPAGE): /sys/kernel/mm/transparent_hugepage/enabled is "always" or
// "madvise" (false for "never", or when the file is missing).
bool transparent_hugepages_available();

// Bytes of this process's anonymous memory in huge pages (AnonHugePages of
// /proc/self/smaps_rollup; 0 when unreadable).
size_t anon_huge_page_bytes();

// A bump allocator over chunks of anonymous memory, each 2 MiB-aligned and advised
// MADV_HUGEPAGE before it is touched, so its pages fault in as huge pages where the
// kernel has them (else as 4 KiB pages: the memory still works). Allocations are
// 64-byte aligned, zero-filled, never freed one by one: all go with the arena.
// Not thread-safe. Out of memory (mmap failing) aborts through MOE_CHECK, as
// std::vector's growth would throw.
class HugePageArena {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  // chunk_bytes: the size of each chunk (rounded up to 2 MiB); a larger allocation gets
  // a chunk of its own.
  explicit HugePageArena(size_t chunk_bytes = size_t{64} << 20);
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // `bytes` bytes, 64-byte aligned (bytes == 0: a valid pointer to no bytes).
  uint8_t* allocate(size_t bytes);
  // Bytes handed out, and bytes mapped for chunks (>= handed out).
  size_t allocated_bytes() const { return allocated_; }
  size_t mapped_bytes() const { return mapped_; }

 private:
  struct Chunk {
    uint8_t* base;
    size_t size;
    size_t used;
  };
  Chunk map_chunk(size_t bytes);
  size_t chunk_bytes_;
  std::vector<Chunk> chunks_;
  size_t allocated_ = 0, mapped_ = 0;
};

}  // namespace moe
