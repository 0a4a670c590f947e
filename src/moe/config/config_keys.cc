#include "moe/config/config_keys.h"

#include <algorithm>
#include <array>
#include <vector>

namespace moe::config {
namespace {

using T = ConfigType;
constexpr double kInf = 1e300;

// The one table binding keys to flags. Sections in the order of the shipped example
// (configs/moe_inference_config.yaml): ours first, then the design seed's.
constexpr std::array kKeys = {
    // model
    ConfigKey{"model.path", "--model", T::kString, -kInf, kInf, "", "Hugging Face model directory (--model)"},
    ConfigKey{"model.fp8", "--fp8", T::kEnum, -kInf, kInf, "dequant|native", "FP8 weights: dequantised at load or kept"},
    ConfigKey{"model.mla_attention", "--mla-attention", T::kEnum, -kInf, kInf, "auto|naive|absorbed",
              "MLA attention form (DeepSeek models)"},
    ConfigKey{"model.batch_invariant", "--batch-invariant", T::kBool, -kInf, kInf, "",
              "batch-invariant kernels"},
    // parallelism
    ConfigKey{"parallelism.threads", "--threads", T::kInt, 0, kInf, "", "CPU threads per rank; 0 = all cores"},
    ConfigKey{"parallelism.ep", "--ep", T::kInt, 1, kInf, "", "expert-parallel ranks (mpirun -np)"},
    ConfigKey{"parallelism.tp", "--tp", T::kInt, 1, kInf, "", "tensor-parallel ranks per group"},
    ConfigKey{"parallelism.ranks_per_node", "--ranks-per-node", T::kInt, 0, kInf, "",
              "emulated node size; 0 = real nodes"},
    ConfigKey{"parallelism.fused_moe", "--fused-moe", T::kBool, -kInf, kInf, "on|off",
              "hybrid TP x EP: fused RS -> A2A -> AG"},
    ConfigKey{"parallelism.max_nodes_per_token", "--max-nodes-per-token", T::kInt, 0, kInf, "",
              "node-limited routing; 0 = off"},
    // expert_placement (design seed)
    ConfigKey{"expert_placement.strategy", "", T::kEnum, -kInf, kInf, "contiguous|plan_file|node_replicated",
              "contiguous blocks; a plan file (plan_file -> --placement); or replicas of hot experts by live "
              "rebalancing (-> --rebalance-every)"},
    ConfigKey{"expert_placement.plan_file", "--placement", T::kString, -kInf, kInf, "",
              "static placement plan (moe placement plan)"},
    ConfigKey{"expert_placement.replication_cap", "--replica-cap", T::kInt, 1, kInf, "",
              "most replicas of one expert"},
    ConfigKey{"expert_placement.hot_expert_threshold", "", T::kNumber, 0, 1, "",
              "routing share above which an expert is hot",
              "the replica planner gives spare slots to the experts with the highest load (no fixed threshold); "
              "the value is checked and not used"},
    ConfigKey{"expert_placement.rebalance_every", "--rebalance-every", T::kInt, 0, kInf, "",
              "re-plan the placement every N decode steps; 0 = never"},
    ConfigKey{"expert_placement.slots_per_rank", "--slots-per-rank", T::kInt, 0, kInf, "",
              "expert slots per rank; 0 = ceil(experts / ranks)"},
    ConfigKey{"expert_placement.rebalance_min_gain", "--rebalance-min-gain", T::kNumber, 0, 0.999999, "",
              "adopt a new plan only above this predicted gain"},
    ConfigKey{"expert_placement.stats_ema_decay", "--stats-ema-decay", T::kNumber, 0, 0.999999, "",
              "decay of the per-step load EMA"},
    // alltoall (design seed)
    ConfigKey{"alltoall.implementation", "--comm-backend", T::kEnum, -kInf, kInf,
              "mpi|gloo|custom_ibverbs|nccl|deepep",
              "EP transport: mpi or gloo (custom_ibverbs, nccl, deepep: not built, mpi is used)"},
    ConfigKey{"alltoall.pipeline_depth", "--ep-overlap", T::kInt, 1, 64, "",
              "micro-batches overlapping all-to-all and experts: 1 = off, N = --ep-overlap --ep-micro-batches N"},
    ConfigKey{"alltoall.inline_threshold", "", T::kInt, 0, kInf, "", "bytes below which messages are inlined",
              "there is no ibverbs path here; Open MPI's eager limits (MCA btl_*_eager_limit) decide inlining"},
    ConfigKey{"alltoall.use_cuda_aware", "", T::kBool, -kInf, kInf, "", "GPUDirect RDMA",
              "this build runs on CPUs (no CUDA): activations are sent from host memory", true},
    ConfigKey{"alltoall.crc_check", "", T::kBool, -kInf, kInf, "", "checksum every message",
              "the all-to-all has no per-message CRC here; MPI/TCP checksums the transport", true},
    ConfigKey{"alltoall.dtype", "--a2a-dtype", T::kEnum, -kInf, kInf, "f32|bf16", "activation dtype on the wire"},
    ConfigKey{"alltoall.mode", "--a2a-mode", T::kEnum, -kInf, kInf, "auto|flat|hierarchical",
              "flat or two-level all-to-all"},
    // router (design seed)
    ConfigKey{"router.type", "", T::kEnum, -kInf, kInf, "top_k",
              "the model's own top-k router (softmax, or DeepSeek's grouped sigmoid)"},
    ConfigKey{"router.k", "", T::kInt, 1, kInf, "",
              "experts per token: must equal the model's num_experts_per_tok (checked at launch)"},
    ConfigKey{"router.adaptive_k", "--adaptive-k", T::kBool, -kInf, kInf, "", "adaptive top-k under load"},
    ConfigKey{"router.min_k", "--min-k", T::kInt, 1, kInf, "", "adaptive top-k: fewest experts per token"},
    ConfigKey{"router.max_k", "--max-k", T::kInt, 1, kInf, "", "adaptive top-k: most experts per token"},
    ConfigKey{"router.capacity_factor", "--capacity-factor", T::kNumber, 1e-9, 1e6, "",
              "expert capacity ceil(tokens * k * F / experts)"},
    ConfigKey{"router.token_drop_policy", "--overflow-policy", T::kEnum, -kInf, kInf,
              "dropless|drop|reroute|adaptive_requeue", "what happens past capacity"},
    // profiling (design seed)
    ConfigKey{"profiling.enable_nvtx", "", T::kBool, -kInf, kInf, "", "NVTX ranges",
              "no NVTX without CUDA; the engine's per-step timings are on /metrics", true},
    ConfigKey{"profiling.enable_nsight", "", T::kBool, -kInf, kInf, "", "Nsight Systems capture",
              "no Nsight without CUDA; use perf or the /metrics timings", true},
    ConfigKey{"profiling.comm_overlap_ratio_target", "", T::kNumber, 0, 1, "", "target share of hidden comm",
              "a target only: no controller tunes to it; compare with `moe bench a2a` / `moe doctor`"},
    ConfigKey{"profiling.expert_utilization_target", "", T::kNumber, 0, 1, "", "target expert utilisation",
              "a target only: no controller tunes to it; the load statistics (moe stats) report utilisation"},
    // serving (moe serve)
    ConfigKey{"serving.host", "--host", T::kString, -kInf, kInf, "", "listen address"},
    ConfigKey{"serving.port", "--port", T::kInt, 0, 65535, "", "TCP port; 0 = a free one"},
    ConfigKey{"serving.served_model_name", "--served-model-name", T::kString, -kInf, kInf, "",
              "model name in the API"},
    ConfigKey{"serving.max_num_seqs", "--max-num-seqs", T::kInt, 1, kInf, "", "sequences in the batch"},
    ConfigKey{"serving.max_num_batched_tokens", "--max-num-batched-tokens", T::kInt, 1, kInf, "",
              "tokens per step"},
    ConfigKey{"serving.kv_block_size", "--kv-block-size", T::kInt, 1, kInf, "", "tokens per KV block"},
    ConfigKey{"serving.kv_cache_tokens", "--kv-cache-tokens", T::kInt, 0, kInf, "", "KV pool in tokens"},
    ConfigKey{"serving.kv_cache_memory_bytes", "--kv-cache-memory-bytes", T::kInt, 0, kInf, "", "KV pool in bytes"},
    ConfigKey{"serving.kv_offload_dir", "--kv-offload-dir", T::kString, -kInf, kInf, "", "KV disk tier directory"},
    ConfigKey{"serving.kv_offload_bytes", "--kv-offload-bytes", T::kInt, 1, kInf, "", "KV disk tier bound"},
    ConfigKey{"serving.memory_utilization", "--memory-utilization", T::kNumber, 1e-9, 1, "",
              "fraction of memory for weights + KV"},
    ConfigKey{"serving.max_tokens_limit", "--max-tokens-limit", T::kInt, 1, kInf, "", "largest max_tokens"},
    ConfigKey{"serving.shutdown_grace", "--shutdown-grace", T::kNumber, 0, 1e6, "", "drain seconds on SIGTERM"},
    ConfigKey{"serving.liveness_timeout", "--liveness-timeout", T::kNumber, 1e-9, 1e6, "",
              "/health stalled threshold (s)"},
    // store
    ConfigKey{"store.path", "--model", T::kString, -kInf, kInf, "",
              "a per-expert checkpoint store (moe ckpt convert) instead of model.path"},
    // fault_tolerance
    ConfigKey{"fault_tolerance.comm_timeout", "--comm-timeout", T::kNumber, 1e-9, 1e6, "",
              "seconds before a silent peer is failed"},
    ConfigKey{"fault_tolerance.min_replicas", "--min-replicas", T::kInt, 1, kInf, "",
              "every expert on this many ranks"},
    ConfigKey{"fault_tolerance.failover_wait", "--failover-wait", T::kNumber, 0, 1e6, "",
              "gloo: wait for lost experts (s)"},
    ConfigKey{"fault_tolerance.failover_join", "--failover-join", T::kNumber, 1e-9, 1e6, "",
              "gloo: survivors' check-in window when the group re-forms (s)"},
    ConfigKey{"fault_tolerance.gloo_store", "--gloo-store", T::kString, -kInf, kInf, "", "gloo rendezvous dir"},
    ConfigKey{"fault_tolerance.supervise", "--supervise", T::kBool, -kInf, kInf, "",
              "serve: restart the worker group on failure"},
    ConfigKey{"fault_tolerance.max_restarts", "--max-restarts", T::kInt, 0, kInf, "",
              "serve --supervise: restarts"},
    ConfigKey{"fault_tolerance.recovery_timeout", "--recovery-timeout", T::kNumber, 1e-9, 1e6, "",
              "serve --supervise: seconds to recover"},
};

}  // namespace

const char* config_type_name(ConfigType t) {
  switch (t) {
    case ConfigType::kBool: return "boolean";
    case ConfigType::kInt: return "integer";
    case ConfigType::kNumber: return "number";
    case ConfigType::kString: return "string";
    case ConfigType::kEnum: return "one of";
  }
  return "?";
}

std::span<const ConfigKey> config_keys() { return kKeys; }

const ConfigKey* find_config_key(std::string_view key) {
  for (const ConfigKey& k : kKeys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

int edit_distance(std::string_view a, std::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_config_key(std::string_view key) {
  // The name alone ("replica_cap" under the wrong section) first: same name elsewhere.
  const size_t dot = key.rfind('.');
  const std::string_view name = dot == std::string_view::npos ? key : key.substr(dot + 1);
  for (const ConfigKey& k : kKeys) {
    if (k.key.substr(k.key.rfind('.') + 1) == name) return std::string(k.key);
  }
  int best = 1 << 30;
  std::string_view best_key;
  for (const ConfigKey& k : kKeys) {
    const int d = edit_distance(key, k.key);
    if (d < best) {
      best = d;
      best_key = k.key;
    }
  }
  if (best > static_cast<int>(key.size()) / 2) return "";
  return std::string(best_key);
}

}  // namespace moe::config
