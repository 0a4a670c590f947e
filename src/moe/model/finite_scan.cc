#include "moe/model/finite_scan.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace moe {
namespace {

// The exponent mask of `dtype` in an element's bits (0: nothing to check).
uint32_t exponent_mask(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 0x7F800000u;
    case DType::kBF16: return 0x7F80u;
    case DType::kF16: return 0x7C00u;
    case DType::kF8E4M3: return 0x7Fu;  // S.1111.111 is NaN; no Inf
    case DType::kI8: return 0;
  }
  return 0;
}

template <typename Bits>
int64_t exact_scan(const uint8_t* data, size_t from, size_t to, Bits mask) {
  for (size_t i = from; i < to; ++i) {
    Bits v;
    std::memcpy(&v, data + i * sizeof(Bits), sizeof(Bits));
    if ((v & mask) == mask) return static_cast<int64_t>(i);
  }
  return -1;
}

// 64-bit words, all lanes at once: a lane of x = (w & M) ^ M is zero exactly where the
// element is non-finite, and (x - L) & ~x & H is non-zero iff some lane of x is zero. Only
// a block with a hit is looked at element by element.
template <typename Bits>
int64_t swar_scan(const uint8_t* data, size_t count, Bits exp_mask) {
  constexpr size_t kLanes = 8 / sizeof(Bits);
  uint64_t lanes_one = 0, lanes_high = 0, mask = 0;
  for (size_t k = 0; k < kLanes; ++k) {
    lanes_one |= uint64_t{1} << (k * 8 * sizeof(Bits));
    lanes_high |= uint64_t{1} << (k * 8 * sizeof(Bits) + 8 * sizeof(Bits) - 1);
    mask |= uint64_t{exp_mask} << (k * 8 * sizeof(Bits));
  }
  constexpr size_t kBlockWords = 1024;
  const size_t words = count / kLanes;
  for (size_t b = 0; b < words; b += kBlockWords) {
    const size_t end = std::min(words, b + kBlockWords);
    uint64_t hit = 0;
    for (size_t i = b; i < end; ++i) {
      uint64_t w;
      std::memcpy(&w, data + i * 8, 8);
      const uint64_t x = (w & mask) ^ mask;
      hit |= (x - lanes_one) & ~x & lanes_high;
    }
    if (hit != 0) {
      const int64_t at = exact_scan<Bits>(data, b * kLanes, end * kLanes, exp_mask);
      if (at >= 0) return at;
    }
  }
  return exact_scan<Bits>(data, words * kLanes, count, exp_mask);
}

#if defined(__AVX2__)
// Lanes of v (elements of `Bits`) equal to m, after masking with m.
template <typename Bits>
__m256i exponent_all_ones(__m256i v, __m256i m) {
  const __m256i e = _mm256_and_si256(v, m);
  if constexpr (sizeof(Bits) == 4) return _mm256_cmpeq_epi32(e, m);
  else if constexpr (sizeof(Bits) == 2) return _mm256_cmpeq_epi16(e, m);
  else return _mm256_cmpeq_epi8(e, m);
}

// Four unaligned 32-byte loads per step; a step with a hit is looked at element by
// element (then the scan stops there, so that costs nothing on finite weights).
template <typename Bits>
int64_t avx2_scan(const uint8_t* data, size_t count, Bits exp_mask) {
  constexpr size_t kPerVector = 32 / sizeof(Bits);
  constexpr size_t kPerStep = 4 * kPerVector;
  __m256i m;
  if constexpr (sizeof(Bits) == 4) m = _mm256_set1_epi32(static_cast<int>(exp_mask));
  else if constexpr (sizeof(Bits) == 2) m = _mm256_set1_epi16(static_cast<short>(exp_mask));
  else m = _mm256_set1_epi8(static_cast<char>(exp_mask));
  size_t i = 0;
  for (; i + kPerStep <= count; i += kPerStep) {
    const uint8_t* p = data + i * sizeof(Bits);
    const __m256i a = exponent_all_ones<Bits>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), m);
    const __m256i b = exponent_all_ones<Bits>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)), m);
    const __m256i c = exponent_all_ones<Bits>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64)), m);
    const __m256i d = exponent_all_ones<Bits>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 96)), m);
    const __m256i any = _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
    if (!_mm256_testz_si256(any, any)) return exact_scan<Bits>(data, i, i + kPerStep, exp_mask);
  }
  return exact_scan<Bits>(data, i, count, exp_mask);
}

// Copies with streaming stores (no read of the destination, which is not looked at
// again soon) and checks the same registers: the bytes are read once. `dst` 32-byte
// aligned. Checks every 4 KiB; the first hit is located in the source afterwards.
template <typename Bits>
int64_t avx2_copy_scan(uint8_t* dst, const uint8_t* src, size_t count, Bits exp_mask) {
  constexpr size_t kStep = 128, kCheckEvery = 4096;
  const size_t bytes = count * sizeof(Bits);
  __m256i m;
  if constexpr (sizeof(Bits) == 4) m = _mm256_set1_epi32(static_cast<int>(exp_mask));
  else if constexpr (sizeof(Bits) == 2) m = _mm256_set1_epi16(static_cast<short>(exp_mask));
  else m = _mm256_set1_epi8(static_cast<char>(exp_mask));
  int64_t first = -1;
  size_t off = 0;
  for (; off + kCheckEvery <= bytes; off += kCheckEvery) {
    __m256i any = _mm256_setzero_si256();
    for (size_t k = off; k < off + kCheckEvery; k += kStep) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k + 32));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k + 64));
      const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k + 96));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + k), a);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + k + 32), b);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + k + 64), c);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + k + 96), d);
      any = _mm256_or_si256(any, _mm256_or_si256(_mm256_or_si256(exponent_all_ones<Bits>(a, m), exponent_all_ones<Bits>(b, m)),
                                                 _mm256_or_si256(exponent_all_ones<Bits>(c, m), exponent_all_ones<Bits>(d, m))));
    }
    if (first < 0 && !_mm256_testz_si256(any, any)) {
      first = exact_scan<Bits>(src, off / sizeof(Bits), (off + kCheckEvery) / sizeof(Bits), exp_mask);
    }
  }
  _mm_sfence();  // the streamed stores are visible before the caller's threads join
  std::memcpy(dst + off, src + off, bytes - off);
  if (first < 0) first = exact_scan<Bits>(src, off / sizeof(Bits), count, exp_mask);
  return first;
}
#endif

// Portable: scanned then copied in 256 KiB blocks, so the copy reads the scanned bytes
// from cache.
template <typename Bits>
int64_t block_copy_scan(uint8_t* dst, const uint8_t* src, size_t count, Bits exp_mask) {
  constexpr size_t kBlock = (size_t{256} << 10) / sizeof(Bits);
  int64_t first = -1;
  for (size_t i = 0; i < count; i += kBlock) {
    const size_t n = std::min(kBlock, count - i);
    if (first < 0) {
      const int64_t at = swar_scan<Bits>(src + i * sizeof(Bits), n, exp_mask);
      if (at >= 0) first = static_cast<int64_t>(i) + at;
    }
    std::memcpy(dst + i * sizeof(Bits), src + i * sizeof(Bits), n * sizeof(Bits));
  }
  return first;
}

template <typename Bits>
int64_t copy_scan(uint8_t* dst, const uint8_t* src, size_t count, Bits mask, bool portable) {
#if defined(__AVX2__)
  if (!portable && reinterpret_cast<uintptr_t>(dst) % 32 == 0) return avx2_copy_scan<Bits>(dst, src, count, mask);
#endif
  (void)portable;
  return block_copy_scan<Bits>(dst, src, count, mask);
}

int64_t copy_dispatch(void* dst, const void* src, size_t count, DType dtype, bool portable) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* p = static_cast<const uint8_t*>(src);
  const uint32_t mask = exponent_mask(dtype);
  switch (dtype_size(dtype)) {
    case 4: return copy_scan<uint32_t>(d, p, count, mask, portable);
    case 2: return copy_scan<uint16_t>(d, p, count, static_cast<uint16_t>(mask), portable);
    default:
      if (mask == 0) {
        std::memcpy(d, p, count);
        return -1;
      }
      return copy_scan<uint8_t>(d, p, count, static_cast<uint8_t>(mask), portable);
  }
}

template <typename Bits>
int64_t scan(const uint8_t* data, size_t count, Bits mask, bool portable) {
#if defined(__AVX2__)
  if (!portable) return avx2_scan<Bits>(data, count, mask);
#endif
  (void)portable;
  return swar_scan<Bits>(data, count, mask);
}

int64_t dispatch(const void* data, size_t count, DType dtype, bool portable) {
  const auto* p = static_cast<const uint8_t*>(data);
  const uint32_t mask = exponent_mask(dtype);
  switch (dtype_size(dtype)) {
    case 4: return scan<uint32_t>(p, count, mask, portable);
    case 2: return scan<uint16_t>(p, count, static_cast<uint16_t>(mask), portable);
    default: return mask == 0 ? -1 : scan<uint8_t>(p, count, static_cast<uint8_t>(mask), portable);
  }
}

}  // namespace

int64_t find_non_finite(const void* data, size_t count, DType dtype) { return dispatch(data, count, dtype, false); }

int64_t find_non_finite_portable(const void* data, size_t count, DType dtype) {
  return dispatch(data, count, dtype, true);
}

int64_t copy_finding_non_finite(void* dst, const void* src, size_t count, DType dtype) {
  return copy_dispatch(dst, src, count, dtype, false);
}

int64_t copy_finding_non_finite_portable(void* dst, const void* src, size_t count, DType dtype) {
  return copy_dispatch(dst, src, count, dtype, true);
}

bool finite_scan_is_avx2() {
#if defined(__AVX2__)
  return true;
#else
  return false;
#endif
}

const char* non_finite_kind(const void* data, int64_t index, DType dtype) {
  if (dtype == DType::kF8E4M3 || dtype == DType::kI8) return "NaN";
  const size_t size = dtype_size(dtype);
  uint32_t v = 0;
  std::memcpy(&v, static_cast<const uint8_t*>(data) + static_cast<size_t>(index) * size, size);  // little-endian
  const uint32_t sign = size == 4 ? 0x80000000u : 0x8000u;
  const uint32_t mantissa = ~exponent_mask(dtype) & ~sign & (size == 4 ? 0xFFFFFFFFu : 0xFFFFu);
  return (v & mantissa) == 0 ? "Inf" : "NaN";
}

}  // namespace moe
