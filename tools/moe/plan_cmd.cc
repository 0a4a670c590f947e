// moe plan: the strategy planner (src/moe/planner, docs/planner.md). From a model's
// config.json, a hardware profile and a cluster shape, a ranked table of the feasible
// parallel strategies (attention TP/DP x MoE TP/EP/hybrid, fused or not) with predicted
// TTFT, TPOT, throughput, the comm/compute breakdown and memory per device; infeasible
// strategies with their reason; --json for the same as JSON.
//   moe plan --model config.json --profile profiles/h100_sxm_8gpu.json --nodes 16 --devices-per-node 8
//            --batch 256 --input-len 1000 --output-len 1000
// `moe plan calibrate` (plan_calibrate_cmd.cc) measures a profile on this machine.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/model/config.h"
#include "moe/planner/plan.h"

namespace moe::cli {
namespace {

struct PlanFlags {
  std::string model, profile;
  int nodes = 1, devices_per_node = 0;  // 0 = the profile's devices_per_node
  planner::Workload work;
  int top = 0;  // rows of the ranked table (0 = all)
  PlanFlags() { work.prefill_chunk = 16384; }
  bool json = false;
};

StatusOr<ModelConfig> read_config(const std::string& path) {
  if (path.empty()) return invalid_argument("--model is required: a config.json file or a model directory");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_model_config(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("--model " + path + ": cannot open");
  std::ostringstream os;
  os << in.rdbuf();
  return parse_model_config(os.str(), path);
}

double ms(double s) { return s * 1e3; }

nlohmann::json step_json(const planner::StepCost& c) {
  return {{"attention_ms", ms(c.attention_s)}, {"dense_mlp_ms", ms(c.dense_mlp_s)},
          {"moe_ms", ms(c.moe_s)},             {"lm_head_ms", ms(c.head_s)},
          {"compute_ms", ms(c.compute_s())},   {"intra_node_comm_ms", ms(c.intra_comm_s)},
          {"inter_node_comm_ms", ms(c.inter_comm_s)}, {"comm_ms", ms(c.comm_s)},
          {"total_ms", ms(c.total_s)}};
}

nlohmann::json strategy_json(const planner::Strategy& s) {
  return {{"label", s.label()},   {"attention_tp", s.attn_tp}, {"attention_dp", s.attn_dp},
          {"moe", s.moe_kind()},  {"moe_tp", s.moe_tp},        {"moe_ep", s.moe_ep},
          {"fused", s.fused}};
}

nlohmann::json result_json(const planner::StrategyResult& r) {
  nlohmann::json j = {{"strategy", strategy_json(r.strategy)}};
  if (!r.feasible) {
    j["reason"] = r.reason;
    if (!r.out_of_memory) return j;
  }
  j["memory_gb"] = {{"weights", r.memory.weights / 1e9},        {"expert_replicas", r.memory.expert_replicas / 1e9},
                    {"kv_cache", r.memory.kv_cache / 1e9},      {"buffers", r.memory.buffers / 1e9},
                    {"reserved", r.memory.reserved / 1e9},      {"total", r.memory.total() / 1e9}};
  if (!r.feasible) return j;
  j["batch"] = r.batch;
  j["ttft_ms"] = ms(r.ttft_s);
  j["tpot_ms"] = ms(r.tpot_s);
  j["throughput_tok_s"] = r.throughput;
  j["prefill"] = step_json(r.prefill);
  j["decode"] = step_json(r.decode);
  return j;
}

void print_table(const planner::PlanResult& r, const PlanFlags& f, const planner::HardwareProfile& hw) {
  std::printf("plan: %s on %d x %d (%s), ", f.model.c_str(), f.nodes, f.devices_per_node, hw.name.c_str());
  if (f.work.batch > 0) {
    std::printf("batch %lld", static_cast<long long>(f.work.batch));
  } else {
    std::printf("%.3g req/s", f.work.request_rate);
  }
  std::printf(", input %lld, output %lld tokens; ranked by %s\n\n", static_cast<long long>(f.work.input_len),
              static_cast<long long>(f.work.output_len), r.objective.c_str());
  std::printf("%-4s %-44s %9s %9s %10s %6s %28s %28s %8s\n", "rank", "strategy", "TTFT ms", "TPOT ms", "tok/s",
              "batch", "prefill cmp/intra/inter ms", "decode cmp/intra/inter ms", "mem GB");
  int rank = 0;
  for (const auto& s : r.feasible) {
    if (f.top > 0 && rank >= f.top) break;
    ++rank;
    char pre[64], dec[64];
    std::snprintf(pre, sizeof pre, "%.1f/%.1f/%.1f", ms(s.prefill.compute_s()), ms(s.prefill.intra_comm_s),
                  ms(s.prefill.inter_comm_s));
    std::snprintf(dec, sizeof dec, "%.2f/%.2f/%.2f", ms(s.decode.compute_s()), ms(s.decode.intra_comm_s),
                  ms(s.decode.inter_comm_s));
    std::printf("%-4d %-44s %9.1f %9.2f %10.0f %6lld %28s %28s %8.1f\n", rank, s.strategy.label().c_str(),
                ms(s.ttft_s), ms(s.tpot_s), s.throughput, static_cast<long long>(s.batch), pre, dec,
                s.memory.total() / 1e9);
  }
  if (!r.infeasible.empty()) {
    std::printf("\ninfeasible:\n");
    for (const auto& s : r.infeasible) std::printf("  %-44s %s\n", s.strategy.label().c_str(), s.reason.c_str());
  }
}

int run_plan(const PlanFlags& flags) {
  PlanFlags f = flags;
  auto config = read_config(f.model);
  if (!config.ok()) return fail(config.status().message());
  if (f.profile.empty()) return fail("--profile is required: a hardware profile JSON (profiles/*.json or moe plan calibrate)");
  auto hw = planner::load_hardware_profile(f.profile);
  if (!hw.ok()) return fail(hw.status().message());
  if (f.devices_per_node == 0) f.devices_per_node = hw->devices_per_node;
  auto result = planner::plan(*config, *hw, {f.nodes, f.devices_per_node}, f.work);
  if (!result.ok()) return fail(result.status().message());
  if (result->feasible.empty()) return fail(planner::no_fit_message(*result, *hw, {f.nodes, f.devices_per_node}));
  if (f.json) {
    nlohmann::json j = {{"model", f.model},
                        {"profile", hw->name},
                        {"nodes", f.nodes},
                        {"devices_per_node", f.devices_per_node},
                        {"workload",
                         {{"batch", f.work.batch},
                          {"request_rate", f.work.request_rate},
                          {"input_len", f.work.input_len},
                          {"output_len", f.work.output_len},
                          {"a2a_skew", f.work.a2a_skew},
                          {"activation_bytes", f.work.activation_bytes},
                          {"kv_bytes", f.work.kv_bytes},
                          {"overlap_compute", f.work.overlap_compute},
                          {"expert_replicas", f.work.expert_replicas},
                          {"driver_only_attention", f.work.driver_only_attention},
                          {"prefill_chunk", f.work.prefill_chunk}}},
                        {"objective", result->objective},
                        {"feasible", nlohmann::json::array()},
                        {"infeasible", nlohmann::json::array()}};
    for (const auto& r : result->feasible) j["feasible"].push_back(result_json(r));
    for (const auto& r : result->infeasible) j["infeasible"].push_back(result_json(r));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_table(*result, f, *hw);
  }
  return 0;
}

}  // namespace

RunFn add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  app.add_option("--model", f->model, "The model: its config.json or a model directory");
  app.add_option("--profile", f->profile, "Hardware profile JSON (profiles/*.json, or written by `moe plan calibrate`)");
  app.add_option("--nodes", f->nodes, "Nodes")->capture_default_str();
  app.add_option("--devices-per-node", f->devices_per_node, "Devices per node (default: the profile's)");
  app.add_option("--batch", f->work.batch, "Workload: concurrent requests (batch mode)");
  app.add_option("--request-rate", f->work.request_rate, "Workload: arriving requests per second (rate mode)");
  app.add_option("--input-len", f->work.input_len, "Prompt tokens per request");
  app.add_option("--output-len", f->work.output_len, "Generated tokens per request");
  app.add_option("--a2a-skew", f->work.a2a_skew, "Busiest rank's all-to-all load over the mean (>= 1)")
      ->capture_default_str();
  app.add_option("--expert-replicas", f->work.expert_replicas, "Redundant experts per device (memory)")
      ->capture_default_str();
  app.add_option("--activation-bytes", f->work.activation_bytes,
                 "Bytes per activation element on the wire and in buffers (2 = bf16; this engine's default a2a is f32: 4)")
      ->capture_default_str();
  app.add_option("--kv-bytes", f->work.kv_bytes, "Bytes per KV-cache value (2 = bf16; this engine's cache: 4)")
      ->capture_default_str();
  app.add_flag("--overlap-compute", f->work.overlap_compute,
               "Two micro-batches overlap all communication with compute (DualPipe-like)");
  app.add_flag("--driver-attention", f->work.driver_only_attention,
               "Attention on the driver's TP group only, as this engine runs --tp/--ep (default: DP attention)");
  app.add_option("--prefill-chunk", f->work.prefill_chunk,
                 "Prefill tokens per attention replica per step (0 = the whole batch at once)")
      ->capture_default_str();
  app.add_option("--top", f->top, "Rows of the ranked table (0 = all)")->capture_default_str();
  app.add_flag("--json", f->json, "Print JSON instead of the table");
  return [f]() { return run_plan(*f); };
}

}  // namespace moe::cli
