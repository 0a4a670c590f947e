#include "moe/model/weight_checks.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstring>
#include <mutex>
#include <thread>

#include "moe/model/weight_names.h"

namespace moe {
namespace {

// Reads the decimal number at s[*pos..] followed by '.', advancing past the dot.
bool parse_index(const std::string& s, size_t* pos, int* out) {
  size_t i = *pos;
  int64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - *pos < 9) v = v * 10 + (s[i++] - '0');
  if (i == *pos || i >= s.size() || s[i] != '.') return false;
  *out = static_cast<int>(v);
  *pos = i + 1;
  return true;
}

// The expert (layer, expert) a tensor belongs to, or false.
bool expert_of(const std::string& name, const WeightNames& n, int* layer, int* expert) {
  if (name.compare(0, n.layer_prefix.size(), n.layer_prefix) != 0) return false;
  size_t pos = n.layer_prefix.size();
  if (!parse_index(name, &pos, layer)) return false;
  if (n.expert_prefix.empty() || name.compare(pos, n.expert_prefix.size(), n.expert_prefix) != 0) return false;
  pos += n.expert_prefix.size();
  return parse_index(name, &pos, expert);
}

// Runs fn(i) for i in [0, n) on `threads` threads; the first error wins.
Status parallel_for(size_t n, int threads, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  size_t first_index = n;
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      Status st = fn(i);
      if (st.ok()) continue;
      std::lock_guard<std::mutex> lock(mu);
      if (i < first_index) {  // deterministic: the lowest index's error
        first_index = i;
        first = std::move(st);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && static_cast<size_t>(t) < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return first;
}

}  // namespace

StatusOr<std::vector<ExpertDigest>> expert_digests(const ModelSource& source, const ModelConfig& config, int threads) {
  const int num_experts = config.router.num_experts;
  const int layers = config.num_hidden_layers;
  std::vector<ExpertDigest> out(static_cast<size_t>(std::max(0, num_experts) * std::max(0, layers)));
  if (out.empty()) return out;
  // The tensors of each expert still to hash (sorted by name: tensor_infos() is).
  std::vector<std::vector<std::string>> names(out.size());
  std::vector<bool> recorded(out.size(), false);
  for (int l = 0; l < layers; ++l) {
    if (!config.is_moe_layer(l)) continue;
    for (int e = 0; e < num_experts; ++e) {
      const size_t i = static_cast<size_t>(l * num_experts + e);
      if (auto d = source.recorded_expert_digest(l, e)) {
        out[i] = *d;
        recorded[i] = true;
      }
    }
  }
  const WeightNames wn = weight_names_for(config.family);
  for (const TensorInfo& t : source.tensor_infos()) {
    int l = -1, e = -1;
    if (!expert_of(t.name, wn, &l, &e) || l >= layers || e >= num_experts || !config.is_moe_layer(l)) continue;
    const size_t i = static_cast<size_t>(l * num_experts + e);
    if (!recorded[i]) names[i].push_back(t.name);
  }
  MOE_RETURN_IF_ERROR(parallel_for(out.size(), std::max(1, threads), [&](size_t i) -> Status {
    if (recorded[i] || names[i].empty()) return ok_status();
    XXH3_state_t* state = XXH3_createState();
    XXH3_128bits_reset(state);
    Status st;
    for (const std::string& name : names[i]) {
      auto t = source.get(name);
      if (!t.ok()) {
        st = t.status().with_context("hashing expert weights");
        break;
      }
      XXH3_128bits_update(state, t.value()->data, t.value()->nbytes);
    }
    const XXH128_hash_t h = XXH3_128bits_digest(state);
    XXH3_freeState(state);
    out[i] = ExpertDigest{h.high64, h.low64};
    return st;
  }));
  return out;
}

namespace {

// Index of the first element whose `exp_mask` bits are all ones (non-finite; for
// F8_E4M3, mask 0x7F: NaN), or -1. `Bits` is the element's unsigned type. Scans 64-bit
// words, all lanes at once (SWAR: a lane of x = (w & M) ^ M is zero exactly where the
// element is non-finite, and (x - L) & ~x & H is non-zero iff some lane of x is zero);
// the compiler vectorises the word loop. Only a block with a hit is looked at closely.
template <typename Bits>
int64_t first_non_finite(const uint8_t* data, size_t count, Bits exp_mask) {
  constexpr size_t kLanes = 8 / sizeof(Bits);
  uint64_t lanes_one = 0, lanes_high = 0, mask = 0;
  for (size_t k = 0; k < kLanes; ++k) {
    lanes_one |= uint64_t{1} << (k * 8 * sizeof(Bits));
    lanes_high |= uint64_t{1} << (k * 8 * sizeof(Bits) + 8 * sizeof(Bits) - 1);
    mask |= uint64_t{exp_mask} << (k * 8 * sizeof(Bits));
  }
  constexpr size_t kBlockWords = 1024;
  const size_t words = count / kLanes;
  auto exact = [&](size_t from, size_t to) -> int64_t {
    for (size_t i = from; i < to; ++i) {
      Bits v;
      std::memcpy(&v, data + i * sizeof(Bits), sizeof(Bits));
      if ((v & exp_mask) == exp_mask) return static_cast<int64_t>(i);
    }
    return -1;
  };
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
      const int64_t at = exact(b * kLanes, end * kLanes);
      if (at >= 0) return at;
    }
  }
  return exact(words * kLanes, count);
}

// "NaN" or "Inf" for the element at `i` (exponent all ones; mantissa zero = Inf).
template <typename Bits>
const char* kind_of(const uint8_t* data, int64_t i, Bits exp_mask) {
  Bits v;
  std::memcpy(&v, data + static_cast<size_t>(i) * sizeof(Bits), sizeof(Bits));
  const Bits mant = static_cast<Bits>(~exp_mask & static_cast<Bits>(~(Bits(1) << (sizeof(Bits) * 8 - 1))));
  return (v & mant) == 0 ? "Inf" : "NaN";
}

}  // namespace

Status check_weights_finite(const ModelSource& source, int threads) {
  const std::vector<TensorInfo> infos = source.tensor_infos();
  return parallel_for(infos.size(), std::max(1, threads), [&](size_t i) -> Status {
    const std::string& dtype = infos[i].dtype_name;
    if (dtype != "F32" && dtype != "BF16" && dtype != "F16" && dtype != "F8_E4M3") return ok_status();
    auto got = source.get(infos[i].name);
    if (!got.ok()) return ok_status();  // not loaded by this process (another rank's expert)
    const StoredTensor& t = *got.value();
    int64_t bad = -1;
    const char* kind = "NaN";
    if (dtype == "F32") {
      bad = first_non_finite<uint32_t>(t.data, t.nbytes / 4, 0x7F800000u);
      if (bad >= 0) kind = kind_of<uint32_t>(t.data, bad, 0x7F800000u);
    } else if (dtype == "BF16") {
      bad = first_non_finite<uint16_t>(t.data, t.nbytes / 2, 0x7F80u);
      if (bad >= 0) kind = kind_of<uint16_t>(t.data, bad, 0x7F80u);
    } else if (dtype == "F16") {
      bad = first_non_finite<uint16_t>(t.data, t.nbytes / 2, 0x7C00u);
      if (bad >= 0) kind = kind_of<uint16_t>(t.data, bad, 0x7C00u);
    } else {
      bad = first_non_finite<uint8_t>(t.data, t.nbytes, 0x7F);  // S.1111.111 is NaN; no Inf
    }
    if (bad < 0) return ok_status();
    return Status(StatusCode::kDataLoss, "tensor '" + t.name + "' of " + source.location() + " holds " + kind +
                                             " at element " + std::to_string(bad) + " (" + dtype + " " +
                                             t.shape_string() + "): the checkpoint is corrupt (skip this check "
                                             "with --skip-weight-check)");
  });
}

}  // namespace moe
