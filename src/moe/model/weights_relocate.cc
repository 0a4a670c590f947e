#include "moe/model/weights_relocate.h"

#include <cstring>
#include <map>
#include <tuple>
#include <utility>

namespace moe {
namespace {

// Visits every matrix once (dedupe by data, scale, size); with an arena, copies and
// repoints it; without (arena == nullptr), only counts its bytes.
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
    if (arena_ == nullptr) {
      bytes_ += w->bytes();
      done_[key] = {w->data, w->scale};
      return;
    }
    uint8_t* data = arena_->allocate(w->data_bytes());
    std::memcpy(data, w->data, w->data_bytes());
    bytes_ += w->data_bytes();
    const void* scale = nullptr;
    if (w->has_scale()) {
      uint8_t* s = arena_->allocate(w->scale_bytes());
      std::memcpy(s, w->scale, w->scale_bytes());
      bytes_ += w->scale_bytes();
      scale = s;
    }
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

 private:
  HugePageArena* arena_;
  using Key = std::tuple<const void*, const void*, size_t>;  // data, scale, data bytes
  std::map<Key, std::pair<const void*, const void*>> done_;
  size_t bytes_ = 0;
};

}  // namespace

namespace {

size_t visit(ModelWeights* weights, HugePageArena* arena) {
  Relocator r(arena);
  r.move(&weights->embed_tokens);
  for (LayerWeights& l : weights->layers) {
    r.move(&l.mla.q_a_proj);
    r.move(&l.mla.q_b_proj);
    r.move(&l.mla.q_proj);
    r.move(&l.mla.kv_a_proj);
    r.move(&l.mla.kv_b_proj);
    r.move(&l.q_proj);
    r.move(&l.k_proj);
    r.move(&l.v_proj);
    r.move(&l.o_proj);
    r.move(&l.dense_mlp);
    r.move(&l.router);
    for (ExpertWeights& e : l.experts) {
      if (e.loaded) r.move(&e);
    }
    r.move(&l.shared_expert);
    r.move(&l.shared_expert_gate);
  }
  r.move(&weights->lm_head);
  return r.bytes();
}

}  // namespace

size_t copy_weights_to_arena(ModelWeights* weights, HugePageArena* arena) { return visit(weights, arena); }

size_t weights_bytes_to_copy(const ModelWeights& weights) {
  return visit(const_cast<ModelWeights*>(&weights), nullptr);  // nullptr arena: counts, changes nothing
}

}  // namespace moe
