// check_config(): the file's contradictions, the keys this build cannot honour, and the
// flags of the keys that have no flag of their own (config_file.h).
#include <algorithm>
#include <string>

#include "moe/config/config_file.h"

namespace moe::config {
namespace {

Status contradiction(const ConfigFile& f, const ConfigValue& v, const std::string& message) {
  return invalid_argument(f.where(v) + ": " + std::string(v.key->key) + ": " + message);
}

void warn(ConfigFile& f, const ConfigValue& v, const std::string& message) {
  f.warnings.push_back({std::string(v.key->key), v.line, message});
}

std::string at_line(const ConfigValue& v) { return v.text + ", line " + std::to_string(v.line); }

// The value of an integer key, or `fallback` when the key is not in the file.
long long int_of(const ConfigValue* v, long long fallback) { return v ? std::stoll(v->text) : fallback; }

Status check_router(ConfigFile& f) {
  const ConfigValue* adaptive = f.find("router.adaptive_k");
  const ConfigValue* min_k = f.find("router.min_k");
  const ConfigValue* max_k = f.find("router.max_k");
  const ConfigValue* k = f.find("router.k");
  const bool is_adaptive = adaptive != nullptr && adaptive->flag_value == "true";
  if (min_k && max_k && int_of(min_k, 0) > int_of(max_k, 0)) {
    return contradiction(f, *min_k, min_k->text + " is greater than router.max_k (" + at_line(*max_k) + ")");
  }
  if (!is_adaptive && (min_k || max_k)) {
    const ConfigValue& v = min_k ? *min_k : *max_k;
    return contradiction(f, v, "applies to adaptive top-k only; set router.adaptive_k: true" +
                                   std::string(adaptive ? " (it is false, line " + std::to_string(adaptive->line) + ")" : ""));
  }
  if (is_adaptive && min_k && max_k && int_of(min_k, 0) == int_of(max_k, 0)) {
    return contradiction(f, *adaptive, "true with router.min_k == router.max_k (" + min_k->text +
                                           ") is a fixed-k router; set adaptive_k: false or min_k < max_k");
  }
  if (k && max_k && int_of(max_k, 0) > int_of(k, 0)) {
    return contradiction(f, *max_k, max_k->text + " exceeds router.k (" + at_line(*k) + ")");
  }
  if (k && min_k && int_of(min_k, 0) > int_of(k, 0)) {
    return contradiction(f, *min_k, min_k->text + " exceeds router.k (" + at_line(*k) + ")");
  }
  const ConfigValue* cf = f.find("router.capacity_factor");
  const ConfigValue* policy = f.find("router.token_drop_policy");
  if (cf && policy && policy->text == "dropless") {
    return contradiction(f, *cf, "has no effect with router.token_drop_policy dropless (line " +
                                     std::to_string(policy->line) + "); use drop, reroute or adaptive_requeue");
  }
  return Status();
}

Status check_placement(ConfigFile& f) {
  const ConfigValue* strategy = f.find("expert_placement.strategy");
  const ConfigValue* plan = f.find("expert_placement.plan_file");
  const ConfigValue* every = f.find("expert_placement.rebalance_every");
  if (strategy == nullptr) return Status();
  ConfigValue& s = f.values[static_cast<size_t>(strategy - f.values.data())];
  if (s.text == "contiguous" && plan) {
    return contradiction(f, s, "contiguous contradicts expert_placement.plan_file (line " + std::to_string(plan->line) +
                                   "); use strategy: plan_file");
  }
  if (s.text == "plan_file" && !plan) return contradiction(f, s, "plan_file needs expert_placement.plan_file");
  if (s.text == "node_replicated") {
    if (every && every->text == "0") {
      return contradiction(f, s, "node_replicated needs live rebalancing, but expert_placement.rebalance_every is 0 (line " +
                                     std::to_string(every->line) + ")");
    }
    if (!every) {
      s.flag = "--rebalance-every";
      s.flag_value = "32";
    }
    warn(f, s,
         "node_replicated: hot experts get replicas from the load-based replica planner over all EP ranks "
         "(not restricted to one node), re-planned every " +
             (every ? every->text : std::string("32")) + " decode steps (expert_placement.rebalance_every)");
  }
  return Status();
}

void derive_special(ConfigFile& f) {
  for (ConfigValue& v : f.values) {
    const std::string_view key = v.key->key;
    if (key == "alltoall.implementation" && v.text != "mpi" && v.text != "gloo") {
      v.flag_value = "mpi";
      warn(f, v,
           v.text + " is not built here; using mpi (Open MPI chooses InfiniBand verbs / UCX by itself when the "
                    "machine has a device)");
    }
    if (key == "alltoall.pipeline_depth") {
      // N micro-batches pipelined against the all-to-all: --ep-overlap with
      // --ep-micro-batches N (the engine pipelines 2..kMaxEpMicroBatches = 8).
      const long long depth = std::stoll(v.text);
      v.flag_value = depth >= 2 ? "true" : "false";
      if (depth >= 2) {
        v.extra_flag = "--ep-micro-batches";
        v.extra_flag_value = std::to_string(std::min(depth, 8LL));
      }
      if (depth > 8) warn(f, v, "the engine pipelines at most 8 micro-batches (--ep-micro-batches); using 8 instead of " + v.text);
    }
    if (!v.key->unhonoured.empty() && (!v.key->warn_if_true || v.flag_value == "true")) {
      warn(f, v, std::string(v.key->unhonoured));
    }
    if (v.key->flag.empty() && v.flag.empty()) v.flag_value.clear();
  }
}

}  // namespace

Status check_config(ConfigFile& f) {
  const ConfigValue* model = f.find("model.path");
  const ConfigValue* store = f.find("store.path");
  if (model && store) {
    return contradiction(f, *store, "both model.path (line " + std::to_string(model->line) +
                                        ") and store.path name the model; give one");
  }
  derive_special(f);
  if (Status st = check_router(f); !st.ok()) return st;
  return check_placement(f);
}

}  // namespace moe::config
