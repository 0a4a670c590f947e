// moe bench moe-layer: synthetic layers and timed runs (see bench_moe_layer.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "bench_moe_layer.h"
#include "moe/core/check.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/expert_ffn.h"
#include "moe/moe/router.h"
#include "moe/ops/linear.h"
#include "moe/tensor/dtype.h"

namespace moe::cli {
namespace {

// xorshift64*: fast, and plenty for random weights.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {
    if (s == 0) s = 1;
  }
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  // Uniform in [-a, a).
  float sym(float a) { return a * (static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f); }
};

void fill_bf16(uint16_t* dst, size_t n, float a, Rng& rng) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(rng.sym(a));
}

// Adapted repeat count: at least `base`, up to 10x base, to about 0.2 s of calls.
int adapt(double warmup_seconds, int base) {
  if (!(warmup_seconds > 0)) return base;
  return static_cast<int>(std::clamp(0.2 / warmup_seconds, static_cast<double>(base), 10.0 * base));
}

}  // namespace

const std::vector<std::string>& router_preset_names() {
  static const std::vector<std::string> names = {"mixtral", "qwen2", "qwen3", "deepseek"};
  return names;
}

RouterPreset router_preset(const std::string& name) {
  RouterPreset p;
  p.name = name;
  RouterConfig& r = p.router;
  if (name == "mixtral") {
    r.num_experts = 8;
    r.top_k = 2;
    r.norm_topk_prob = true;
    p.label = "Mixtral-8x7B: softmax, top-2 of 8, renormalised";
  } else if (name == "qwen2") {
    r.num_experts = 60;
    r.top_k = 4;
    r.norm_topk_prob = false;
    p.label = "Qwen1.5/Qwen2-MoE-A2.7B: softmax, top-4 of 60, not renormalised (the shared expert runs outside the layer, "
              "not timed)";
  } else if (name == "qwen3") {
    r.num_experts = 128;
    r.top_k = 8;
    r.norm_topk_prob = true;
    p.label = "Qwen3-30B-A3B: softmax, top-8 of 128, renormalised";
  } else {  // deepseek
    r.scoring = RouterConfig::Scoring::kSigmoid;
    r.topk_method = RouterConfig::TopkMethod::kNoauxTc;
    r.num_experts = 256;
    r.top_k = 8;
    r.norm_topk_prob = true;
    r.n_group = 8;
    r.topk_group = 4;
    r.routed_scaling_factor = 2.5;
    p.label = "DeepSeek-V3: sigmoid noaux_tc (random score bias), top-8 of 256, 8 groups keep 4, renormalised, x2.5 "
              "(the shared expert runs outside the layer, not timed)";
  }
  return p;
}

std::unique_ptr<BenchLayer> make_bench_layer(const RouterPreset& preset, int hidden, int inter, uint64_t seed,
                                             const std::function<bool(int)>& local) {
  auto b = std::make_unique<BenchLayer>();
  ModelConfig& c = b->config;
  c.model_type = "synthetic-" + preset.name;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.moe_intermediate_size = inter;
  c.num_hidden_layers = 1;
  c.moe_layer = {true};
  c.router = preset.router;
  const int E = c.router.num_experts;
  const size_t H = static_cast<size_t>(hidden), I = static_cast<size_t>(inter);
  Rng rng(seed);
  b->router_w.resize(static_cast<size_t>(E) * H);
  fill_bf16(b->router_w.data(), b->router_w.size(), 3.0f / std::sqrt(static_cast<float>(hidden)), rng);
  b->layer.router = {b->router_w.data(), DType::kBF16, E, hidden};
  if (c.router.has_score_bias()) {
    b->layer.score_bias.resize(static_cast<size_t>(E));
    for (float& v : b->layer.score_bias) v = rng.sym(0.05f);
  }
  int n_local = 0;
  for (int e = 0; e < E; ++e) n_local += (!local || local(e)) ? 1 : 0;
  const size_t per_expert = 3 * I * H;
  b->expert_w.resize(static_cast<size_t>(n_local) * per_expert);
  b->layer.experts.resize(static_cast<size_t>(E));
  size_t slot = 0;
  for (int e = 0; e < E; ++e) {
    ExpertWeights& ew = b->layer.experts[static_cast<size_t>(e)];
    if (local && !local(e)) continue;
    uint16_t* base = b->expert_w.data() + slot++ * per_expert;
    fill_bf16(base, 2 * I * H, 1.0f / std::sqrt(static_cast<float>(hidden)), rng);  // w1, w3
    fill_bf16(base + 2 * I * H, I * H, 1.0f / std::sqrt(static_cast<float>(inter)), rng);  // w2
    ew.w1 = {base, DType::kBF16, inter, hidden};
    ew.w3 = {base + I * H, DType::kBF16, inter, hidden};
    ew.w2 = {base + 2 * I * H, DType::kBF16, hidden, inter};
    ew.loaded = true;
  }
  return b;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

StageTimes time_single_layer(const BenchLayer& bl, const BenchLayer& move, const std::vector<float>& x, int tokens,
                             const CapacityOptions& capacity, int iters) {
  const RouterConfig& rc = bl.config.router;
  const int E = rc.num_experts, k = rc.top_k, H = bl.config.hidden_size;
  const size_t n = static_cast<size_t>(tokens);
  const bool reroute = capacity.policy == OverflowPolicy::kReroute;
  std::vector<float> logits(n * static_cast<size_t>(E)), w(n * static_cast<size_t>(k));
  std::vector<int> idx(n * static_cast<size_t>(k)), ranked(reroute ? n * static_cast<size_t>(E) : 0);
  std::vector<float> out(n * static_cast<size_t>(H)), out_move(n * static_cast<size_t>(H));
  ExpertWorkspace ws, ws_move;
  ExpertGroups groups;
  StepRoutingCounts counts;
  const float* bias = bl.layer.score_bias.empty() ? nullptr : bl.layer.score_bias.data();
  std::vector<double> t_logits, t_topk, t_cap, t_layout, t_ffn, t_move, t_total;
  StageTimes r;
  int repeats = iters;
  for (int i = 0; i < 1 + repeats; ++i) {
    const double t0 = now_seconds();
    linear(x.data(), tokens, bl.layer.router, logits.data(), KernelOptions{});
    const double t1 = now_seconds();
    const TopkRouting routing{idx.data(), w.data(), tokens, k, reroute ? ranked.data() : nullptr};
    route_topk(rc, {logits.data(), bias}, routing);
    const double t2 = now_seconds();
    const Status st = apply_capacity(capacity, nullptr, E, routing, &counts);
    MOE_CHECK(st.ok());  // nothing can fail without a communicator
    const double t3 = now_seconds();
    grouped_expert_ffn(MoeLayerArgs::f32(bl.config, bl.layer, x.data(), tokens, out.data()), routing.view(), &ws);
    const double t4 = now_seconds();
    group_by_expert(routing.view(), E, &groups);
    const double t5 = now_seconds();
    grouped_expert_ffn(MoeLayerArgs::f32(move.config, move.layer, x.data(), tokens, out_move.data()), routing.view(),
                       &ws_move);
    const double t6 = now_seconds();
    if (i == 0) {
      repeats = adapt(t6 - t0, iters);
      continue;
    }
    t_logits.push_back(t1 - t0);
    t_topk.push_back(t2 - t1);
    t_cap.push_back(t3 - t2);
    t_ffn.push_back(t4 - t3);
    t_total.push_back(t4 - t0);
    t_layout.push_back(t5 - t4);
    t_move.push_back(t6 - t5);
  }
  r.logits = median_of(t_logits);
  r.topk = median_of(t_topk);
  r.capacity = median_of(t_cap);
  r.layout = median_of(t_layout);
  r.ffn = median_of(t_ffn);
  r.ffn_move = median_of(t_move);
  r.total = median_of(t_total);
  r.iters = repeats;
  const double assignments = static_cast<double>(tokens) * k;
  r.dropped = static_cast<double>(counts.dropped) / assignments;
  r.rerouted = static_cast<double>(counts.rerouted) / assignments;
  return r;
}

namespace {

// Element-wise max over the ranks of comm.
Status max_over_ranks(Communicator* comm, std::vector<double>* v) {
  const int R = comm->size();
  std::vector<double> all(v->size() * static_cast<size_t>(R));
  if (!v->empty()) MOE_RETURN_IF_ERROR(comm->allgather(v->data(), v->size() * sizeof(double), all.data()));
  for (int r = 0; r < R; ++r) {
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] = std::max((*v)[i], all[static_cast<size_t>(r) * v->size() + i]);
  }
  return ok_status();
}

}  // namespace

Status time_ep_layer(const BenchLayer& bl, Communicator* comm, const ExpertPlacement& placement,
                     const std::vector<float>& x, int tokens, const CapacityOptions& capacity, int iters,
                     EpStageTimes* out) {
  EpContext ctx{comm, placement, EpOptions{}};
  ctx.options.capacity = capacity;
  EpWorkspacePtr ws = make_ep_workspace(bl.config, ctx, tokens);
  std::vector<float> y(static_cast<size_t>(tokens) * static_cast<size_t>(bl.config.hidden_size));
  std::vector<double> call, compute, wait;
  int repeats = iters;
  for (int i = 0; i < 1 + repeats; ++i) {
    MOE_RETURN_IF_ERROR(comm->barrier());
    EpTimings t;
    const double t0 = now_seconds();
    MOE_RETURN_IF_ERROR(
        ep_moe_forward(MoeLayerArgs::f32(bl.config, bl.layer, x.data(), tokens, y.data()), ctx, ws.get(), &t));
    const double dt = now_seconds() - t0;
    if (i == 0) {
      std::vector<double> d = {dt};  // every rank must agree on the count
      MOE_RETURN_IF_ERROR(max_over_ranks(comm, &d));
      repeats = adapt(d[0], iters);
      continue;
    }
    call.push_back(dt);
    compute.push_back(t.compute_seconds);
    wait.push_back(t.comm_wait_seconds);
  }
  MOE_RETURN_IF_ERROR(max_over_ranks(comm, &call));
  MOE_RETURN_IF_ERROR(max_over_ranks(comm, &compute));
  MOE_RETURN_IF_ERROR(max_over_ranks(comm, &wait));
  out->call = median_of(call);
  out->compute = median_of(compute);
  out->wait = median_of(wait);
  out->iters = repeats;
  const StepRoutingCounts& c = ep_last_routing_counts(*ws);
  out->dropped = c.global_tokens > 0
                     ? static_cast<double>(c.dropped) / (static_cast<double>(c.global_tokens) * bl.config.router.top_k)
                     : 0.0;
  return ok_status();
}

}  // namespace moe::cli
