// libFuzzer target: the placement-plan file (parse_plan_json, then validate_plan and
// each layer's placement) and the per-expert load file (parse_load_json). The first
// byte picks which.
#include <cstdint>
#include <string>

#include "moe/placement/load_matrix.h"
#include "moe/placement/placement_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    auto load = moe::parse_load_json(text, "fuzz");
    (void)load;
    return 0;
  }
  auto plan = moe::parse_plan_json(text, "fuzz");
  if (plan.ok() && moe::validate_plan(plan.value()).ok()) {
    for (const auto& layer : plan.value().layers) {
      auto p = moe::layer_placement(layer, plan.value().num_experts);
      (void)p;
    }
    (void)moe::plan_to_json(plan.value());
  }
  return 0;
}
