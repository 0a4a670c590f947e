// The PyTorch golden cases of a shipped model (tests/data/golden/<name>: index.json, one
// JSON per case with its prompt and greedy tokens, the reference final-position logits
// in an f32 file; made by tools/reference/make_golden.py), for tests that compare an
// engine option's prompt logits against them.
#pragma once

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moe/engine.h"
#include "test_util.h"

namespace moe::testing {

struct GoldenCase {
  std::string name;
  nlohmann::json gold;        // prompt_token_ids, greedy_token_ids, greedy_margins, ...
  std::vector<float> logits;  // the reference's final-position logits
  double range = 0;           // max - min of logits
};

inline std::vector<GoldenCase> load_golden_cases(const std::string& dir) {
  std::vector<GoldenCase> out;
  const auto index = nlohmann::json::parse(read_file(dir + "/index.json"));
  for (const auto& entry : index["cases"]) {
    GoldenCase c;
    c.name = entry["name"].get<std::string>();
    c.gold = nlohmann::json::parse(read_file(dir + "/" + entry["json"].get<std::string>()));
    c.logits = read_f32(dir + "/" + c.gold["logits_file"].get<std::string>());
    const auto [mn, mx] = std::minmax_element(c.logits.begin(), c.logits.end());
    c.range = *mx - *mn;
    out.push_back(std::move(c));
  }
  return out;
}

// The case's prompt, greedy, one output token, with the prompt's logits returned.
inline GenerateRequest golden_prompt_request(const GoldenCase& c) {
  GenerateRequest req;
  req.prompt_token_ids = c.gold["prompt_token_ids"].get<std::vector<int>>();
  req.max_tokens = 1;
  req.sampling.temperature = 0;
  req.return_prompt_logits = true;
  return req;
}

// max |a[i] - b[i]| over the shorter of the two.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

// Whether the reference's first greedy token is decided beyond `error` (its top-2
// margin is more than twice it), so an engine within that error must pick it too.
inline bool first_token_decided(const GoldenCase& c, double error) {
  const auto margins = c.gold["greedy_margins"].get<std::vector<double>>();
  return !margins.empty() && margins[0] > 2 * error;
}

}  // namespace moe::testing
