#include "moe/kv/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <xxhash.h>

#include "moe/core/check.h"
#include "moe/core/logging.h"
#include "moe/tensor/dtype.h"

namespace moe {

static_assert(std::endian::native == std::endian::little, "the block file format is little-endian");

namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'K', 'V', 'B', '1', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 96;
constexpr size_t kHeaderChecksumAt = 88;
constexpr const char* kSuffix = ".kvb";
constexpr const char* kTempSuffix = ".kvb.tmp";
constexpr int32_t kMaxDTypeCode = static_cast<int32_t>(DType::kI8);
// Payload buffers kept for reuse, so put() copies into memory already faulted in.
constexpr size_t kMaxSpareBuffers = 8;

struct HashOf {
  size_t operator()(const KvBlockHash& h) const { return static_cast<size_t>(h.low ^ (h.high * 0x9E3779B97F4A7C15ull)); }
};

// The header's fields, in file order (see disk_tier.h).
struct Header {
  uint32_t version = kVersion;
  uint32_t header_bytes = kHeaderBytes;
  KvBlockLayout layout;
  KvBlockHash hash;
  uint64_t num_tokens = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

template <typename T>
void put_at(uint8_t* buf, size_t offset, T v) {
  std::memcpy(buf + offset, &v, sizeof v);
}
template <typename T>
T get_at(const uint8_t* buf, size_t offset) {
  T v;
  std::memcpy(&v, buf + offset, sizeof v);
  return v;
}

void encode_header(const Header& h, uint8_t* buf) {
  std::memset(buf, 0, kHeaderBytes);
  std::memcpy(buf, kMagic, sizeof kMagic);
  put_at(buf, 8, h.version);
  put_at(buf, 12, h.header_bytes);
  put_at(buf, 16, h.layout.model_fingerprint);
  put_at(buf, 24, h.layout.num_layers);
  put_at(buf, 28, h.layout.num_kv_heads);
  put_at(buf, 32, h.layout.head_dim);
  put_at(buf, 36, h.layout.v_head_dim);
  put_at(buf, 40, h.layout.block_size);
  put_at(buf, 44, h.layout.dtype);
  put_at(buf, 48, h.hash.low);
  put_at(buf, 56, h.hash.high);
  put_at(buf, 64, h.num_tokens);
  put_at(buf, 72, h.payload_bytes);
  put_at(buf, 80, h.payload_checksum);
  put_at(buf, kHeaderChecksumAt, static_cast<uint64_t>(XXH3_64bits(buf, kHeaderChecksumAt)));
}

Header decode_header(const uint8_t* buf) {
  Header h;
  h.version = get_at<uint32_t>(buf, 8);
  h.header_bytes = get_at<uint32_t>(buf, 12);
  h.layout.model_fingerprint = get_at<uint64_t>(buf, 16);
  h.layout.num_layers = get_at<int32_t>(buf, 24);
  h.layout.num_kv_heads = get_at<int32_t>(buf, 28);
  h.layout.head_dim = get_at<int32_t>(buf, 32);
  h.layout.v_head_dim = get_at<int32_t>(buf, 36);
  h.layout.block_size = get_at<int32_t>(buf, 40);
  h.layout.dtype = get_at<int32_t>(buf, 44);
  h.hash.low = get_at<uint64_t>(buf, 48);
  h.hash.high = get_at<uint64_t>(buf, 56);
  h.num_tokens = get_at<uint64_t>(buf, 64);
  h.payload_bytes = get_at<uint64_t>(buf, 72);
  h.payload_checksum = get_at<uint64_t>(buf, 80);
  return h;
}

// XXH3-64 of the token ids, then the payload.
uint64_t payload_checksum(std::span<const int32_t> tokens, std::span<const uint8_t> payload) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  MOE_CHECK(state != nullptr);
  XXH3_64bits_reset(state.get());
  XXH3_64bits_update(state.get(), tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(state.get(), payload.data(), payload.size());
  return XXH3_64bits_digest(state.get());
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// "<32 lowercase hex>.kvb" -> its hash.
bool parse_block_name(const std::string& name, KvBlockHash* hash) {
  if (name.size() != 32 + std::strlen(kSuffix) || !ends_with(name, kSuffix)) return false;
  std::string_view hex(name.data(), 32);
  if (!std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) return false;
  auto parsed = Hash128::parse(hex);
  if (!parsed.ok()) return false;
  *hash = parsed.value();
  return true;
}

// Reads exactly `size` bytes at `offset`; false on a short read or an error.
bool read_exact(int fd, void* dst, size_t size, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

enum class ReadOutcome { kOk, kVanished, kCorrupt, kForeign };

struct ReadResult {
  ReadOutcome outcome = ReadOutcome::kOk;
  std::string reason;
};

ReadResult fail(ReadOutcome o, std::string reason) { return {o, std::move(reason)}; }

// Reads and verifies one block file (see disk_tier.h for the checks and their order).
ReadResult read_block_file(const std::string& path, const KvBlockLayout& layout, const KvBlockHash& hash,
                           std::span<const int32_t> tokens, std::span<uint8_t> out) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return fail(ReadOutcome::kVanished, "file is gone");
    return fail(ReadOutcome::kForeign, std::string("cannot open: ") + std::strerror(err));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return fail(ReadOutcome::kForeign, std::string("cannot stat: ") + std::strerror(errno));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);

  uint8_t buf[kHeaderBytes];
  if (file_size < kHeaderBytes || !read_exact(fd, buf, kHeaderBytes, 0)) {
    return fail(ReadOutcome::kCorrupt, "truncated header (" + std::to_string(file_size) + " bytes)");
  }
  if (std::memcmp(buf, kMagic, sizeof kMagic) != 0) return fail(ReadOutcome::kCorrupt, "bad magic");
  const Header h = decode_header(buf);
  if (h.version != kVersion) {
    return fail(ReadOutcome::kForeign, "format version " + std::to_string(h.version) + ", expected " + std::to_string(kVersion));
  }
  if (get_at<uint64_t>(buf, kHeaderChecksumAt) != XXH3_64bits(buf, kHeaderChecksumAt)) {
    return fail(ReadOutcome::kCorrupt, "header checksum mismatch");
  }
  if (h.header_bytes != kHeaderBytes) return fail(ReadOutcome::kCorrupt, "header size " + std::to_string(h.header_bytes));
  if (h.layout.model_fingerprint != layout.model_fingerprint) {
    return fail(ReadOutcome::kForeign, "written for another model (fingerprint differs)");
  }
  if (!(h.layout == layout)) {
    return fail(ReadOutcome::kForeign, "written with another layout (layers, heads, dims, block_size or dtype differ)");
  }
  if (!(h.hash == hash)) return fail(ReadOutcome::kCorrupt, "holds block " + h.hash.hex() + ", not its name's");
  if (h.num_tokens != tokens.size() || h.payload_bytes != out.size()) {
    return fail(ReadOutcome::kCorrupt, "token count or payload size disagrees with its layout");
  }
  const uint64_t tokens_bytes = h.num_tokens * sizeof(int32_t);
  const uint64_t expected = kHeaderBytes + tokens_bytes + h.payload_bytes;
  if (file_size != expected) {
    return fail(ReadOutcome::kCorrupt,
                "size " + std::to_string(file_size) + " bytes, expected " + std::to_string(expected) + " (truncated?)");
  }
  std::vector<int32_t> stored(h.num_tokens);
  if (!read_exact(fd, stored.data(), tokens_bytes, kHeaderBytes) ||
      !read_exact(fd, out.data(), out.size(), kHeaderBytes + tokens_bytes)) {
    return fail(ReadOutcome::kCorrupt, "short read");
  }
  if (payload_checksum(stored, out) != h.payload_checksum) return fail(ReadOutcome::kCorrupt, "payload checksum mismatch");
  if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) {
    return fail(ReadOutcome::kCorrupt, "stored token ids differ from the requested ones");
  }
  return {};
}

Status check_layout(const KvBlockLayout& l) {
  if (l.num_layers <= 0 || l.num_kv_heads <= 0 || l.head_dim <= 0 || l.v_head_dim < 0 || l.block_size <= 0) {
    return invalid_argument("KV disk tier: bad block layout (num_layers " + std::to_string(l.num_layers) + ", num_kv_heads " +
                            std::to_string(l.num_kv_heads) + ", head_dim " + std::to_string(l.head_dim) + ", v_head_dim " +
                            std::to_string(l.v_head_dim) + ", block_size " + std::to_string(l.block_size) + ")");
  }
  if (l.dtype < 0 || l.dtype > kMaxDTypeCode) {
    return invalid_argument("KV disk tier: unknown KV dtype code " + std::to_string(l.dtype));
  }
  return ok_status();
}

}  // namespace

uint64_t KvBlockLayout::block_bytes() const {
  return static_cast<uint64_t>(num_layers) * static_cast<uint64_t>(num_kv_heads) * static_cast<uint64_t>(block_size) *
         static_cast<uint64_t>(head_dim + v_head_dim) * dtype_size(static_cast<DType>(dtype));
}

uint64_t KvBlockLayout::file_bytes() const {
  return kHeaderBytes + static_cast<uint64_t>(block_size) * sizeof(int32_t) + block_bytes();
}

struct KvDiskTier::State {
  KvDiskTierOptions options;
  KvBlockLayout layout;
  StoreEnv* env = nullptr;

  struct Job {
    KvBlockHash hash;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> bytes;
  };
  struct Entry {
    uint64_t file_bytes = 0;
    uint64_t generation = 0;
    std::list<KvBlockHash>::iterator lru;
  };

  mutable std::mutex mu;
  std::condition_variable work_cv;  // the writer waits for jobs
  std::condition_variable idle_cv;  // flush() waits for the writer
  std::deque<Job> queue;
  std::unordered_set<KvBlockHash, HashOf> queued;  // in `queue` or being written
  bool in_flight = false;
  bool stop = false;
  bool failing = false;  // the last write failed (log only the first of a run)
  std::vector<std::vector<uint8_t>> spare;  // payload buffers of written jobs
  std::unordered_map<KvBlockHash, Entry, HashOf> index;
  std::list<KvBlockHash> lru;  // front: least recently used
  uint64_t next_generation = 1;
  KvDiskTierCounters counters;
  std::thread writer;

  std::string path_of(const KvBlockHash& h) const { return options.dir + "/" + h.hex() + kSuffix; }

  // Under mu.
  void insert(const KvBlockHash& h, uint64_t file_bytes) {
    lru.push_back(h);
    index[h] = Entry{file_bytes, next_generation++, std::prev(lru.end())};
    counters.resident_blocks += 1;
    counters.resident_bytes += static_cast<int64_t>(file_bytes);
  }
  void erase(std::unordered_map<KvBlockHash, Entry, HashOf>::iterator it) {
    lru.erase(it->second.lru);
    counters.resident_blocks -= 1;
    counters.resident_bytes -= static_cast<int64_t>(it->second.file_bytes);
    index.erase(it);
  }
  void touch(Entry& e) { lru.splice(lru.end(), lru, e.lru); }
  // Takes least recently used files out of the index while over max_bytes; returns their
  // paths (the caller deletes them outside mu).
  std::vector<std::string> take_victims() {
    std::vector<std::string> victims;
    while (static_cast<uint64_t>(counters.resident_bytes) > options.max_bytes && !lru.empty()) {
      auto it = index.find(lru.front());
      MOE_CHECK(it != index.end());
      victims.push_back(path_of(it->first));
      erase(it);
      counters.evictions += 1;
    }
    return victims;
  }
  void remove_files(const std::vector<std::string>& paths) {
    for (const auto& p : paths) {
      Status st = env->remove_file(p);
      if (!st.ok() && st.code() != StatusCode::kNotFound) MOE_LOG_WARN("KV disk tier: {}", st.message());
    }
  }

  // temp file, append, fsync, rename, fsync of the directory. Leaves no file on error.
  Status write_block(const Job& job) {
    Header h;
    h.layout = layout;
    h.hash = job.hash;
    h.num_tokens = job.tokens.size();
    h.payload_bytes = job.bytes.size();
    h.payload_checksum = payload_checksum(job.tokens, job.bytes);
    uint8_t header[kHeaderBytes];
    encode_header(h, header);
    const std::string final_path = path_of(job.hash);
    const std::string temp_path = options.dir + "/" + job.hash.hex() + kTempSuffix;
    auto file = env->new_writable_file(temp_path);
    if (!file.ok()) return file.status();
    Status st = file.value()->append(header, kHeaderBytes);
    if (st.ok()) st = file.value()->append(job.tokens.data(), job.tokens.size() * sizeof(int32_t));
    if (st.ok()) st = file.value()->append(job.bytes.data(), job.bytes.size());
    if (st.ok() && options.sync) st = file.value()->sync();
    if (st.ok()) st = file.value()->close();
    file.value().reset();
    if (st.ok()) st = env->rename_file(temp_path, final_path);
    if (!st.ok()) {
      (void)env->remove_file(temp_path);
      return st;
    }
    if (options.sync) (void)env->sync_dir(options.dir);  // best effort: the block is a cache
    return ok_status();
  }

  void writer_loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stop, and everything queued is written
      Job job = std::move(queue.front());
      queue.pop_front();
      in_flight = true;
      lock.unlock();

      Status st = write_block(job);
      const uint64_t file_bytes = layout.file_bytes();
      std::vector<std::string> victims;
      bool log_failure = false;
      lock.lock();
      queued.erase(job.hash);
      if (spare.size() < std::min<size_t>(kMaxSpareBuffers, static_cast<size_t>(options.max_queued_blocks))) {
        spare.push_back(std::move(job.bytes));
      }
      if (st.ok()) {
        failing = false;
        if (index.find(job.hash) == index.end()) insert(job.hash, file_bytes);
        counters.writes += 1;
        counters.write_bytes += static_cast<int64_t>(file_bytes);
        victims = take_victims();
      } else {
        log_failure = !failing;
        failing = true;
        counters.write_failures += 1;
      }
      lock.unlock();
      if (log_failure) MOE_LOG_WARN("KV disk tier: cannot write block {} (counting further failures silently until a write succeeds): {}", job.hash.hex(), st.message());
      remove_files(victims);
      lock.lock();
      in_flight = false;
      if (queue.empty()) idle_cv.notify_all();
    }
  }
};

KvDiskTier::KvDiskTier(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<KvDiskTier>> KvDiskTier::open(const KvDiskTierOptions& options, const KvBlockLayout& layout) {
  MOE_RETURN_IF_ERROR(check_layout(layout));
  if (options.dir.empty()) return invalid_argument("KV disk tier: no directory");
  if (options.max_bytes == 0) return invalid_argument("KV disk tier " + options.dir + ": max_bytes must be > 0");
  if (options.max_queued_blocks <= 0) return invalid_argument("KV disk tier " + options.dir + ": max_queued_blocks must be > 0");

  auto state = std::make_unique<State>();
  state->options = options;
  state->layout = layout;
  state->env = options.env ? options.env : &default_store_env();
  StoreEnv& env = *state->env;
  const std::string& dir = options.dir;
  auto unusable = [&](const Status& st) {
    return failed_precondition("KV disk tier directory " + dir + " is unusable: " + st.message());
  };
  if (Status st = env.create_dirs(dir); !st.ok()) return unusable(st);
  {
    // Writable? (create_dirs succeeds on an existing read-only directory.)
    const std::string probe = dir + "/.kv_disk_tier_probe";
    auto f = env.new_writable_file(probe);
    if (!f.ok()) return unusable(f.status());
    Status st = f.value()->close();
    f.value().reset();
    (void)env.remove_file(probe);
    if (!st.ok()) return unusable(st);
  }
  auto names = env.list_dir(dir);
  if (!names.ok()) return unusable(names.status());

  struct Found {
    int64_t mtime_ns;
    std::string name;
    KvBlockHash hash;
    uint64_t bytes;
  };
  std::vector<Found> found;
  for (const std::string& name : names.value()) {
    const std::string path = dir + "/" + name;
    if (ends_with(name, kTempSuffix)) {
      (void)env.remove_file(path);  // a write that a crash interrupted
      continue;
    }
    KvBlockHash hash;
    if (!parse_block_name(name, &hash)) continue;  // not ours: left alone
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    found.push_back({static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, name, hash,
                     static_cast<uint64_t>(st.st_size)});
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name; });
  for (const Found& f : found) state->insert(f.hash, f.bytes);
  state->remove_files(state->take_victims());
  if (!found.empty()) {
    MOE_LOG_INFO("KV disk tier {}: {} block files ({} bytes) found", dir, state->counters.resident_blocks,
                 state->counters.resident_bytes);
  }

  State* s = state.get();
  s->writer = std::thread([s] { s->writer_loop(); });
  return std::unique_ptr<KvDiskTier>(new KvDiskTier(std::move(state)));
}

KvDiskTier::~KvDiskTier() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  state_->writer.join();
}

void KvDiskTier::put(const KvBlockHash& hash, std::span<const int32_t> tokens, std::span<const uint8_t> bytes) {
  State& s = *state_;
  MOE_CHECK(tokens.size() == static_cast<size_t>(s.layout.block_size));
  MOE_CHECK(bytes.size() == s.layout.block_bytes());
  std::vector<uint8_t> buffer;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (auto it = s.index.find(hash); it != s.index.end()) {
      s.touch(it->second);
      return;
    }
    if (s.queued.count(hash) != 0) return;
    if (static_cast<int64_t>(s.queue.size()) >= s.options.max_queued_blocks) {
      s.counters.dropped += 1;
      return;
    }
    s.queued.insert(hash);  // reserved: the copy below is made outside the lock
    if (!s.spare.empty()) {
      buffer = std::move(s.spare.back());
      s.spare.pop_back();
    }
  }
  buffer.assign(bytes.begin(), bytes.end());
  State::Job job{hash, std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(buffer)};
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.queue.push_back(std::move(job));
  }
  s.work_cv.notify_one();
}

bool KvDiskTier::contains(const KvBlockHash& hash) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->index.count(hash) != 0;
}

bool KvDiskTier::get(const KvBlockHash& hash, std::span<const int32_t> tokens, std::span<uint8_t> out) {
  State& s = *state_;
  MOE_CHECK(tokens.size() == static_cast<size_t>(s.layout.block_size));
  MOE_CHECK(out.size() == s.layout.block_bytes());
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.index.find(hash);
    if (it == s.index.end()) {
      s.counters.misses += 1;
      return false;
    }
    generation = it->second.generation;
    s.touch(it->second);
  }
  const std::string path = s.path_of(hash);
  const ReadResult r = read_block_file(path, s.layout, hash, tokens, out);
  bool dropped_entry = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (r.outcome == ReadOutcome::kOk) {
      s.counters.hits += 1;
      s.counters.hit_bytes += static_cast<int64_t>(out.size());
      return true;
    }
    auto it = s.index.find(hash);
    if (it != s.index.end() && it->second.generation == generation) {
      s.erase(it);
      dropped_entry = true;
    }
    if (r.outcome == ReadOutcome::kVanished) {
      s.counters.misses += 1;
      return false;
    }
    s.counters.rejects += 1;
  }
  if (dropped_entry) {
    const bool remove = r.outcome == ReadOutcome::kCorrupt;
    MOE_LOG_WARN("KV disk tier: rejected {}: {}{}", path, r.reason, remove ? " (deleted)" : " (left on disk, no longer used)");
    if (remove) s.remove_files({path});
  }
  return false;
}

void KvDiskTier::flush() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->idle_cv.wait(lock, [&] { return state_->queue.empty() && !state_->in_flight; });
}

KvDiskTierCounters KvDiskTier::counters() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counters;
}

const KvBlockLayout& KvDiskTier::layout() const { return state_->layout; }
const std::string& KvDiskTier::dir() const { return state_->options.dir; }

}  // namespace moe
