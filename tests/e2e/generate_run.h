// The result of one `moe generate --format json --logits-out PATH` run, for the e2e tests
// that compare two runs (HF directory vs store, single process vs mpirun).
#pragma once

#include <filesystem>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moe::testing {

struct GenRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  nlohmann::json json;  // the JSON line of --format json (null if none)
  std::string logits;   // the raw f32 bytes written to --logits-out (empty if none)
};

// Parses the run `r`, whose --logits-out was `logits_path`.
inline GenRun parse_generate_run(const CommandResult& r, const std::string& logits_path) {
  GenRun out;
  out.exit_code = r.exit_code;
  out.output = r.output;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') out.json = nlohmann::json::parse(line, nullptr, false);
  }
  if (std::filesystem::exists(logits_path)) out.logits = read_file(logits_path);
  return out;
}

}  // namespace moe::testing
