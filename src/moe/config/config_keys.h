// The keys of the YAML config file (`moe generate|serve|bench ... --config FILE.yaml`)
// and the engine flag each stands for. One table (config_keys.cc) is the only place a
// key is bound to a flag, so a key and its flag cannot disagree: the CLI applies a
// file's value exactly as if the flag had been given (same parser, same checks), and a
// flag given on the command line overrides it.
//
// Keys are "section.name" (sections: model, parallelism, expert_placement, alltoall,
// router, profiling, serving, store, fault_tolerance). The design seed's keys
// (moe_inference_config.yaml) are all here; some have no equivalent in this CPU build
// (use_cuda_aware, enable_nvtx, ...): they are accepted and produce a warning saying
// what is used instead (`unhonoured`), never ignored silently.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace moe::config {

enum class ConfigType { kBool, kInt, kNumber, kString, kEnum };
const char* config_type_name(ConfigType t);  // "boolean", "integer", "number", "string", "one of"

struct ConfigKey {
  std::string_view key;   // "router.capacity_factor"
  std::string_view flag;  // "--capacity-factor"; empty: no flag (see config_file.cc's special keys)
  ConfigType type = ConfigType::kString;
  // kInt / kNumber: the inclusive range of valid values.
  double min = -1e300, max = 1e300;
  // kEnum: the valid values, '|'-separated. kBool: how true|false are spelled for the
  // flag ("on|off" for --fused-moe); empty = "true|false".
  std::string_view choices{};
  std::string_view help{};  // what the key means here (printed by `moe config show`)
  // Non-empty: the warning printed when the key is set (only when set to true, for a
  // kBool key with warn_if_true): why this build cannot honour it and what it uses instead.
  std::string_view unhonoured{};
  bool warn_if_true = false;
};

// Every key, in the order `moe config show` prints them.
std::span<const ConfigKey> config_keys();

// The key named `key` ("router.k"), or nullptr.
const ConfigKey* find_config_key(std::string_view key);

// Levenshtein distance (insertions, deletions, substitutions, each 1).
int edit_distance(std::string_view a, std::string_view b);

// The valid key closest to `key` by edit distance (ties: table order); for a name given
// without its section, the key with that name in any section. Empty if nothing is within
// half of `key`'s length.
std::string closest_config_key(std::string_view key);

}  // namespace moe::config
