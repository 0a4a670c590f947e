#include "moe/model/weights_relocate.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>
#include <utility>

#include "moe/model/finite_scan.h"

namespace moe {
namespace {

// A range of one matrix (or its scales) to copy: at most kJobBytes, so that threads
// share big matrices too.
struct CopyJob {
  const uint8_t* src;
  uint8_t* dst;
  size_t bytes;
  DType dtype;
  const void* origin;   // the matrix's (or scales') first byte before the copy
  size_t origin_index;  // element of `origin` at which `src` starts
};
constexpr size_t kJobBytes = size_t{4} << 20;

// Visits every matrix once (dedupe by data, scale, size): with an arena, allocates its
// copy, repoints it and plans the copy jobs; without (arena == nullptr), only counts its
// bytes and lists its storage.
class Relocator {
 public:
  explicit Relocator(HugePageArena* arena) : arena_(arena) {}

  void move(Weight2D* w) {
    if (w->data == nullptr) return;
    const Key key{w->data, w->scale, w->data_bytes()};
    if (auto it = done_.find(key); it != done_.end()) {
      if (arena_ == nullptr) return;
      w->data = it->second.first;
      w->scale = it->second.second;
      return;
    }
    sources_.push_back(w->data);
    if (w->has_scale()) sources_.push_back(w->scale);
    if (arena_ == nullptr) {
      bytes_ += w->bytes();
      done_[key] = {w->data, w->scale};
      return;
    }
    const void* data = plan(w->data, w->data_bytes(), w->dtype);
    const void* scale = w->has_scale() ? plan(w->scale, w->scale_bytes(), w->scale_dtype) : nullptr;
    done_[key] = {data, scale};
    w->data = data;
    w->scale = scale;
  }
  void move(ExpertWeights* e) {
    move(&e->w1);
    move(&e->w2);
    move(&e->w3);
  }
  size_t bytes() const { return bytes_; }
  const std::vector<CopyJob>& jobs() const { return jobs_; }
  std::vector<const void*> sources() const { return sources_; }

 private:
  const void* plan(const void* from, size_t bytes, DType dtype) {
    uint8_t* to = arena_->allocate(bytes);
    const auto* src = static_cast<const uint8_t*>(from);
    const size_t elem = dtype_size(dtype);
    const size_t step = kJobBytes / elem * elem;
    for (size_t off = 0; off < bytes; off += step) {
      jobs_.push_back({src + off, to + off, std::min(step, bytes - off), dtype, from, off / elem});
    }
    bytes_ += bytes;
    return to;
  }

  HugePageArena* arena_;
  using Key = std::tuple<const void*, const void*, size_t>;  // data, scale, data bytes
  std::map<Key, std::pair<const void*, const void*>> done_;
  std::vector<CopyJob> jobs_;
  std::vector<const void*> sources_;
  size_t bytes_ = 0;
};

void visit(ModelWeights* weights, Relocator* r) {
  r->move(&weights->embed_tokens);
  for (LayerWeights& l : weights->layers) {
    r->move(&l.mla.q_a_proj);
    r->move(&l.mla.q_b_proj);
    r->move(&l.mla.q_proj);
    r->move(&l.mla.kv_a_proj);
    r->move(&l.mla.kv_b_proj);
    r->move(&l.q_proj);
    r->move(&l.k_proj);
    r->move(&l.v_proj);
    r->move(&l.o_proj);
    r->move(&l.dense_mlp);
    r->move(&l.router);
    for (ExpertWeights& e : l.experts) {
      if (e.loaded) r->move(&e);
    }
    r->move(&l.shared_expert);
    r->move(&l.shared_expert_gate);
  }
  r->move(&weights->lm_head);
}

// Runs the jobs on `threads` threads; with `check`, copied by finite_scan.h's
// copy_finding_non_finite (read once), and the lowest job's first non-finite element is
// returned (every job is copied either way).
std::optional<NonFiniteWeight> run_jobs(const std::vector<CopyJob>& jobs, int threads, bool check) {
  std::atomic<size_t> next{0};
  std::vector<int64_t> bad(check ? jobs.size() : 0, -1);  // per job: first bad element in it
  auto work = [&] {
    for (size_t j = next++; j < jobs.size(); j = next++) {
      const CopyJob& job = jobs[j];
      if (check) {
        bad[j] = copy_finding_non_finite(job.dst, job.src, job.bytes / dtype_size(job.dtype), job.dtype);
      } else {
        std::memcpy(job.dst, job.src, job.bytes);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads && static_cast<size_t>(t) < jobs.size(); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t j = 0; j < bad.size(); ++j) {
    if (bad[j] >= 0) {
      return NonFiniteWeight{jobs[j].origin, jobs[j].dtype, static_cast<int64_t>(jobs[j].origin_index) + bad[j]};
    }
  }
  return std::nullopt;
}

}  // namespace

ArenaCopyResult copy_weights_to_arena(ModelWeights* weights, HugePageArena* arena, const ArenaCopyOptions& options) {
  Relocator r(arena);
  visit(weights, &r);
  ArenaCopyResult result;
  result.bytes = r.bytes();
  result.non_finite = run_jobs(r.jobs(), std::max(1, options.threads), options.check_finite);
  return result;
}

size_t copy_weights_to_arena(ModelWeights* weights, HugePageArena* arena) {
  return copy_weights_to_arena(weights, arena, ArenaCopyOptions{}).bytes;
}

size_t weights_bytes_to_copy(const ModelWeights& weights) {
  Relocator r(nullptr);  // no arena: counts, changes nothing
  visit(const_cast<ModelWeights*>(&weights), &r);
  return r.bytes();
}

std::vector<const void*> weights_copy_sources(const ModelWeights& weights) {
  Relocator r(nullptr);
  visit(const_cast<ModelWeights*>(&weights), &r);
  return r.sources();
}

}  // namespace moe
