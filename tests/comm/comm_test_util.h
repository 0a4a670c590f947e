// Shared by the communicator tests (in-process and MPI): byte counts and patterns
// for alltoallv, so that every received byte can be checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe::testing {

// Bytes rank `src` sends to rank `dst` in a group of n, in iteration `iter`.
// Asymmetric (a2a_bytes(s, d) != a2a_bytes(d, s) in general), with zero-byte blocks
// (whenever s + 2d + iter is a multiple of 3, the diagonal included), one block
// larger than 64 KiB (MPI's rendezvous protocol), and the last rank (n > 1) sends
// nothing at all.
inline size_t a2a_bytes(int src, int dst, int n, int iter = 0) {
  if (n > 1 && src == n - 1) return 0;
  if ((src + 2 * dst + iter) % 3 == 0) return 0;
  size_t b = 1 + static_cast<size_t>((src * 131 + dst * 17 + iter * 7) % 97);
  if (src == 0 && dst == n - 1) b += 70000;
  return b;
}

// Byte i of the block src -> dst.
inline uint8_t a2a_byte(int src, int dst, size_t i, int iter = 0) {
  return static_cast<uint8_t>(src * 37 + dst * 101 + i * 13 + (i >> 8) * 7 + iter * 29 + 1);
}

struct A2aBuffers {
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<uint8_t> send, recv;
};

// What `rank` sends and expects; recv is pre-filled with 0xEE (never a valid result
// pattern for the whole block).
inline A2aBuffers make_a2a(int rank, int n, int iter = 0) {
  A2aBuffers b;
  for (int d = 0; d < n; ++d) {
    b.send_bytes.push_back(a2a_bytes(rank, d, n, iter));
    for (size_t i = 0; i < b.send_bytes.back(); ++i) b.send.push_back(a2a_byte(rank, d, i, iter));
  }
  size_t total = 0;
  for (int s = 0; s < n; ++s) {
    b.recv_bytes.push_back(a2a_bytes(s, rank, n, iter));
    total += b.recv_bytes.back();
  }
  b.recv.assign(total, 0xEE);
  return b;
}

// Number of wrong bytes in `recv` of `rank` (0 = all correct).
inline size_t a2a_errors(int rank, int n, const std::vector<uint8_t>& recv, int iter = 0) {
  size_t errors = 0, off = 0;
  for (int s = 0; s < n; ++s) {
    const size_t len = a2a_bytes(s, rank, n, iter);
    for (size_t i = 0; i < len; ++i) {
      if (off + i >= recv.size() || recv[off + i] != a2a_byte(s, rank, i, iter)) ++errors;
    }
    off += len;
  }
  if (off != recv.size()) errors += 1;
  return errors;
}

}  // namespace moe::testing
