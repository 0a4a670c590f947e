#include "moe/planner/step_model.h"

#include <algorithm>
#include <cmath>

#include "moe/planner/cost_model.h"

namespace moe::planner {
namespace {

// A group of `ranks` consecutive ranks (a TP group): inside one node when it fits.
GroupShape consecutive_group(int ranks, int per_node) { return {ranks, std::max(1, ranks / per_node)}; }

// An EP group of `ranks` ranks, one per TP group of `tp` consecutive ranks.
GroupShape strided_group(int ranks, int tp, const Cluster& cl) {
  if (tp >= cl.devices_per_node) return {ranks, ranks};
  return {ranks, std::max(1, std::min(ranks, cl.nodes))};
}

double ceil_div(double a, double b) { return std::ceil(a / b); }

// Expected distinct experts (of `held` on this device) that `tokens` tokens, each
// choosing top_k of `experts` uniformly, touch: held * (1 - (1 - k / E)^tokens).
double touched_experts(double held, double experts, double top_k, double tokens) {
  if (tokens <= 0) return 0;
  return held * (1.0 - std::pow(1.0 - top_k / experts, tokens));
}

// Overlaps two times with `parts` micro-batches: the longer runs in full, the shorter
// hides except its first micro-batch.
double overlap(double a, double b, int parts) {
  parts = std::max(1, parts);
  return std::max(a, b) + std::min(a, b) / parts;
}

// The roofline time of a phase in which only `active` of the device's shared_ranks
// compute (DeviceSpec: shared cores): compute and memory times each divided by
// min(solo speedup, shared_ranks / active).
double shared_roofline(const DeviceSpec& d, double flops, double bytes, bool fp8, double active) {
  const double tc = roofline_seconds(d, flops, 0, fp8), tm = roofline_seconds(d, 0, bytes, fp8);
  if (d.shared_ranks <= 1 || active >= d.shared_ranks) return std::max(tc, tm);
  const double room = static_cast<double>(d.shared_ranks) / std::max(1.0, active);
  return std::max(tc / std::min(d.solo_compute_speedup, room), tm / std::min(d.solo_memory_speedup, room));
}

}  // namespace

ModelShape model_shape(const ModelConfig& c) {
  ModelShape m;
  m.hidden = c.hidden_size;
  m.vocab = c.vocab_size;
  m.layers = c.num_hidden_layers;
  m.moe_layers = c.num_moe_layers();
  m.dense_layers = m.layers - m.moe_layers;
  m.heads = c.num_attention_heads;
  m.kv_heads = c.num_key_value_heads;
  m.experts = c.router.num_experts;
  m.top_k = c.router.top_k;
  m.expert_inter = c.moe_intermediate_size;
  m.shared_inter = c.shared_expert_intermediate_size;
  m.dense_inter = c.intermediate_size;
  m.tied_embeddings = c.tie_word_embeddings;
  m.fp8 = c.fp8.enabled;
  m.weight_bytes = c.fp8.enabled ? 1.0 : 2.0;
  const int64_t h = m.hidden, H = m.heads;
  m.attn_replicated = 2 * h;  // input and post-attention RMSNorm
  if (c.mla.enabled()) {
    const auto& a = c.mla;
    m.qk_dim = a.qk_head_dim();
    m.v_dim = a.v_head_dim;
    const int64_t q = a.q_lora_rank > 0 ? int64_t{a.q_lora_rank} * H * a.qk_head_dim() : h * H * a.qk_head_dim();
    m.attn_sharded = q + int64_t{a.kv_lora_rank} * H * (a.qk_nope_head_dim + a.v_head_dim) + H * a.v_head_dim * h;
    m.attn_replicated += int64_t{h} * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank;
    if (a.q_lora_rank > 0) m.attn_replicated += h * a.q_lora_rank + a.q_lora_rank;
    m.kv_values_replicated = a.kv_lora_rank + a.qk_rope_head_dim;
  } else {
    const int64_t d = c.head_dim, K = m.kv_heads;
    m.qk_dim = m.v_dim = d;
    m.attn_sharded = h * H * d + 2 * h * K * d + H * d * h;
    if (c.attention_qkv_bias) m.attn_sharded += H * d + 2 * K * d;
    if (c.qk_norm) m.attn_replicated += 2 * d;
    m.kv_values_sharded = 2 * K * d;
  }
  return m;
}

StepCost step_cost(const ModelShape& m, const HardwareProfile& hw, const Cluster& cl, const Workload& w,
                   const Strategy& s, const StepInput& in) {
  StepCost c;
  const DeviceSpec& dev = hw.device;
  const double ab = w.activation_bytes, wb = m.weight_bytes, h = static_cast<double>(m.hidden);
  const int ta = s.attn_tp, t = s.moe_tp, e = s.moe_ep;
  const GroupShape attn_group = consecutive_group(ta, cl.devices_per_node);
  // Sequences and tokens of the busiest attention replica (whole sequences per replica).
  // Attention replicas that hold sequences: every DP replica, or the driver's group alone.
  const double replicas = w.driver_only_attention ? 1.0 : static_cast<double>(s.attn_dp);
  const double seqs_a = ceil_div(static_cast<double>(in.seqs), replicas);
  const double tok_a = seqs_a * static_cast<double>(in.new_tokens);
  const double tok_sys = tok_a * replicas;  // tokens entering the MoE layers, whole cluster
  const double tok_total = static_cast<double>(in.seqs) * static_cast<double>(in.new_tokens);
  const double act = tok_a * h * ab;  // one replica's hidden states, bytes
  // Ranks computing attention, dense MLPs and the lm_head: the replicas with sequences
  // (the driver's group alone under driver-only attention); the rest wait in the MoE
  // exchange. Matters only on shared cores (DeviceSpec::shared_ranks).
  const double active = ta * std::min(replicas, std::max(1.0, static_cast<double>(in.seqs)));

  // Attention (per layer): projections, scores over ctx, KV read.
  {
    const double proj_params = static_cast<double>(m.attn_sharded) / ta + static_cast<double>(m.attn_replicated);
    const double heads = static_cast<double>(m.heads) / ta;
    const double flops = 2 * tok_a * proj_params + 2 * tok_a * heads * in.ctx * static_cast<double>(m.qk_dim + m.v_dim);
    const double kv = static_cast<double>(m.kv_values_sharded) / ta + static_cast<double>(m.kv_values_replicated);
    const double bytes = proj_params * wb + seqs_a * (in.ctx + static_cast<double>(in.new_tokens)) * kv * w.kv_bytes +
                         2 * act;
    c.attention_s = m.layers * shared_roofline(dev, flops, bytes, m.fp8, active);
  }
  double intra = 0, inter = 0;  // per-step comm by tier (before overlap)
  double overlap_saving = 0;    // what the fused path's intra/inter overlap hides
  auto add_comm = [&](GroupShape g, Primitive p, double bytes, double skew) {
    const double tsec = collective_seconds(hw, p, g, bytes, skew);
    (g.nodes > 1 ? inter : intra) += tsec;
    return tsec;
  };
  const double attn_ar = collective_seconds(hw, Primitive::kAllReduce, attn_group, act);
  // Dense layers: TP like attention; AR after attention and after the MLP.
  if (m.dense_layers > 0) {
    const double params = 3.0 * h * static_cast<double>(m.dense_inter) / ta;
    c.dense_mlp_s = m.dense_layers * shared_roofline(dev, 2 * tok_a * params, params * wb + 2 * act, m.fp8, active);
    for (int i = 0; i < 2; ++i) (attn_group.nodes > 1 ? inter : intra) += m.dense_layers * attn_ar;
  }
  // MoE layers.
  if (m.moe_layers > 0) {
    const double E = static_cast<double>(m.experts), k = static_cast<double>(m.top_k), L = m.moe_layers;
    const double skew = std::max(1.0, w.a2a_skew);
    double rows = 0;        // expert rows this device computes (busiest device)
    double router_tok = 0;  // tokens this device routes
    double shared_tok = 0;  // tokens of its shared expert, at width shared_inter / shared_div
    double shared_div = 1;
    double layer_intra = 0, layer_inter = 0;
    const double tsave_intra = intra, tsave_inter = inter;
    intra = inter = 0;
    // Before each dispatch the EP group exchanges its row counts (one int64 per peer):
    // an all-to-all of 8 e bytes, latency only, once per micro-batch.
    const int count_exchanges = w.overlap_compute ? 2 : 1;  // one per micro-batch
    auto add_counts = [&](GroupShape ep) {
      for (int i = 0; i < count_exchanges; ++i) add_comm(ep, Primitive::kAllToAll, 8.0 * e, 1);
    };
    if (t > 1 && t == ta) {
      // TP (e == 1) or hybrid: the MoE TP group is the attention TP group.
      const GroupShape tp_group = attn_group;
      const GroupShape ep_group = strided_group(e, t, cl);
      shared_div = t;
      shared_tok = tok_a;
      const double group_rows = tok_sys * k / e;  // rows an EP rank's TP group receives (mean)
      if (e == 1) {
        rows = tok_a * k;
        router_tok = tok_a;
        add_comm(tp_group, Primitive::kAllReduce, act, 1);  // after attention
        add_comm(tp_group, Primitive::kAllReduce, act, 1);  // after the MoE block
      } else if (!s.fused) {
        rows = group_rows * skew;
        router_tok = tok_a;
        add_comm(tp_group, Primitive::kAllReduce, act, 1);
        add_counts(ep_group);
        for (int i = 0; i < 2; ++i) add_comm(ep_group, Primitive::kAllToAll, tok_a * k * h * ab, skew);
        add_comm(tp_group, Primitive::kAllReduce, act, 1);
      } else {
        rows = group_rows * skew;
        router_tok = tok_a / t;
        add_comm(tp_group, Primitive::kReduceScatter, act, 1);
        add_counts(ep_group);
        for (int i = 0; i < 2; ++i) add_comm(ep_group, Primitive::kAllToAll, tok_a / t * k * h * ab, skew);
        add_comm(tp_group, Primitive::kAllGather, group_rows * h * ab * skew, 1);      // received rows
        add_comm(tp_group, Primitive::kReduceScatter, group_rows * h * ab * skew, 1);  // expert partials
        add_comm(tp_group, Primitive::kAllGather, act, 1);                            // x shard
        if (m.shared_inter > 0) {
          add_comm(tp_group, Primitive::kAllGather, act, 1);
          add_comm(tp_group, Primitive::kReduceScatter, act, 1);
        }
      }
    } else {
      // Pure EP over every device (moe_tp == 1); attention TP ta >= 1 slices its tokens.
      const GroupShape ep_group{e, std::min(e, cl.nodes)};
      const double slice = tok_a / ta;
      rows = tok_sys * k / e * skew;
      router_tok = slice;
      shared_tok = slice;
      if (ta > 1) add_comm(attn_group, Primitive::kAllReduce, act, 1);
      add_counts(ep_group);
      for (int i = 0; i < 2; ++i) add_comm(ep_group, Primitive::kAllToAll, slice * k * h * ab, skew);
      if (ta > 1) add_comm(attn_group, Primitive::kAllGather, act, 1);
    }
    layer_intra = intra;
    layer_inter = inter;
    intra = tsave_intra + L * layer_intra;
    inter = tsave_inter + L * layer_inter;
    // Node-local and cross-node collectives of the fused path overlap (micro-batches).
    const double moe_comm = s.fused ? overlap(layer_intra, layer_inter, w.micro_batches) : layer_intra + layer_inter;
    overlap_saving = L * (layer_intra + layer_inter - moe_comm);
    // Expert compute: rows at width inter / t; weights of the experts the batch touches.
    const double inter_local = static_cast<double>(m.expert_inter) / t;
    const double held = E / e + w.expert_replicas;
    const double touched = std::min(held, touched_experts(held, E, k, tok_total));
    const double expert_flops = 2 * rows * 3 * h * inter_local + 2 * router_tok * E * h;
    const double expert_bytes = touched * 3 * h * inter_local * wb + E * h * 2 + 2 * rows * h * ab;
    double moe = roofline_seconds(dev, expert_flops, expert_bytes, m.fp8);
    if (m.shared_inter > 0 && shared_tok > 0) {
      const double sp = 3 * h * static_cast<double>(m.shared_inter) / shared_div;
      moe += roofline_seconds(dev, 2 * shared_tok * sp, sp * wb, m.fp8);
    }
    c.moe_s = L * moe;
  }
  // Embedding AR and vocab-parallel lm_head: logits rows all-gathered (f32).
  const double logit_rows = seqs_a;
  {
    const double vh = static_cast<double>(m.vocab) * h / ta;
    c.head_s = shared_roofline(dev, 2 * logit_rows * vh, vh * 2 + logit_rows * static_cast<double>(m.vocab) * 4, false,
                               active);
    const double embed = collective_seconds(hw, Primitive::kAllReduce, attn_group, act);
    const double logits = collective_seconds(hw, Primitive::kAllGather, attn_group,
                                             logit_rows * static_cast<double>(m.vocab) * 4);
    (attn_group.nodes > 1 ? inter : intra) += embed + logits;
  }
  c.intra_comm_s = intra;
  c.inter_comm_s = inter;
  c.comm_s = intra + inter - overlap_saving;
  c.total_s = w.overlap_compute ? overlap(c.compute_s(), c.comm_s, 2) : c.compute_s() + c.comm_s;
  return c;
}

MemoryUse memory_use(const ModelShape& m, const HardwareProfile& hw, const Workload& w, const Strategy& s,
                     int64_t seqs, int64_t max_len, int64_t prefill_tokens) {
  MemoryUse u;
  const double h = static_cast<double>(m.hidden), wb = m.weight_bytes, ab = w.activation_bytes;
  const int ta = s.attn_tp, t = s.moe_tp, e = s.moe_ep;
  const bool moe_tp_split = t > 1 && t == ta;  // TP or hybrid: shared expert split too
  const double E = static_cast<double>(m.experts), I = static_cast<double>(m.expert_inter);
  const double expert = 3 * h * I / t * wb;
  double weights = static_cast<double>(m.layers) *
                   (static_cast<double>(m.attn_sharded) / ta * wb + static_cast<double>(m.attn_replicated) * 2);
  weights += static_cast<double>(m.dense_layers) * 3 * h * static_cast<double>(m.dense_inter) / ta * wb;
  if (m.moe_layers > 0) {
    const double shared = 3 * h * static_cast<double>(m.shared_inter) / (moe_tp_split ? t : 1) * wb;
    weights += static_cast<double>(m.moe_layers) * (E / e * expert + E * h * 2 + shared);
    u.expert_replicas = static_cast<double>(m.moe_layers) * w.expert_replicas * expert;
  }
  weights += static_cast<double>(m.vocab) * h / ta * 2 * (m.tied_embeddings ? 1 : 2) + h * 2;
  u.weights = weights;
  const double replicas = w.driver_only_attention ? 1.0 : static_cast<double>(s.attn_dp);
  const double seqs_a = ceil_div(static_cast<double>(seqs), replicas);
  const double kv = static_cast<double>(m.kv_values_sharded) / ta + static_cast<double>(m.kv_values_replicated);
  u.kv_cache = seqs_a * static_cast<double>(max_len) * static_cast<double>(m.layers) * kv * w.kv_bytes;
  const double tok_a = ceil_div(static_cast<double>(prefill_tokens), replicas);
  const double k = static_cast<double>(m.top_k);
  const double inter_w = std::max(static_cast<double>(m.dense_inter) / ta, I / t);
  u.buffers = tok_a * h * ab * 8 + 4 * tok_a * k * h * ab + tok_a * std::max(k, 1.0) * 2 * inter_w * ab +
              seqs_a * static_cast<double>(m.vocab) * 4;
  u.reserved = hw.device.reserved_memory;
  return u;
}

}  // namespace moe::planner
