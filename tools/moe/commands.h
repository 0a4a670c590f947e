// Subcommands of the `moe` binary. Each add_* registers its flags on `parent` and
// returns the function that runs it (exit status: 0 ok, 1 error, 2 bad usage).
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace moe::cli {

using RunFn = std::function<int()>;

RunFn add_generate_command(CLI::App& parent);
RunFn add_serve_command(CLI::App& parent);
RunFn add_bench_generate_command(CLI::App& bench);
RunFn add_bench_batch_command(CLI::App& bench);
RunFn add_bench_a2a_command(CLI::App& bench);
RunFn add_bench_moe_layer_command(CLI::App& bench);
// `bench hybrid`: fused RS->A2A->AG vs AR then A2A for the hybrid TP x EP MoE block (mpirun).
RunFn add_bench_hybrid_command(CLI::App& bench);
RunFn add_bench_capacity_command(CLI::App& bench);
// `bench perplexity`: held-out NLL through the engine with any engine flags (adaptive k).
RunFn add_bench_perplexity_command(CLI::App& bench);
RunFn add_bench_serve_command(CLI::App& bench);
RunFn add_bench_ckpt_command(CLI::App& bench);
RunFn add_bench_chaos_command(CLI::App& bench);
RunFn add_bench_fp8_command(CLI::App& bench);
// `bench tokenizer`: encode MB/s, ours vs the npm tokenizer references (interleaved).
RunFn add_bench_tokenizer_command(CLI::App& bench);
// `placement plan|eval` (registers both subcommands on `placement`).
RunFn add_placement_command(CLI::App& placement);
// `stats show|plot` (registers both subcommands on `stats`).
RunFn add_stats_command(CLI::App& stats);
// `trace summarize` (a --trace file: slow steps, waits, bytes per link, hot experts).
RunFn add_trace_command(CLI::App& trace);
// `ckpt convert|save|restore|verify|info|gc` (the per-expert checkpoint store).
RunFn add_ckpt_command(CLI::App& ckpt);
// `plan`: the strategy planner's ranked table (src/moe/planner); `plan calibrate`
// (registered on `calibrate`) measures a hardware profile under mpirun.
RunFn add_plan_command(CLI::App& plan);
RunFn add_plan_calibrate_command(CLI::App& calibrate);
// `info`: a model's architecture, parameter counts and KV-cache size from its config.json.
RunFn add_info_command(CLI::App& info);

// Operating the engine: `config show` (the effective YAML config, config_cmd.cc),
// `doctor` (pre-flight checks, doctor_cmd.cc), `deploy k8s` (manifests, deploy_cmd.cc).
RunFn add_config_command(CLI::App& config);
RunFn add_doctor_command(CLI::App& doctor);
RunFn add_deploy_command(CLI::App& deploy);

// The model shipped in the repository, found relative to the working directory, the
// binary, or the source tree.
std::string default_model_dir();

// Prints "error: <message>" to stderr and returns 1.
int fail(const std::string& message);

}  // namespace moe::cli
