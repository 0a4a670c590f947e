// moe config show: the effective configuration (defaults, --config FILE, flags) of
// `moe serve` / `moe generate`, each key with its value, origin and flag.
#include <cstdio>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "config_apply.h"

namespace moe::cli {
namespace {

struct ConfigShowFlags {
  std::string config;
  bool json = false;
};

int run_config_show(const ConfigShowFlags& f, CLI::App& show) {
  // The flags after `show` are serve's (a superset of generate's): parse them into a
  // scratch `serve` command, apply the file like `moe serve --config` would, and read back.
  CLI::App serve{"moe serve (flags for moe config show)", "serve"};
  const RunFn keep_flags_alive = add_serve_command(serve);  // it owns the variables the options write
  std::vector<std::string> args = show.remaining_for_passthrough();  // reversed, as parse() wants
  try {
    serve.parse(args);
  } catch (const CLI::ParseError& e) {
    return fail(std::string("config show: ") + e.what());
  }
  std::unique_ptr<config::ConfigFile> file;
  std::vector<std::string> warnings;
  std::set<std::string> applied;
  if (!f.config.empty()) {
    auto loaded = config::load_config_file(f.config);
    if (!loaded.ok()) return fail(loaded.status().message());
    file = std::make_unique<config::ConfigFile>(std::move(loaded.value()));
    if (std::string bad = apply_config(serve, "serve", *file, &warnings, &applied, /*lenient=*/true); !bad.empty()) return fail(bad);
  }
  const std::vector<KeyOrigin> keys = key_origins(serve, file.get(), applied);
  if (f.json) {
    nlohmann::json out = {{"config", f.config}, {"keys", nlohmann::json::array()}, {"warnings", warnings}};
    for (const KeyOrigin& k : keys) {
      out["keys"].push_back({{"key", k.key->key}, {"flag", k.key->flag}, {"value", k.value}, {"origin", k.origin},
                             {"help", k.key->help}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-40s %-22s %-28s %s\n", "key", "value", "origin", "flag");
  for (const KeyOrigin& k : keys) {
    std::printf("%-40s %-22s %-28s %s\n", std::string(k.key->key).c_str(), k.value.empty() ? "-" : k.value.c_str(),
                k.origin.c_str(), k.key->flag.empty() ? "(none)" : std::string(k.key->flag).c_str());
  }
  for (const std::string& w : warnings) std::printf("warning: %s\n", w.c_str());
  return 0;
}

}  // namespace

RunFn add_config_command(CLI::App& config) {
  auto f = std::make_shared<ConfigShowFlags>();
  auto* show = config.add_subcommand(
      "show", "Print the effective config: every key's value and origin (default, FILE:LINE, flag); any moe serve "
              "flag may follow and overrides the file");
  show->add_option("--config", f->config, "YAML config file");
  show->add_flag("--json", f->json, "JSON instead of a table");
  show->allow_extras();
  return [f, show] { return run_config_show(*f, *show); };
}

}  // namespace moe::cli
