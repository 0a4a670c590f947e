#include "moe/store/codec.h"

#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

namespace moe {

namespace {

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

Status check_element_bytes(int element_bytes) {
  if (element_bytes == 1 || element_bytes == 2 || element_bytes == 4) return ok_status();
  return invalid_argument("codec element_bytes " + std::to_string(element_bytes) + " (expected 1, 2 or 4)");
}

StatusOr<std::vector<uint8_t>> zstd_compress(const uint8_t* data, size_t size, const CodecOptions& options) {
  if (options.level < 1 || options.level > 19) {
    return invalid_argument("zstd level " + std::to_string(options.level) + " (expected 1..19)");
  }
  if (options.threads < 1) {
    return invalid_argument("zstd threads " + std::to_string(options.threads) + " (expected >= 1)");
  }
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx(ZSTD_createCCtx());
  if (!cctx) return internal_error("zstd: cannot create a compression context");
  size_t rc = ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, options.level);
  if (ZSTD_isError(rc)) return internal_error(std::string("zstd level: ") + ZSTD_getErrorName(rc));
  // Record the size in the frame header, so decoders can check it up front.
  rc = ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, 1);
  if (ZSTD_isError(rc)) return internal_error(std::string("zstd content size flag: ") + ZSTD_getErrorName(rc));
  if (options.threads > 1) {
    rc = ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_nbWorkers, options.threads);
    // A libzstd built without multithreading refuses nbWorkers: compress in the caller.
    if (ZSTD_isError(rc)) (void)ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_nbWorkers, 0);
  }
  std::vector<uint8_t> out(ZSTD_compressBound(size));
  // compress2 sets the pledged size, so the frame carries the content size even with workers.
  rc = ZSTD_compress2(cctx.get(), out.data(), out.size(), data, size);
  if (ZSTD_isError(rc)) return internal_error(std::string("zstd compression failed: ") + ZSTD_getErrorName(rc));
  out.resize(rc);
  out.shrink_to_fit();
  return out;
}

Status zstd_decompress(std::span<const uint8_t> stored, uint8_t* dst, size_t size) {
  unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (content == ZSTD_CONTENTSIZE_ERROR) return data_loss("not a zstd frame");
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != size) {
    return data_loss("zstd frame holds " + std::to_string(content) + " bytes, expected " + std::to_string(size));
  }
  // One context per thread, reused (creating one per shard costs an allocation of its
  // window buffers every time).
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx(ZSTD_createDCtx());
  if (!dctx) return internal_error("zstd: cannot create a decompression context");
  ZSTD_DCtx_reset(dctx.get(), ZSTD_reset_session_and_parameters);
  if (content == size) {
    // The frame says its size (ours always do): one-shot decode straight into `dst`,
    // without the streaming window's extra copy. Trailing bytes after the frame are an
    // error here too (ZSTD_decompressDCtx decodes every frame of the input).
    const size_t first = ZSTD_findFrameCompressedSize(stored.data(), stored.size());
    if (ZSTD_isError(first)) return data_loss(std::string("zstd frame truncated or corrupt: ") + ZSTD_getErrorName(first));
    if (first != stored.size()) {
      return data_loss(std::to_string(stored.size() - first) + " trailing bytes after the zstd frame");
    }
    const size_t n = ZSTD_decompressDCtx(dctx.get(), dst, size, stored.data(), stored.size());
    if (ZSTD_isError(n)) return data_loss(std::string("zstd decode failed: ") + ZSTD_getErrorName(n));
    if (n != size) return data_loss("zstd frame holds " + std::to_string(n) + " bytes, expected " + std::to_string(size));
    return ok_status();
  }
  // Streaming decode into exactly `size` bytes: stops (with an error) at anything more,
  // and handles frames without a content size (e.g. `zstd` CLI from a pipe).
  ZSTD_inBuffer in{stored.data(), stored.size(), 0};
  ZSTD_outBuffer out{dst, size, 0};
  size_t rc = 0;
  while (true) {
    rc = ZSTD_decompressStream(dctx.get(), &out, &in);
    if (ZSTD_isError(rc)) return data_loss(std::string("zstd decode failed: ") + ZSTD_getErrorName(rc));
    if (rc == 0) break;  // frame complete
    if (in.pos == in.size && out.pos < out.size) {
      return data_loss("zstd frame truncated (" + std::to_string(out.pos) + " of " + std::to_string(size) +
                       " bytes decoded)");
    }
    if (out.pos == out.size) {
      // Output full but the frame is not finished: more data than expected, or a
      // truncated epilogue. Probe with one spare byte.
      uint8_t spare = 0;
      ZSTD_outBuffer extra{&spare, 1, 0};
      rc = ZSTD_decompressStream(dctx.get(), &extra, &in);
      if (ZSTD_isError(rc)) return data_loss(std::string("zstd decode failed: ") + ZSTD_getErrorName(rc));
      if (extra.pos > 0) return data_loss("zstd frame holds more than the expected " + std::to_string(size) + " bytes");
      if (rc == 0) break;
      if (in.pos == in.size) return data_loss("zstd frame truncated (epilogue missing)");
    }
  }
  if (out.pos != size) {
    return data_loss("zstd frame holds " + std::to_string(out.pos) + " bytes, expected " + std::to_string(size));
  }
  if (in.pos != in.size) {
    return data_loss(std::to_string(in.size - in.pos) + " trailing bytes after the zstd frame");
  }
  return ok_status();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* codec_name(Codec codec) {
  switch (codec) {
    case Codec::kRaw: return "raw";
    case Codec::kZstd: return "zstd";
    case Codec::kZstdPlanes: return "zstd-planes";
  }
  return "?";
}

StatusOr<Codec> parse_codec(const std::string& name) {
  for (Codec c : {Codec::kRaw, Codec::kZstd, Codec::kZstdPlanes}) {
    if (name == codec_name(c)) return c;
  }
  return invalid_argument("unknown codec '" + name + "' (expected raw, zstd or zstd-planes)");
}

void split_byte_planes(const uint8_t* src, size_t size, int element_bytes, uint8_t* dst) {
  const size_t w = static_cast<size_t>(element_bytes);
  const size_t n = size / w;
  if (w == 2) {  // bf16/f16 (little-endian): high bytes to plane 0, low bytes to plane 1
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = static_cast<uint8_t>(v >> 8);
      dst[n + i] = static_cast<uint8_t>(v & 0xff);
    }
    return;
  }
  for (size_t p = 0; p < w; ++p) {
    const size_t byte = w - 1 - p;
    uint8_t* plane = dst + p * n;
    for (size_t i = 0; i < n; ++i) plane[i] = src[i * w + byte];
  }
}

void join_byte_planes(const uint8_t* src, size_t size, int element_bytes, uint8_t* dst) {
  const size_t w = static_cast<size_t>(element_bytes);
  const size_t n = size / w;
  if (w == 2) {  // bf16/f16, the common case: one 16-bit store per element (vectorises)
    const uint8_t* high = src;
    const uint8_t* low = src + n;
    for (size_t i = 0; i < n; ++i) {
      const uint16_t v = static_cast<uint16_t>(low[i] | (high[i] << 8));
      std::memcpy(dst + 2 * i, &v, 2);
    }
    return;
  }
  for (size_t p = 0; p < w; ++p) {
    const size_t byte = w - 1 - p;
    const uint8_t* plane = src + p * n;
    for (size_t i = 0; i < n; ++i) dst[i * w + byte] = plane[i];
  }
}

StatusOr<std::vector<uint8_t>> encode(Codec codec, std::span<const uint8_t> raw, int element_bytes,
                                      const CodecOptions& options) {
  MOE_RETURN_IF_ERROR(check_element_bytes(element_bytes));
  switch (codec) {
    case Codec::kRaw:
      return std::vector<uint8_t>(raw.begin(), raw.end());
    case Codec::kZstd:
      return zstd_compress(raw.data(), raw.size(), options);
    case Codec::kZstdPlanes: {
      if (raw.size() % static_cast<size_t>(element_bytes) != 0) {
        return invalid_argument("zstd-planes: " + std::to_string(raw.size()) + " bytes is not a multiple of element_bytes " +
                                std::to_string(element_bytes));
      }
      std::vector<uint8_t> planes(raw.size());
      if (!raw.empty()) split_byte_planes(raw.data(), raw.size(), element_bytes, planes.data());
      return zstd_compress(planes.data(), planes.size(), options);
    }
  }
  return invalid_argument("unknown codec " + std::to_string(static_cast<int>(codec)));
}

Status decode(Codec codec, std::span<const uint8_t> stored, int element_bytes, std::span<uint8_t> raw) {
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4) {
    return data_loss("codec element_bytes " + std::to_string(element_bytes) + " (expected 1, 2 or 4)");
  }
  switch (codec) {
    case Codec::kRaw:
      if (stored.size() != raw.size()) {
        return data_loss("raw payload of " + std::to_string(stored.size()) + " bytes, expected " +
                         std::to_string(raw.size()));
      }
      if (!raw.empty()) std::memcpy(raw.data(), stored.data(), raw.size());
      return ok_status();
    case Codec::kZstd:
      return zstd_decompress(stored, raw.data(), raw.size());
    case Codec::kZstdPlanes: {
      if (raw.size() % static_cast<size_t>(element_bytes) != 0) {
        return data_loss("zstd-planes: " + std::to_string(raw.size()) + " bytes is not a multiple of element_bytes " +
                         std::to_string(element_bytes));
      }
      // A scratch buffer per thread, kept: a fresh one per shard would be mapped and
      // page-faulted in each time (malloc serves large blocks by mmap).
      thread_local std::unique_ptr<uint8_t[]> planes;
      thread_local size_t planes_capacity = 0;
      if (planes_capacity < raw.size()) {
        planes.reset(new uint8_t[raw.size()]);  // no zero fill
        planes_capacity = raw.size();
      }
      MOE_RETURN_IF_ERROR(zstd_decompress(stored, planes.get(), raw.size()));
      if (!raw.empty()) join_byte_planes(planes.get(), raw.size(), element_bytes, raw.data());
      return ok_status();
    }
  }
  return data_loss("unknown codec " + std::to_string(static_cast<int>(codec)));
}

StatusOr<std::vector<uint8_t>> encode_best(std::span<const uint8_t> raw, int element_bytes,
                                           const CodecOptions& options, Codec* chosen,
                                           std::vector<CodecTrial>* trials) {
  MOE_RETURN_IF_ERROR(check_element_bytes(element_bytes));
  std::vector<Codec> candidates = {Codec::kZstd};
  if (element_bytes == 2 && raw.size() % 2 == 0) candidates.push_back(Codec::kZstdPlanes);
  std::vector<uint8_t> best;
  Codec best_codec = Codec::kRaw;
  for (Codec c : candidates) {
    auto t0 = std::chrono::steady_clock::now();
    MOE_ASSIGN_OR_RETURN(std::vector<uint8_t> out, encode(c, raw, element_bytes, options));
    if (trials != nullptr) trials->push_back(CodecTrial{c, out.size(), seconds_since(t0)});
    bool smaller = best_codec == Codec::kRaw ? out.size() < raw.size() : out.size() < best.size();
    if (smaller) {
      best = std::move(out);
      best_codec = c;
    }
  }
  if (chosen != nullptr) *chosen = best_codec;
  if (best_codec == Codec::kRaw) return std::vector<uint8_t>(raw.begin(), raw.end());
  return best;
}

}  // namespace moe
