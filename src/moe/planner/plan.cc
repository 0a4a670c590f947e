#include "moe/planner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "moe/planner/step_model.h"

namespace moe::planner {
namespace {

// "83.0 GB", "235.6 KB": decimal units, one decimal.
std::string gb(double bytes) {
  char buf[32];
  if (bytes >= 1e8) {
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  } else if (bytes >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KB", bytes / 1e3);
  }
  return buf;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

std::string not_divisible(const std::string& field, int64_t value, const std::string& what, int by) {
  return field + " " + std::to_string(value) + " not divisible by " + what + " " + std::to_string(by);
}

// The divisibility and topology reasons, "" when none.
std::string shape_reason(const ModelConfig& c, const Cluster& cl, const Strategy& s) {
  const int ta = s.attn_tp, t = s.moe_tp, e = s.moe_ep;
  if (c.num_attention_heads % ta != 0) return not_divisible("num_attention_heads", c.num_attention_heads, "attention TP", ta);
  if (!c.mla.enabled() && c.num_key_value_heads % ta != 0) {
    return not_divisible("num_key_value_heads", c.num_key_value_heads, "attention TP", ta);
  }
  if (c.num_moe_layers() < c.num_hidden_layers && c.intermediate_size % ta != 0) {
    return not_divisible("intermediate_size", c.intermediate_size, "attention TP (dense layers)", ta);
  }
  if (c.num_moe_layers() > 0) {
    if (c.moe_intermediate_size % t != 0) return not_divisible("moe_intermediate_size", c.moe_intermediate_size, "MoE TP", t);
    if (t > 1 && c.shared_expert_intermediate_size > 0 && c.shared_expert_intermediate_size % t != 0) {
      return not_divisible("shared_expert_intermediate_size", c.shared_expert_intermediate_size, "MoE TP", t);
    }
    if (c.router.num_experts % e != 0) return not_divisible("routed experts", c.router.num_experts, "EP", e);
  }
  if (e > 1 && t > cl.devices_per_node) {
    return "MoE TP " + std::to_string(t) + " spans " + std::to_string(t / cl.devices_per_node) + " nodes (" +
           std::to_string(cl.devices_per_node) + " devices per node): a hybrid's TP group stays inside a node";
  }
  if (t == 1 && ta > cl.devices_per_node) {
    return "attention TP " + std::to_string(ta) + " spans nodes (" + std::to_string(cl.devices_per_node) +
           " devices per node) under EP";
  }
  return "";
}

std::string memory_reason(const MemoryUse& u, double capacity, const Strategy& s) {
  std::ostringstream os;
  if (u.weights + u.expert_replicas > capacity) {
    os << "weights " << gb(u.weights + u.expert_replicas);
  } else {
    os << "weights " << gb(u.weights + u.expert_replicas) << " + KV cache " << gb(u.kv_cache) << " + buffers "
       << gb(u.buffers + u.reserved) << " = " << gb(u.total());
  }
  os << " > " << gb(capacity) << " per device at " << s.label();
  return os.str();
}

// The prefill of `seqs` prompts of `len` tokens in steps of at most `chunk` tokens per
// replica: one step's input and the number of steps.
struct PrefillSteps {
  StepInput step;
  int64_t steps = 1;
};
PrefillSteps prefill_steps(int64_t seqs, int64_t len, int64_t replicas, int64_t chunk) {
  const int64_t per_replica = (seqs + replicas - 1) / replicas;
  if (chunk <= 0 || per_replica * len <= chunk) return {{seqs, len, static_cast<double>(len) / 2}, 1};
  if (len >= chunk) {
    // One prompt per replica per step, chunk tokens of it.
    return {{std::min(seqs, replicas), chunk, static_cast<double>(len) / 2}, per_replica * ((len + chunk - 1) / chunk)};
  }
  const int64_t q = chunk / len;  // whole prompts per replica per step
  return {{std::min(seqs, q * replicas), len, static_cast<double>(len) / 2}, (per_replica + q - 1) / q};
}

// Mean M/D/1 response time factor: waiting adds rho / (2 (1 - rho)) service times.
double md1_factor(double rho) { return 1.0 + rho / (2.0 * (1.0 - rho)); }

}  // namespace

std::string Strategy::moe_kind() const {
  if (moe_ep == 1) return "tp";
  if (moe_tp == 1) return "ep";
  return "hybrid";
}

std::string Strategy::label() const {
  std::ostringstream os;
  os << "attn TP" << attn_tp << "xDP" << attn_dp << " | MoE ";
  const std::string kind = moe_kind();
  if (kind == "tp") {
    os << "TP" << moe_tp;
  } else if (kind == "ep") {
    os << "EP" << moe_ep;
  } else {
    os << "TP" << moe_tp << "xEP" << moe_ep << (fused ? " fused RS-A2A-AG" : " AR+A2A");
  }
  return os.str();
}

StrategyResult evaluate_strategy(const ModelConfig& model, const HardwareProfile& hw, const Cluster& cl,
                                 const Workload& w, const Strategy& s) {
  StrategyResult r;
  r.strategy = s;
  if (std::string why = shape_reason(model, cl, s); !why.empty()) {
    r.feasible = false;
    r.reason = why;
    return r;
  }
  const ModelShape m = model_shape(model);
  const int64_t I = w.input_len, O = w.output_len;
  const double capacity = hw.device.memory_capacity;
  const StepInput decode1{1, 1, static_cast<double>(I) + static_cast<double>(O) / 2};
  const int64_t replicas = w.driver_only_attention ? 1 : s.attn_dp;
  const PrefillSteps pre = prefill_steps(w.batch > 0 ? w.batch : 1, I, replicas, w.prefill_chunk);
  const double mean_prefill_steps = static_cast<double>(pre.steps + 1) / 2;
  if (w.batch > 0) {
    r.batch = w.batch;
    r.prefill = step_cost(m, hw, cl, w, s, pre.step);
    r.decode = step_cost(m, hw, cl, w, s, {w.batch, 1, decode1.ctx});
    r.ttft_s = r.prefill.total_s * mean_prefill_steps;
    r.tpot_s = r.decode.total_s;
    r.throughput = static_cast<double>(w.batch * O) / (r.ttft_s + static_cast<double>(O) * r.tpot_s);
  } else {
    // Rate mode: one request's prefill at a time (M/D/1 wait), decode of the concurrent
    // batch B = rate * (TTFT + O * TPOT) (Little's law), iterated to a fixed point.
    r.prefill = step_cost(m, hw, cl, w, s, pre.step);
    const double prefill_s = r.prefill.total_s * static_cast<double>(pre.steps);  // one request's prompt
    const double rho = w.request_rate * prefill_s;
    bool saturated = rho >= 0.95;
    int64_t B = 1;
    for (int it = 0; it < 200 && !saturated; ++it) {
      r.decode = step_cost(m, hw, cl, w, s, {B, 1, decode1.ctx});
      const double tpot = r.decode.total_s / (1.0 - rho);
      const double ttft = prefill_s * md1_factor(rho);
      const double want = std::ceil(w.request_rate * (ttft + static_cast<double>(O) * tpot));
      r.ttft_s = ttft;
      r.tpot_s = tpot;
      if (!(want <= static_cast<double>(int64_t{1} << 24)) || it == 199) {  // diverging (or NaN)
        saturated = true;
        break;
      }
      const int64_t next = std::max<int64_t>(1, static_cast<int64_t>(want));
      if (next == B) break;
      B = next;
    }
    if (saturated) {
      r.feasible = false;
      char buf[160];
      std::snprintf(buf, sizeof buf, "request rate %.3g req/s saturates %s (prefill alone busy %.0f%% of the time)",
                    w.request_rate, s.label().c_str(), 100.0 * std::min(rho, 9.99));
      r.reason = buf;
      return r;
    }
    r.batch = B;
    r.throughput = w.request_rate * static_cast<double>(O);
  }
  r.memory = memory_use(m, hw, w, s, r.batch, I + O, pre.step.seqs * pre.step.new_tokens);
  if (r.memory.total() > capacity) {
    r.feasible = false;
    r.out_of_memory = true;
    r.reason = memory_reason(r.memory, capacity, s);
  }
  return r;
}

StatusOr<PlanResult> plan(const ModelConfig& model, const HardwareProfile& hw, const Cluster& cl, const Workload& w) {
  if (cl.nodes < 1) return invalid_argument("--nodes must be >= 1 (got " + std::to_string(cl.nodes) + ")");
  if (cl.devices_per_node < 1) {
    return invalid_argument("--devices-per-node must be >= 1 (got " + std::to_string(cl.devices_per_node) + ")");
  }
  if (w.batch < 0) return invalid_argument("--batch must be >= 1 (got " + std::to_string(w.batch) + ")");
  if (w.batch == 0 && !(w.request_rate > 0 && std::isfinite(w.request_rate))) {
    return invalid_argument("give a workload: --batch B (>= 1) or --request-rate R (> 0 requests/s)");
  }
  if (w.input_len < 1) return invalid_argument("--input-len must be >= 1 (got " + std::to_string(w.input_len) + ")");
  if (w.output_len < 1) return invalid_argument("--output-len must be >= 1 (got " + std::to_string(w.output_len) + ")");
  if (!(w.a2a_skew >= 1.0) || !std::isfinite(w.a2a_skew)) return invalid_argument("--a2a-skew must be >= 1");
  if (w.expert_replicas < 0) return invalid_argument("--expert-replicas must be >= 0");
  if (w.prefill_chunk < 0) return invalid_argument("--prefill-chunk must be >= 0");
  if (w.activation_bytes < 1 || w.kv_bytes < 1) return invalid_argument("--activation-bytes and --kv-bytes must be >= 1");
  if (w.micro_batches < 1) return invalid_argument("micro_batches must be >= 1");
  PlanResult out;
  out.objective = w.batch > 0 ? "throughput" : "latency";
  const int W = cl.world();
  std::vector<Strategy> all;
  for (int ta : divisors(W)) {
    const int dp = W / ta;
    // Pure EP under attention TP ta (ta == 1: DP attention).
    if (ta <= cl.devices_per_node || ta == 1) all.push_back({ta, dp, 1, W, false});
    if (ta > 1) {
      all.push_back({ta, dp, ta, dp, false});                 // TP (dp == 1) or hybrid AR+A2A
      if (dp > 1) all.push_back({ta, dp, ta, dp, true});      // hybrid fused
    }
  }
  for (const Strategy& s : all) {
    StrategyResult r = evaluate_strategy(model, hw, cl, w, s);
    (r.feasible ? out.feasible : out.infeasible).push_back(std::move(r));
  }
  const int64_t O = w.output_len;
  auto latency = [O](const StrategyResult& r) { return r.ttft_s + static_cast<double>(O) * r.tpot_s; };
  std::stable_sort(out.feasible.begin(), out.feasible.end(), [&](const StrategyResult& a, const StrategyResult& b) {
    if (w.batch > 0 && a.throughput != b.throughput) return a.throughput > b.throughput;
    if (w.batch == 0 && latency(a) != latency(b)) return latency(a) < latency(b);
    return a.memory.total() < b.memory.total();
  });
  return out;
}

std::string no_fit_message(const PlanResult& r, const HardwareProfile& hw, const Cluster& cl) {
  const StrategyResult* best = nullptr;
  for (const auto& s : r.infeasible) {
    if (s.out_of_memory && (best == nullptr || s.memory.total() < best->memory.total())) best = &s;
  }
  std::ostringstream os;
  os << "no strategy fits the model on " << cl.nodes << " x " << cl.devices_per_node << " devices";
  if (best == nullptr) {
    os << ":";
    for (const auto& s : r.infeasible) os << "\n  " << s.strategy.label() << ": " << s.reason;
    return os.str();
  }
  const double cap = hw.device.memory_capacity;
  const double fixed = best->memory.kv_cache + best->memory.buffers + best->memory.reserved;
  os << " of " << gb(cap) << ": the smallest footprint is " << gb(best->memory.total()) << " per device ("
     << best->reason << "); it needs " << gb(best->memory.total()) << " per device, or about "
     << static_cast<int64_t>(std::ceil((best->memory.weights + best->memory.expert_replicas) * cl.world() /
                                       std::max(1.0, cap - fixed)))
     << " devices of this kind for the weights";
  return os.str();
}

}  // namespace moe::planner
