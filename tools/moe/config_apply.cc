#include "config_apply.h"

#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "doctor_checks.h"
#include "moe/model/config.h"

namespace moe::cli {
namespace {

// Keys of `moe serve` alone (front end and supervisor): elsewhere a warning, not an error.
bool serve_only_key(std::string_view key) {
  return key.substr(0, 8) == "serving." || key == "fault_tolerance.supervise" ||
         key == "fault_tolerance.max_restarts" || key == "fault_tolerance.recovery_timeout";
}

std::string at(const config::ConfigFile& file, const config::ConfigValue& v) {
  return file.where(v) + ": " + std::string(v.key->key);
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// router.k against the model the flags name (after the file is applied).
std::string check_router_k(CLI::App& app, const config::ConfigFile& file, std::vector<std::string>* warnings) {
  const config::ConfigValue* k = file.find("router.k");
  if (k == nullptr) return "";
  const CLI::Option* model = app.get_option_no_throw("--model");
  const std::string dir = model && model->count() > 0 ? model->results().back() : default_model_dir();
  auto cfg = doctor::load_any_model_config(dir);
  if (!cfg.ok()) {
    warnings->push_back(at(file, *k) + ": not checked against the model (" + cfg.status().message() + ")");
    return "";
  }
  if (std::to_string(cfg.value().router.top_k) != k->text) {
    return at(file, *k) + ": " + k->text + " but the model (" + dir + ") routes each token to its num_experts_per_tok = " +
           std::to_string(cfg.value().router.top_k) + " experts; this engine keeps the trained top-k (router.max_k may lower it "
           "under adaptive_k)";
  }
  return "";
}

}  // namespace

void add_config_flag(CLI::App& app, std::string* path) {
  app.add_option("--config", *path,
                 "YAML config file (configs/moe_inference_config.yaml; keys: moe config show); flags given here "
                 "override its values");
}

std::string apply_config(CLI::App& app, const std::string& command, const config::ConfigFile& file,
                         std::vector<std::string>* warnings, std::set<std::string>* applied, bool lenient) {
  for (const config::ConfigWarning& w : file.warnings) {
    warnings->push_back(file.path + ":" + std::to_string(w.line) + ": " + w.key + ": " + w.message);
  }
  const bool engine_command = app.get_option_no_throw("--ep") != nullptr;
  for (const config::ConfigValue& v : file.values) {
    // The extra flag goes with the first: not applied when the command line gave the first
    // (`--ep-overlap false` over pipeline_depth: 4 must not leave --ep-micro-batches 4).
    const CLI::Option* first = v.flag.empty() ? nullptr : app.get_option_no_throw(v.flag);
    const bool first_on_command_line = first != nullptr && first->count() > 0;
    for (const auto& [flag, value] : {std::pair{v.flag, v.flag_value}, std::pair{v.extra_flag, v.extra_flag_value}}) {
      if (flag.empty() || (flag == v.extra_flag && first_on_command_line)) continue;
      CLI::Option* opt = app.get_option_no_throw(flag);
      if (opt == nullptr) {
        if (engine_command && !serve_only_key(v.key->key) && !lenient) {
          return at(file, v) + ": this build's `moe " + command + "` has no " + flag + " flag to apply it to";
        }
        warnings->push_back(at(file, v) + ": not used by `moe " + command + "` (it has no " + flag + ")");
        continue;
      }
      if (opt->count() > 0) continue;  // the flag given on the command line wins
      try {
        opt->add_result(value);
        opt->run_callback();
        if (applied) applied->insert(flag);
      } catch (const CLI::Error& e) {
        return at(file, v) + ": " + v.text + " (as " + flag + " " + value + "): " + e.what();
      }
    }
  }
  std::string bad = check_router_k(app, file, warnings);
  if (!bad.empty() && lenient) {
    warnings->push_back(bad);
    return "";
  }
  return bad;
}

std::string apply_config_of_parsed(CLI::App& app) {
  CLI::App* leaf = &app;
  std::string command;
  for (bool descended = true; descended;) {
    descended = false;
    for (CLI::App* sub : leaf->get_subcommands()) {
      if (sub->parsed()) {
        leaf = sub;
        command += (command.empty() ? "" : " ") + sub->get_name();
        descended = true;
        break;
      }
    }
  }
  // The commands whose --config is an engine config (config show, doctor and deploy k8s
  // read their --config themselves).
  static const std::set<std::string> kEngineCommands = {"generate", "serve", "bench generate", "bench batch"};
  if (kEngineCommands.count(command) == 0) return "";
  const CLI::Option* opt = leaf->get_option_no_throw("--config");
  if (opt == nullptr || opt->count() == 0) return "";
  auto file = config::load_config_file(opt->results().back());
  if (!file.ok()) return file.status().message();
  std::vector<std::string> warnings;
  std::string bad = apply_config(*leaf, command, file.value(), &warnings);
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr || std::string(rank) == "0") {
    for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  return bad;
}

std::vector<KeyOrigin> key_origins(const CLI::App& app, const config::ConfigFile* file,
                                   const std::set<std::string>& applied) {
  std::vector<KeyOrigin> out;
  for (const config::ConfigKey& k : config::config_keys()) {
    KeyOrigin o{&k, "", "default"};
    const config::ConfigValue* v = file ? file->find(k.key) : nullptr;
    const std::string flag = v && !v->flag.empty() ? v->flag : std::string(k.flag);
    const CLI::Option* opt = flag.empty() ? nullptr : app.get_option_no_throw(flag);
    if (!flag.empty() && opt == nullptr) {
      o.origin = "not in this build";
      if (v) o.value = v->text;
    } else if (opt != nullptr && opt->count() > 0) {
      o.value = join(opt->results());
      o.origin = "flag";
      if (applied.count(flag) > 0 && file != nullptr) {
        // Set from the file: by this key, or by another one bound to the same flag.
        const config::ConfigValue* by = v;
        for (const config::ConfigValue& other : file->values) {
          if (by == nullptr && other.flag == flag) by = &other;
        }
        o.origin = by ? file->where(*by) + (by == v ? "" : " (" + std::string(by->key->key) + ")") : "file";
      }
    } else if (opt != nullptr) {
      o.value = opt->get_default_str();
    } else if (v) {
      o.value = v->text;
      o.origin = file->where(*v);
    }
    if (k.type == config::ConfigType::kBool && (o.value == "1" || o.value == "0")) o.value = o.value == "1" ? "true" : "false";
    if (k.flag == "--model" && o.value.empty() && o.origin == "default") o.value = default_model_dir();
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace moe::cli
