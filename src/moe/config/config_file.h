// Reading a YAML config file (`--config FILE.yaml`) against the key table
// (config_keys.h): every value is type- and range-checked and turned into the spelling
// of its flag; the file's contradictions are refused. Nothing is applied here: the CLI
// (tools/moe/config_apply.cc) gives each value to its flag unless the flag was given on
// the command line (flags override the file).
//
// Errors (InvalidArgument) name the file, the line and the key, e.g.
//   "c.yaml:12: router.min_k: 8 is greater than router.max_k (4, line 13)"
//   "c.yaml:3: expert_placement.replicaton_cap: unknown key (did you mean
//    expert_placement.replication_cap?)"
//   "c.yaml:5:7: YAML syntax error: ..." (yaml-cpp's message)
// Pure functions; the file is read once by load_config_file().
#pragma once

#include <string>
#include <vector>

#include "moe/config/config_keys.h"
#include "moe/status.h"

namespace moe::config {

struct ConfigValue {
  const ConfigKey* key = nullptr;  // into config_keys()
  std::string text;                // the value as written in the file ("true", "1.25", "top_k")
  // What the flag receives (bool spelled per ConfigKey::choices; alltoall.implementation
  // custom_ibverbs -> "mpi"; pipeline_depth -> --ep-overlap "true"/"false", plus
  // extra_flag). Empty for keys with no flag.
  std::string flag_value;
  std::string flag;  // the flag it sets (key->flag, or a derived one), empty if none
  // A second flag the value also sets (alltoall.pipeline_depth N >= 2: --ep-micro-batches
  // N beside --ep-overlap true), empty if none.
  std::string extra_flag, extra_flag_value;
  int line = 0;      // 1-based line in the file
};

struct ConfigWarning {
  std::string key;
  int line = 0;
  std::string message;  // what this build does instead
};

struct ConfigFile {
  std::string path;
  std::vector<ConfigValue> values;  // in file order
  std::vector<ConfigWarning> warnings;
  // The value of `key`, or nullptr when the file does not set it.
  const ConfigValue* find(std::string_view key) const;
  // "path:line" of a value (for messages and `moe config show`).
  std::string where(const ConfigValue& v) const { return path + ":" + std::to_string(v.line); }
};

// Parses `yaml_text` (`source` names it in messages).
StatusOr<ConfigFile> parse_config(const std::string& yaml_text, const std::string& source);
// Reads `path` (NotFound naming it) and parses it.
StatusOr<ConfigFile> load_config_file(const std::string& path);

// Cross-key checks of a parsed file (config_checks.cc): min_k <= max_k, adaptive_k with a
// fixed k (min_k == max_k), min_k/max_k without adaptive_k, max_k above router.k,
// capacity_factor with the dropless policy, the placement strategy against plan_file and
// rebalance_every, model.path with store.path. Also derives the flags of the special keys
// (strategy node_replicated -> --rebalance-every 32 unless set). Adds warnings.
Status check_config(ConfigFile& file);

}  // namespace moe::config
