#include "moe/transformer/fused_moe.h"

#include <cstring>
#include <string>

#include "moe/core/check.h"
#include "moe/ops/norm.h"

namespace moe {

struct FusedMoe::MicroBatch {
  enum class Phase { kIdle, kAttnRs, kMoe, kSharedAg, kSharedRs, kOutAg } phase = Phase::kIdle;
  int slot = 0;
  int64_t t0 = 0, n = 0;                 // rows [t0, t0 + n) of x
  std::vector<int64_t> shard_begin, shard_len;  // [tp] each TP rank's rows, relative to t0
  int64_t my_begin = 0, my_len = 0;
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<float> recv;     // [tp, my_len, hidden] reduce-scatter blocks
  std::vector<float> xs, hs;   // [my_len, hidden] residual shard, normed shard
  std::vector<float> moe_out;  // [my_len, hidden] routed experts' output
  std::vector<float> send;     // [tp, my_len, hidden] all-gather copies
  std::vector<float> h_all, y_all;  // [n, hidden] gathered h, shared expert partials
  std::unique_ptr<CommRequest> request;
};

namespace {

float* grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n) + 1) v.resize(static_cast<size_t>(n) + 1);
  return v.data();
}

Status wait(std::unique_ptr<CommRequest>& request) {
  Status st = request->wait();
  request.reset();
  return st;
}

// dst[count] += the T blocks of src ([T, count]), in ascending block order.
void add_blocks(const float* src, int64_t T, int64_t count, float* dst) {
  for (int64_t r = 0; r < T; ++r) {
    const float* s = src + r * count;
    for (int64_t i = 0; i < count; ++i) dst[i] += s[i];
  }
}

std::string layer_name(int layer) { return "layer " + std::to_string(layer); }

}  // namespace

FusedMoe::FusedMoe(const ModelConfig& config, const KernelOptions& kernel) : config_(config), kernel_(kernel) {
  mlp_ws_.kernel = kernel;
  for (int s = 0; s < 2; ++s) {
    mb_[s] = std::make_unique<MicroBatch>();
    mb_[s]->slot = s;
  }
}

FusedMoe::~FusedMoe() = default;

Status FusedMoe::validate(const FusedMoeCall& call, int64_t m) {
  const EpContext& ep = *call.ep;
  const std::string where = layer_name(call.layer);
  if (ep.comm == nullptr || ep.expert_tp == nullptr) {
    return failed_precondition(where + ": the fused MoE block needs an EP group and a TP group (EpContext::expert_tp)");
  }
  if (ep.options.capacity.policy != OverflowPolicy::kDropless) {
    return failed_precondition(where + ": the fused hybrid MoE block supports only the dropless policy (capacity '" +
                               std::string(overflow_policy_name(ep.options.capacity.policy)) +
                               "' counts a global token order the token shards do not have); use --fused-moe off");
  }
  if (ep.options.hierarchical) {
    return failed_precondition(where + ": the fused hybrid MoE block uses the flat all-to-all (one EP rank per node "
                               "leaves the hierarchical exchange nothing to forward); drop the hierarchical option");
  }
  // This rank's shards against the (local) config; announced in the check exchange so
  // that every rank of the TP group fails together.
  const LayerWeights& L = *call.weights;
  const int64_t hidden = config_.hidden_size, inter = config_.moe_intermediate_size;
  std::string bad;
  for (size_t e = 0; e < L.experts.size() && bad.empty(); ++e) {
    const ExpertWeights& w = L.experts[e];
    if (!w.loaded) continue;
    if (w.w1.rows != inter || w.w3.rows != inter || w.w2.cols != inter || w.w1.cols != hidden || w.w2.rows != hidden) {
      bad = where + ", expert " + std::to_string(e) + ": w1 [" + std::to_string(w.w1.rows) + ", " +
            std::to_string(w.w1.cols) + "], w2 [" + std::to_string(w.w2.rows) + ", " + std::to_string(w.w2.cols) +
            "] do not match the TP-local config (hidden_size " + std::to_string(hidden) + ", moe_intermediate_size " +
            std::to_string(inter) + " = the model's / --tp)";
    }
  }
  if (bad.empty() && L.shared_expert.loaded && L.shared_expert.w1.rows != config_.shared_expert_intermediate_size &&
      config_.shared_expert_intermediate_size > 0) {
    bad = where + ": the shared expert's w1 has " + std::to_string(L.shared_expert.w1.rows) +
          " rows but the TP-local config says shared_expert_intermediate_size " +
          std::to_string(config_.shared_expert_intermediate_size);
  }
  Communicator& tp = *ep.expert_tp;
  const size_t T = static_cast<size_t>(tp.size());
  check_send_ = {m, hidden, inter, bad.empty() ? 0 : 1};
  check_recv_.assign(T * check_send_.size(), 0);
  MOE_RETURN_IF_ERROR(tp.allgather(check_send_.data(), check_send_.size() * sizeof(int64_t), check_recv_.data()));
  if (!bad.empty()) return invalid_argument(bad);
  for (size_t r = 0; r < T; ++r) {
    const int64_t* peer = check_recv_.data() + r * check_send_.size();
    if (peer[3] != 0) {
      return invalid_argument(where + ": TP rank " + std::to_string(r) + " rejected its expert shards (see its error)");
    }
    if (peer[1] != hidden || peer[2] != inter) {
      return invalid_argument(where + ": the TP group's ranks disagree on the config: TP rank " + std::to_string(r) +
                              " has hidden_size " + std::to_string(peer[1]) + ", moe_intermediate_size " +
                              std::to_string(peer[2]) + ", TP rank " + std::to_string(tp.rank()) + " has " +
                              std::to_string(hidden) + ", " + std::to_string(inter));
    }
    if (peer[0] != m) {
      return invalid_argument(where + ": the TP group's ranks disagree on the number of tokens (TP rank " +
                              std::to_string(r) + ": " + std::to_string(peer[0]) + ", TP rank " +
                              std::to_string(tp.rank()) + ": " + std::to_string(m) +
                              "); the residual stream must be replicated in the TP group");
    }
  }
  return ok_status();
}

Status FusedMoe::begin(const FusedMoeCall& call, MicroBatch& mb) {
  Communicator& tp = *call.ep->expert_tp;
  const int64_t T = tp.size(), hidden = config_.hidden_size;
  const size_t row = static_cast<size_t>(hidden) * sizeof(float);
  mb.shard_begin.resize(static_cast<size_t>(T));
  mb.shard_len.resize(static_cast<size_t>(T));
  for (int64_t r = 0; r < T; ++r) {  // uneven shards: the first n % T ranks get one more row
    mb.shard_len[static_cast<size_t>(r)] = mb.n / T + (r < mb.n % T ? 1 : 0);
    mb.shard_begin[static_cast<size_t>(r)] = r * (mb.n / T) + std::min(r, mb.n % T);
  }
  mb.my_begin = mb.shard_begin[static_cast<size_t>(tp.rank())];
  mb.my_len = mb.shard_len[static_cast<size_t>(tp.rank())];
  // Reduce-scatter of the attention partials: block r = TP rank r's shard (contiguous rows).
  mb.send_bytes.resize(static_cast<size_t>(T));
  mb.recv_bytes.assign(static_cast<size_t>(T), static_cast<size_t>(mb.my_len) * row);
  for (int64_t r = 0; r < T; ++r) mb.send_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.shard_len[static_cast<size_t>(r)]) * row;
  float* recv = grow(mb.recv, T * mb.my_len * hidden);
  MOE_ASSIGN_OR_RETURN(mb.request, tp.ialltoallv(attn_ + mb.t0 * hidden, mb.send_bytes, recv, mb.recv_bytes));
  mb.phase = MicroBatch::Phase::kAttnRs;
  return ok_status();
}

StatusOr<bool> FusedMoe::step(const FusedMoeCall& call, MicroBatch& mb) {
  using Phase = MicroBatch::Phase;
  Communicator& tp = *call.ep->expert_tp;
  const int64_t T = tp.size(), hidden = config_.hidden_size;
  const size_t row = static_cast<size_t>(hidden) * sizeof(float);
  const int64_t count = mb.my_len * hidden;
  const LayerWeights& L = *call.weights;
  // The output all-gather: every rank's final shard into x's rows of this micro-batch.
  auto start_out_gather = [&]() -> Status {
    float* send = grow(mb.send, T * count);
    for (int64_t r = 0; r < T; ++r) {
      if (count > 0) std::memcpy(send + r * count, mb.xs.data(), static_cast<size_t>(count) * sizeof(float));
    }
    mb.send_bytes.assign(static_cast<size_t>(T), static_cast<size_t>(mb.my_len) * row);
    for (int64_t r = 0; r < T; ++r) mb.recv_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.shard_len[static_cast<size_t>(r)]) * row;
    MOE_ASSIGN_OR_RETURN(mb.request, tp.ialltoallv(send, mb.send_bytes, x_ + mb.t0 * hidden, mb.recv_bytes));
    mb.phase = Phase::kOutAg;
    return ok_status();
  };
  switch (mb.phase) {
    case Phase::kIdle:
      return internal_error("fused MoE: stepping an idle micro-batch");
    case Phase::kAttnRs: {
      MOE_RETURN_IF_ERROR(wait(mb.request));
      float* xs = grow(mb.xs, count);
      if (count > 0) std::memcpy(xs, x_ + (mb.t0 + mb.my_begin) * hidden, static_cast<size_t>(count) * sizeof(float));
      add_blocks(mb.recv.data(), T, count, xs);
      float* hs = grow(mb.hs, count);
      if (mb.my_len > 0) {
        rms_norm(TensorView::f32(xs, {mb.my_len, hidden}),
                 TensorView::f32(L.post_attention_norm.data(), {static_cast<int64_t>(L.post_attention_norm.size())}),
                 static_cast<float>(config_.rms_norm_eps), TensorView::f32(hs, {mb.my_len, hidden}));
      }
      float* moe_out = grow(mb.moe_out, count);
      const MoeLayerArgs args = MoeLayerArgs::f32(config_, L, hs, mb.my_len, moe_out);
      MOE_ASSIGN_OR_RETURN(const TopkRoutingView routing, ep_route_tokens(args, *call.ep, call.ep_ws));
      if (!counts_acc_.empty()) {
        const StepRoutingCounts& c = ep_last_routing_counts(*call.ep_ws);
        const size_t E = static_cast<size_t>(config_.router.num_experts);
        for (size_t e = 0; e < E && e < c.tokens_per_expert.size(); ++e) counts_acc_[e] += c.tokens_per_expert[e];
        counts_acc_[E] += c.global_tokens;
        counts_acc_[E + 1] += c.degraded_tokens;
        for (size_t e = 0; e < E && e < c.degraded_per_expert.size(); ++e) counts_acc_[E + 2 + e] += c.degraded_per_expert[e];
      }
      MOE_RETURN_IF_ERROR(ep_moe_begin(args, routing, EpStageCall{call.ep, call.ep_ws, mb.slot, call.timings}));
      mb.phase = Phase::kMoe;
      return false;
    }
    case Phase::kMoe: {
      MOE_ASSIGN_OR_RETURN(const bool done, ep_moe_step(EpStageCall{call.ep, call.ep_ws, mb.slot, call.timings}));
      if (!done) return false;
      if (L.shared_expert.loaded) {  // AG(h) in the node for the TP-split shared expert
        float* send = grow(mb.send, T * count);
        for (int64_t r = 0; r < T; ++r) {
          if (count > 0) std::memcpy(send + r * count, mb.hs.data(), static_cast<size_t>(count) * sizeof(float));
        }
        mb.send_bytes.assign(static_cast<size_t>(T), static_cast<size_t>(mb.my_len) * row);
        for (int64_t r = 0; r < T; ++r) mb.recv_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.shard_len[static_cast<size_t>(r)]) * row;
        float* h_all = grow(mb.h_all, mb.n * hidden);
        MOE_ASSIGN_OR_RETURN(mb.request, tp.ialltoallv(send, mb.send_bytes, h_all, mb.recv_bytes));
        mb.phase = Phase::kSharedAg;
        return false;
      }
      float* xs = mb.xs.data();
      for (int64_t i = 0; i < count; ++i) xs[i] += mb.moe_out[static_cast<size_t>(i)];
      MOE_RETURN_IF_ERROR(start_out_gather());
      return false;
    }
    case Phase::kSharedAg: {
      MOE_RETURN_IF_ERROR(wait(mb.request));
      float* y = grow(mb.y_all, mb.n * hidden);
      if (mb.n > 0) std::memset(y, 0, static_cast<size_t>(mb.n * hidden) * sizeof(float));
      add_shared_expert(L, mb.h_all.data(), mb.n, &mlp_ws_, y);  // this rank's partial (gate replicated)
      for (int64_t r = 0; r < T; ++r) mb.send_bytes[static_cast<size_t>(r)] = static_cast<size_t>(mb.shard_len[static_cast<size_t>(r)]) * row;
      mb.recv_bytes.assign(static_cast<size_t>(T), static_cast<size_t>(mb.my_len) * row);
      float* recv = grow(mb.recv, T * count);
      MOE_ASSIGN_OR_RETURN(mb.request, tp.ialltoallv(y, mb.send_bytes, recv, mb.recv_bytes));
      mb.phase = Phase::kSharedRs;
      return false;
    }
    case Phase::kSharedRs: {
      MOE_RETURN_IF_ERROR(wait(mb.request));
      float* xs = mb.xs.data();
      for (int64_t i = 0; i < count; ++i) xs[i] += mb.moe_out[static_cast<size_t>(i)];
      add_blocks(mb.recv.data(), T, count, xs);
      MOE_RETURN_IF_ERROR(start_out_gather());
      return false;
    }
    case Phase::kOutAg:
      MOE_RETURN_IF_ERROR(wait(mb.request));
      mb.phase = Phase::kIdle;
      return true;
  }
  return internal_error("fused MoE: unknown phase");
}

Status FusedMoe::finish_counts(const FusedMoeCall& call, StepRoutingCounts* counts) {
  const size_t E = static_cast<size_t>(config_.router.num_experts);
  MOE_RETURN_IF_ERROR(call.ep->expert_tp->allreduce_sum(counts_acc_.data(), counts_acc_.size()));
  counts->tokens_per_expert.assign(counts_acc_.begin(), counts_acc_.begin() + static_cast<std::ptrdiff_t>(E));
  counts->global_tokens = counts_acc_[E];
  counts->degraded_tokens = counts_acc_[E + 1];
  counts->degraded_per_expert.assign(counts_acc_.begin() + static_cast<std::ptrdiff_t>(E + 2), counts_acc_.end());
  counts->capacity = -1;
  counts->dropped = 0;
  counts->rerouted = 0;
  return ok_status();
}

Status FusedMoe::forward(const FusedMoeCall& call, const TensorView& attn_partial, const TensorView& x,
                         StepRoutingCounts* counts) {
  MOE_CHECK(call.weights != nullptr && call.ep != nullptr && call.ep_ws != nullptr);
  const int64_t m = x.ndim() == 0 ? 0 : x.dim(0);
  const int64_t hidden = config_.hidden_size;
  if (m > 0) {
    MOE_CHECK(x.dtype() == DType::kF32 && x.is_contiguous() && x.dim(1) == hidden);
    MOE_CHECK(attn_partial.dtype() == DType::kF32 && attn_partial.is_contiguous() && attn_partial.dim(0) == m &&
              attn_partial.dim(1) == hidden);
  }
  MOE_RETURN_IF_ERROR(validate(call, m));
  attn_ = m > 0 ? attn_partial.data_as<const float>() : nullptr;
  x_ = m > 0 ? x.data_as<float>() : nullptr;
  if (counts != nullptr) {
    counts_acc_.assign(2 * static_cast<size_t>(config_.router.num_experts) + 2, 0);
  } else {
    counts_acc_.clear();
  }
  const bool overlap = call.ep->options.overlap;
  MicroBatch& a = *mb_[0];
  MicroBatch& b = *mb_[1];
  a.t0 = 0;
  a.n = overlap ? m / 2 : m;
  b.t0 = a.n;
  b.n = m - a.n;
  Status st = begin(call, a);
  if (st.ok() && overlap) st = begin(call, b);
  bool a_done = !st.ok(), b_done = !overlap || !st.ok();
  while (st.ok() && (!a_done || !b_done)) {  // one stage of each in turn (same order on every rank)
    if (!a_done) {
      StatusOr<bool> r = step(call, a);
      if (!r.ok()) st = r.status(); else a_done = *r;
    }
    if (st.ok() && !b_done) {
      StatusOr<bool> r = step(call, b);
      if (!r.ok()) st = r.status(); else b_done = *r;
    }
  }
  if (!st.ok()) {
    for (auto& mb : mb_) {
      mb->request.reset();
      mb->phase = MicroBatch::Phase::kIdle;
    }
    return st;
  }
  if (counts != nullptr) return finish_counts(call, counts);
  return ok_status();
}

}  // namespace moe
