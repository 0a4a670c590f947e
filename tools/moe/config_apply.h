// `--config FILE.yaml` on the subcommands that take engine flags (generate, serve, bench
// generate, bench batch): the file's values (src/moe/config/) given to the flags they
// stand for, exactly as if typed, unless the flag itself was given (flags override).
#pragma once

#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "moe/config/config_file.h"

namespace moe::cli {

// Registers --config on `app` (the path lands in *path, which must outlive parsing).
void add_config_flag(CLI::App& app, std::string* path);

// Where a key's effective value comes from.
struct KeyOrigin {
  const config::ConfigKey* key = nullptr;
  std::string value;   // effective value ("" = the flag's default is not printable)
  std::string origin;  // "default", "flag", "FILE:LINE", or "not in this build"
};

// Applies `file` to the flags of `app` (parsed already); `command` ("generate", "serve",
// "bench generate") names it in messages. Keys whose flag `app` lacks: an error for an
// engine key on a subcommand that takes engine flags (this build lacks that flag, e.g.
// --adaptive-k before it exists), a warning otherwise (serving.port on generate). A value
// the flag's own parser refuses: an error naming key and line. router.k is compared with
// the model's num_experts_per_tok. Warnings (the file's and these) are appended to
// *warnings as "FILE:LINE: key: message"; the flags set from the file go to *applied
// (may be null). `lenient` (moe config show): a missing flag and router.k's mismatch are
// warnings. Returns "" or the error.
std::string apply_config(CLI::App& app, const std::string& command, const config::ConfigFile& file,
                         std::vector<std::string>* warnings, std::set<std::string>* applied = nullptr,
                         bool lenient = false);

// For the leaf subcommand `app` parsed (generate, serve, bench generate, bench batch):
// when its --config was given, loads the
// file and applies it; warnings go to stderr (rank 0 only under mpirun). "" or the error.
std::string apply_config_of_parsed(CLI::App& app);

// The effective value and origin of every key in config_keys() on `app` after
// apply_config (`file` may be null: no --config; `applied`: what apply_config set).
std::vector<KeyOrigin> key_origins(const CLI::App& app, const config::ConfigFile* file,
                                   const std::set<std::string>& applied);

}  // namespace moe::cli
