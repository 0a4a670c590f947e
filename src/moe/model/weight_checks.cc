#include "moe/model/weight_checks.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cstring>
#include <mutex>
#include <thread>

#include "moe/model/finite_scan.h"
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

Status non_finite_weight_error(const ModelSource& source, const StoredTensor& t, int64_t index) {
  const DType dtype = t.dtype.value_or(DType::kF32);
  return Status(StatusCode::kDataLoss, "tensor '" + t.name + "' of " + source.location() + " holds " +
                                           non_finite_kind(t.data, index, dtype) + " at element " +
                                           std::to_string(index) + " (" + t.dtype_name + " " + t.shape_string() +
                                           "): the checkpoint is corrupt (skip this check with --skip-weight-check)");
}

Status check_weights_finite(const ModelSource& source, int threads, const std::unordered_set<const void*>& skip) {
  // Jobs of at most kChunkBytes of one tensor, so that threads share a few big tensors
  // (the embedding, lm_head) as well as many small ones.
  constexpr size_t kChunkBytes = size_t{8} << 20;
  struct Job {
    const StoredTensor* tensor;
    size_t first, count;  // elements
  };
  std::vector<Job> jobs;
  for (const TensorInfo& info : source.tensor_infos()) {
    const std::string& dtype = info.dtype_name;
    if (dtype != "F32" && dtype != "BF16" && dtype != "F16" && dtype != "F8_E4M3") continue;
    auto got = source.get(info.name);
    if (!got.ok()) continue;  // not loaded by this process (another rank's expert)
    const StoredTensor* t = got.value();
    if (!t->dtype || skip.count(t->data) > 0) continue;
    const size_t size = dtype_size(*t->dtype), n = t->nbytes / size, per_job = kChunkBytes / size;
    for (size_t first = 0; first < n; first += per_job) jobs.push_back({t, first, std::min(per_job, n - first)});
  }
  // The lowest job's error: the first bad element of the first bad tensor by name.
  return parallel_for(jobs.size(), std::max(1, threads), [&](size_t j) -> Status {
    const Job& job = jobs[j];
    const StoredTensor& t = *job.tensor;
    const size_t size = dtype_size(*t.dtype);
    const int64_t bad = find_non_finite(t.data + job.first * size, job.count, *t.dtype);
    if (bad < 0) return ok_status();
    return non_finite_weight_error(source, t, static_cast<int64_t>(job.first) + bad);
  });
}

}  // namespace moe
