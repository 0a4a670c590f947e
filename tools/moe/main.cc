// moe: the command-line front end of moe-engine. One file per subcommand.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "commands.h"
#include "config_apply.h"
#include "engine_flags.h"
#include "moe/core/logging.h"
#include "moe/launch.h"

namespace moe::cli {

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

std::string default_model_dir() {
  const std::string rel = "models/tiny-mixtral-shakespeare";
  struct stat st {};
  if (::stat(rel.c_str(), &st) == 0) return rel;
  char exe[PATH_MAX] = {0};
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    for (int up = 0; up < 3; ++up) {
      dir = dir.substr(0, dir.rfind('/'));
      std::string candidate = dir + "/" + rel;
      if (::stat(candidate.c_str(), &st) == 0) return candidate;
    }
  }
  return std::string(MOE_SOURCE_DIR) + "/" + rel;
}

// The first argument left unmatched where `app` expects a subcommand, as an error naming
// it and the level's known subcommands; empty when there is none. CLI11 keeps an unknown
// word as an extra of the level it was read at, and `moe gateway --help` would then print
// the main help and exit 0 (the help flag is processed before the extras). Walks the
// parsed chain (moe, moe bench, ...): a level with subcommands, no extras allowed, and a
// first unmatched argument that is not a flag.
std::string unknown_subcommand_error(const CLI::App& app) {
  const CLI::App* level = &app;
  std::string path = "moe";
  while (level != nullptr) {
    std::vector<std::string> known;
    for (const CLI::App* sub : level->get_subcommands([](const CLI::App*) { return true; })) {
      if (!sub->get_name().empty()) known.push_back(sub->get_name());
    }
    const std::vector<std::string> left = level->remaining(/*recurse=*/false);
    if (!known.empty() && !level->get_allow_extras() && !left.empty() && !left.front().empty() &&
        left.front()[0] != '-') {
      std::string list;
      for (const std::string& name : known) list += (list.empty() ? "" : ", ") + name;
      return path + ": unknown subcommand '" + left.front() + "' (known: " + list + "; see '" + path +
             " --help')";
    }
    const std::vector<CLI::App*> parsed = level->get_subcommands();
    level = parsed.empty() ? nullptr : parsed.front();
    if (level != nullptr) path += " " + level->get_name();
  }
  return {};
}

}  // namespace moe::cli

int main(int argc, char** argv) {
  CLI::App app{"moe: Mixture-of-Experts inference engine (generate, serve, stats, placement, ckpt, bench)"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")->capture_default_str();

  std::function<int()> run;
  auto* generate = app.add_subcommand("generate", "Generate text from a prompt");
  auto run_generate = moe::cli::add_generate_command(*generate);
  auto* serve = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  auto run_serve = moe::cli::add_serve_command(*serve);
  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* bench_generate = bench->add_subcommand("generate", "Prefill and decode tokens/s vs the memory-bandwidth bound");
  auto run_bench_generate = moe::cli::add_bench_generate_command(*bench_generate);
  auto* bench_batch =
      bench->add_subcommand("batch", "Continuous-batching engine alone: decode tokens/s vs requests in the batch");
  auto run_bench_batch = moe::cli::add_bench_batch_command(*bench_batch);
  auto* bench_a2a = bench->add_subcommand("a2a", "EP dispatch+combine vs plain MPI_Alltoallv and memcpy (under mpirun)");
  auto run_bench_a2a = moe::cli::add_bench_a2a_command(*bench_a2a);
  auto* bench_moe_layer =
      bench->add_subcommand("moe-layer", "MoE layer time per stage (router, capacity, experts) for each router");
  auto run_bench_moe_layer = moe::cli::add_bench_moe_layer_command(*bench_moe_layer);
  auto* bench_hybrid = bench->add_subcommand(
      "hybrid", "Hybrid TP x EP MoE block: fused RS->A2A->AG vs AR then A2A, 16..4096 tokens (under mpirun)");
  auto run_bench_hybrid = moe::cli::add_bench_hybrid_command(*bench_hybrid);
  auto* bench_capacity =
      bench->add_subcommand("capacity", "Dropped fraction vs capacity factor on real routing counts (drop study)");
  auto run_bench_capacity = moe::cli::add_bench_capacity_command(*bench_capacity);
  auto* bench_perplexity = bench->add_subcommand(
      "perplexity", "Held-out NLL / perplexity through the engine, under any engine flags (e.g. --adaptive-k)");
  auto run_bench_perplexity = moe::cli::add_bench_perplexity_command(*bench_perplexity);
  auto* bench_serve = bench->add_subcommand(
      "serve", "Serving benchmark of an OpenAI-compatible server (TTFT, TPOT, ITL, throughput; as vLLM's)");
  auto run_bench_serve = moe::cli::add_bench_serve_command(*bench_serve);
  auto* bench_ckpt = bench->add_subcommand(
      "ckpt", "Checkpoint store: codec ratios and MB/s, restore GB/s vs cat and memcpy, incremental save, cold start");
  auto run_bench_ckpt = moe::cli::add_bench_ckpt_command(*bench_ckpt);
  auto* bench_chaos = bench->add_subcommand(
      "chaos", "Fault injection: kill, stop or corrupt a rank of a serving EP group; lost requests, hangs, recovery");
  auto run_bench_chaos = moe::cli::add_bench_chaos_command(*bench_chaos);
  auto* bench_fp8 = bench->add_subcommand(
      "fp8", "FP8 weights in the GEMV kernel vs dequantised to bf16: bytes per decode token, GEMV/s (DeepSeek expert shapes)");
  auto run_bench_fp8 = moe::cli::add_bench_fp8_command(*bench_fp8);
  auto* bench_tokenizer = bench->add_subcommand(
      "tokenizer", "Tokenizer encode MB/s on a prompt set, ours vs the npm references (tokenizers, @huggingface/tokenizers)");
  auto run_bench_tokenizer = moe::cli::add_bench_tokenizer_command(*bench_tokenizer);
  auto* placement = app.add_subcommand("placement", "Expert placement: plan replicas and slots from per-expert load");
  placement->require_subcommand(1);
  auto run_placement = moe::cli::add_placement_command(*placement);
  auto* stats = app.add_subcommand("stats", "Per-expert load statistics: show a table, plot a heatmap");
  auto run_stats = moe::cli::add_stats_command(*stats);
  auto* trace = app.add_subcommand("trace", "Per-step traces of --trace: summarize (why a step was slow)");
  auto run_trace = moe::cli::add_trace_command(*trace);
  auto* ckpt = app.add_subcommand("ckpt", "Per-expert checkpoint store: convert, save, restore, verify, info, gc");
  auto run_ckpt = moe::cli::add_ckpt_command(*ckpt);
  auto* info = app.add_subcommand("info", "Model size: parameters (total, active), KV cache per token, from config.json");
  auto run_info = moe::cli::add_info_command(*info);
  auto* plan = app.add_subcommand(
      "plan", "Parallel strategy planner: ranked TP/EP/hybrid strategies with predicted TTFT, TPOT, memory");
  auto run_plan = moe::cli::add_plan_command(*plan);
  auto* plan_calibrate = plan->add_subcommand(
      "calibrate", "Measure alpha/beta per collective and link tier, peak FLOP/s and bandwidth (under mpirun)");
  auto run_plan_calibrate = moe::cli::add_plan_calibrate_command(*plan_calibrate);
  // Operating the engine: the YAML config, the pre-flight checks, Kubernetes manifests.
  auto* config = app.add_subcommand("config", "The YAML config file: show the effective values and their origins");
  config->require_subcommand(1);
  auto run_config = moe::cli::add_config_command(*config);
  auto* doctor = app.add_subcommand(
      "doctor", "Pre-flight checks: MPI launch, link bandwidth vs a profile, memory per rank, store, ports, GPU");
  auto run_doctor = moe::cli::add_doctor_command(*doctor);
  auto* deploy = app.add_subcommand("deploy", "Deployment manifests (Kubernetes) from a config file");
  deploy->require_subcommand(1);
  auto run_deploy = moe::cli::add_deploy_command(*deploy);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // An unknown subcommand is a usage error even beside --help (which would otherwise
    // print the help of the level above and exit 0).
    if (std::string bad = moe::cli::unknown_subcommand_error(app); !bad.empty()) {
      moe::cli::fail(bad);
      return 2;
    }
    // CLI11 checks required flags before unknown ones, so `moe generate --bogus` would say
    // "--prompt is required": an unknown flag is the first mistake to name.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      const std::vector<std::string> extra = app.remaining(/*recurse=*/true);
      if (!extra.empty()) return app.exit(CLI::ExtrasError(extra)) == 0 ? 0 : 2;
    }
    // --help / --version exit 0; any usage error exits 2 (commands.h), not CLI11's 1xx codes.
    return app.exit(e) == 0 ? 0 : 2;
  }
  // --config FILE.yaml (generate, serve, bench generate/batch): the file's values reach the
  // flags not given on the command line, before anything reads them.
  if (std::string bad = moe::cli::apply_config_of_parsed(app); !bad.empty()) {
    moe::cli::fail(bad);
    return 2;
  }
  if (!moe::init_logging(log_level)) return moe::cli::fail("--log-level: unknown level '" + log_level + "'");
  // Under mpirun every subcommand runs with MPI initialised (finalised on return).
  // (--comm-backend gloo: mpirun only starts the processes; MPI stays uninitialised.)
  auto mpi = moe::backend_uses_mpi(moe::cli::requested_comm_backend(argc, argv))
                 ? moe::MpiSession::start(&argc, &argv)
                 : moe::StatusOr<moe::MpiSession>(moe::MpiSession::start_without_mpi());
  if (!mpi.ok()) return moe::cli::fail(mpi.status().message());
  if (generate->parsed()) return run_generate();
  if (serve->parsed()) return run_serve();
  if (bench_generate->parsed()) return run_bench_generate();
  if (bench_batch->parsed()) return run_bench_batch();
  if (bench_a2a->parsed()) return run_bench_a2a();
  if (bench_moe_layer->parsed()) return run_bench_moe_layer();
  if (bench_hybrid->parsed()) return run_bench_hybrid();
  if (bench_capacity->parsed()) return run_bench_capacity();
  if (bench_perplexity->parsed()) return run_bench_perplexity();
  if (bench_serve->parsed()) return run_bench_serve();
  if (bench_ckpt->parsed()) return run_bench_ckpt();
  if (bench_chaos->parsed()) return run_bench_chaos();
  if (bench_fp8->parsed()) return run_bench_fp8();
  if (bench_tokenizer->parsed()) return run_bench_tokenizer();
  if (placement->parsed()) return run_placement();
  if (stats->parsed()) return run_stats();
  if (trace->parsed()) return run_trace();
  if (ckpt->parsed()) return run_ckpt();
  if (info->parsed()) return run_info();
  if (plan_calibrate->parsed()) return run_plan_calibrate();
  if (plan->parsed()) return run_plan();
  if (config->parsed()) return run_config();
  if (doctor->parsed()) return run_doctor();
  if (deploy->parsed()) return run_deploy();
  return 2;
}
