#include "moe/store/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace moe {

namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'S', 'H', 'R', 'D', '1'};

void put_le(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_be64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * (7 - i)));
}
uint64_t get_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// An open shard file, closed on scope exit.
class ShardFd {
 public:
  ~ShardFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const std::string& path) {
    do {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) {
      int err = errno;
      if (err == ENOENT) return not_found("shard file " + path + " is missing");
      return internal_error("cannot open shard " + path + ": " + std::strerror(err));
    }
    struct stat st;
    if (::fstat(fd_, &st) != 0) return internal_error("cannot stat shard " + path + ": " + std::strerror(errno));
    size_ = static_cast<uint64_t>(st.st_size);
    return ok_status();
  }
  // Reads exactly `size` bytes at `offset`; DataLoss if the file ends first.
  Status read_at(const std::string& path, uint64_t offset, uint8_t* dst, size_t size) const {
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::pread(fd_, dst + done, size - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return internal_error("cannot read shard " + path + ": " + std::strerror(errno));
      }
      if (n == 0) {
        return data_loss("shard " + path + " is truncated: ended after " + std::to_string(offset + done) + " bytes");
      }
      done += static_cast<size_t>(n);
    }
    return ok_status();
  }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

StatusOr<ShardHeader> parse_header(const std::string& path, const uint8_t* h, uint64_t file_size) {
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    return data_loss("shard " + path + " has a bad magic (not a MOESHRD1 shard file)");
  }
  ShardHeader header;
  const uint64_t codec = get_le(h + 8, 4);
  if (codec > 2) return data_loss("shard " + path + " has an unknown codec " + std::to_string(codec));
  header.codec = static_cast<Codec>(codec);
  const uint64_t element_bytes = get_le(h + 12, 4);
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4) {
    return data_loss("shard " + path + " has a bad element_bytes " + std::to_string(element_bytes));
  }
  header.element_bytes = static_cast<int>(element_bytes);
  header.raw_bytes = get_le(h + 16, 8);
  header.stored_bytes = get_le(h + 24, 8);
  header.hash.high = get_be64(h + 32);
  header.hash.low = get_be64(h + 40);
  const uint64_t payload = file_size - kShardHeaderBytes;
  if (payload != header.stored_bytes) {
    return data_loss("shard " + path + " is " + (payload < header.stored_bytes ? "truncated" : "extended") + ": " +
                     std::to_string(payload) + " payload bytes, header says " + std::to_string(header.stored_bytes));
  }
  if (header.codec == Codec::kRaw && header.raw_bytes != header.stored_bytes) {
    return data_loss("shard " + path + " is raw but raw_bytes " + std::to_string(header.raw_bytes) +
                     " != stored_bytes " + std::to_string(header.stored_bytes));
  }
  return header;
}

StatusOr<ShardHeader> open_and_read_header(const std::string& path, ShardFd& fd) {
  MOE_RETURN_IF_ERROR(fd.open(path));
  if (fd.size() < kShardHeaderBytes) {
    return data_loss("shard " + path + " is truncated: " + std::to_string(fd.size()) + " bytes, less than its " +
                     std::to_string(kShardHeaderBytes) + "-byte header");
  }
  uint8_t h[kShardHeaderBytes];
  MOE_RETURN_IF_ERROR(fd.read_at(path, 0, h, sizeof(h)));
  return parse_header(path, h, fd.size());
}

}  // namespace

Status write_shard(WritableFile& file, const ShardHeader& header, std::span<const uint8_t> payload) {
  if (payload.size() != header.stored_bytes) {
    return invalid_argument("shard " + file.path() + ": payload of " + std::to_string(payload.size()) +
                            " bytes, header says stored_bytes " + std::to_string(header.stored_bytes));
  }
  uint8_t h[kShardHeaderBytes];
  std::memcpy(h, kMagic, sizeof(kMagic));
  put_le(h + 8, static_cast<uint64_t>(header.codec), 4);
  put_le(h + 12, static_cast<uint64_t>(header.element_bytes), 4);
  put_le(h + 16, header.raw_bytes, 8);
  put_le(h + 24, header.stored_bytes, 8);
  put_be64(h + 32, header.hash.high);
  put_be64(h + 40, header.hash.low);
  MOE_RETURN_IF_ERROR(file.append(h, sizeof(h)));
  if (!payload.empty()) MOE_RETURN_IF_ERROR(file.append(payload.data(), payload.size()));
  return ok_status();
}

StatusOr<ShardHeader> read_shard_header(const std::string& path) {
  ShardFd fd;
  return open_and_read_header(path, fd);
}

Status read_shard(const std::string& path, const Hash128& expected, std::span<uint8_t> raw) {
  ShardFd fd;
  MOE_ASSIGN_OR_RETURN(ShardHeader header, open_and_read_header(path, fd));
  if (header.raw_bytes != raw.size()) {
    return data_loss("shard " + path + " holds " + std::to_string(header.raw_bytes) + " raw bytes, expected " +
                     std::to_string(raw.size()));
  }
  if (header.hash != expected) {
    return data_loss("shard " + path + " hash mismatch: its header says " + header.hash.hex() + ", expected " +
                     expected.hex());
  }
  if (header.codec == Codec::kRaw) {
    MOE_RETURN_IF_ERROR(fd.read_at(path, kShardHeaderBytes, raw.data(), raw.size()));
  } else {
    // Per-thread scratch, kept between shards (see codec.cc's plane buffer).
    thread_local std::unique_ptr<uint8_t[]> scratch;
    thread_local size_t scratch_capacity = 0;
    if (scratch_capacity < header.stored_bytes) {
      scratch.reset(new uint8_t[header.stored_bytes]);
      scratch_capacity = header.stored_bytes;
    }
    std::span<const uint8_t> stored(scratch.get(), header.stored_bytes);
    MOE_RETURN_IF_ERROR(fd.read_at(path, kShardHeaderBytes, scratch.get(), header.stored_bytes));
    Status s = decode(header.codec, stored, header.element_bytes, raw);
    if (!s.ok()) return data_loss("shard " + path + " (" + codec_name(header.codec) + ") does not decode: " + s.message());
  }
  const Hash128 actual = hash_bytes(raw.data(), raw.size());
  if (actual != expected) {
    return data_loss("shard " + path + " hash mismatch: its bytes hash to " + actual.hex() + ", expected " +
                     expected.hex());
  }
  return ok_status();
}

}  // namespace moe
