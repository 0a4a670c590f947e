// moe generate: text from a prompt, streamed, or one JSON object with --format json.
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/engine.h"
#include "moe/stats/expert_load_stats.h"

namespace moe::cli {
namespace {

struct GenerateFlags {
  std::string model;
  std::string prompt;
  int max_tokens = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  int64_t seed = -1;
  std::string format = "text";
  std::string logits_out;
  int threads = 0;
  int ep = 1;
  int ranks_per_node = 0;
  bool ep_overlap = false;
  std::string a2a_dtype = "f32";
  std::string a2a_mode = "auto";
  int max_nodes_per_token = 0;
  double capacity_factor = 1.0;
  std::string overflow_policy;  // empty: drop when --capacity-factor is given, else dropless
  bool capacity_given = false;
  std::string stats_out;
  double stats_ema_decay = 0.9;
  std::string placement;
  int rebalance_every = 0;
  int slots_per_rank = 0;
  int replica_cap = 4;
  double rebalance_min_gain = 0.1;
  int test_corrupt_migration_rank = -1;
};

int run_generate(const GenerateFlags& f) {
  if (f.prompt.empty()) return fail("--prompt is empty; give the text to continue");
  if (f.max_tokens < 0) return fail("--max-tokens must be >= 0 (got " + std::to_string(f.max_tokens) + ")");
  if (f.threads < 0) return fail("--threads must be >= 0 (got " + std::to_string(f.threads) + ")");
  // Sampling flags are checked here, before loading the model, so the message names the flag.
  if (!(f.temperature >= 0.0f) || !std::isfinite(f.temperature)) {
    return fail("--temperature must be a finite number >= 0 (got " + std::to_string(f.temperature) + ")");
  }
  if (f.top_k < 0) return fail("--top-k must be >= 0 (got " + std::to_string(f.top_k) + ")");
  if (!(f.top_p > 0.0f && f.top_p <= 1.0f)) {
    return fail("--top-p must be in (0, 1] (got " + std::to_string(f.top_p) + ")");
  }
  if (f.ep < 1) return fail("--ep must be >= 1 (got " + std::to_string(f.ep) + ")");
  if (f.max_nodes_per_token < 0) {
    return fail("--max-nodes-per-token must be >= 0 (got " + std::to_string(f.max_nodes_per_token) + ")");
  }
  if (f.ranks_per_node < 0) return fail("--ranks-per-node must be >= 0 (got " + std::to_string(f.ranks_per_node) + ")");
  if (f.capacity_given && !(f.capacity_factor > 0 && std::isfinite(f.capacity_factor))) {
    return fail("--capacity-factor must be a positive number (got " + std::to_string(f.capacity_factor) + ")");
  }
  if (f.overflow_policy == "dropless" && f.capacity_given) {
    return fail("--capacity-factor has no effect with --overflow-policy dropless; use drop or reroute");
  }
  if (f.rebalance_every < 0) return fail("--rebalance-every must be >= 0 (got " + std::to_string(f.rebalance_every) + ")");
  if (f.slots_per_rank < 0) return fail("--slots-per-rank must be >= 0 (got " + std::to_string(f.slots_per_rank) + ")");
  if (f.replica_cap < 1) return fail("--replica-cap must be >= 1 (got " + std::to_string(f.replica_cap) + ")");
  if (!(f.rebalance_min_gain >= 0 && f.rebalance_min_gain < 1)) {
    return fail("--rebalance-min-gain must be in [0, 1) (got " + std::to_string(f.rebalance_min_gain) + ")");
  }
  if ((!f.placement.empty() || f.rebalance_every > 0) && !launched_under_mpi()) {
    return fail(std::string(f.placement.empty() ? "--rebalance-every" : "--placement") +
                " places experts on EP ranks: run under mpirun with --ep N");
  }
  if (!(f.stats_ema_decay >= 0 && f.stats_ema_decay < 1)) {
    return fail("--stats-ema-decay must be in [0, 1) (got " + std::to_string(f.stats_ema_decay) + ")");
  }
  std::unique_ptr<Communicator> comm;
  if (f.ep > 1 || launched_under_mpi()) {
    if (!launched_under_mpi()) {
      return fail("--ep " + std::to_string(f.ep) + " needs " + std::to_string(f.ep) +
                  " processes: run it as mpirun -np " + std::to_string(f.ep) + " moe generate --ep " +
                  std::to_string(f.ep) + " ...");
    }
    MpiOptions mo;
    mo.ranks_per_node = f.ranks_per_node;
    auto c = make_mpi_communicator(mo);
    if (!c.ok()) return fail(c.status().message());
    comm = std::move(c).value();
    if (comm->size() != f.ep) {
      return fail("--ep " + std::to_string(f.ep) + " but mpirun started " + std::to_string(comm->size()) +
                  " ranks; they must match");
    }
  }
  const int rank = comm ? comm->rank() : 0;
  EngineOptions options{.model_dir = f.model.empty() ? default_model_dir() : f.model, .num_threads = f.threads,
                        .comm = comm.get()};
  options.ep_overlap = f.ep_overlap;
  options.a2a_bf16 = f.a2a_dtype == "bf16";
  options.a2a_hierarchical = f.a2a_mode == "auto" ? -1 : (f.a2a_mode == "hierarchical" ? 1 : 0);
  options.max_nodes_per_token = f.max_nodes_per_token;
  options.overflow_policy = !f.overflow_policy.empty() ? f.overflow_policy : (f.capacity_given ? "drop" : "dropless");
  options.capacity_factor = f.capacity_factor;
  options.stats_ema_decay = f.stats_ema_decay;
  options.placement_file = f.placement;
  options.rebalance_every = f.rebalance_every;
  options.slots_per_rank = f.slots_per_rank;
  options.replica_cap = f.replica_cap;
  options.rebalance_min_gain = f.rebalance_min_gain;
  options.test_corrupt_migration_rank = f.test_corrupt_migration_rank;
  auto engine = Engine::open(options);
  if (!engine.ok()) {
    return fail(comm ? "rank " + std::to_string(rank) + ": " + engine.status().message() : engine.status().message());
  }
  if (rank != 0) {
    Status st = engine.value()->run_worker();
    if (!st.ok()) return fail("rank " + std::to_string(rank) + ": " + st.message());
    return 0;
  }
  // Rank 0 (or the only process) generates; workers are released when it returns.
  struct StopWorkers {
    Engine* e;
    ~StopWorkers() { (void)e->stop_workers(); }
  } stop_workers{engine.value().get()};
  if (f.max_tokens > engine.value()->info().max_context) {
    return fail("--max-tokens " + std::to_string(f.max_tokens) + " exceeds the model's context of " +
                std::to_string(engine.value()->info().max_context) + " tokens");
  }
  GenerateRequest req;
  req.prompt = f.prompt;
  req.max_tokens = f.max_tokens;
  req.sampling.temperature = f.temperature;
  req.sampling.top_k = f.top_k;
  req.sampling.top_p = f.top_p;
  if (f.seed >= 0) req.sampling.seed = static_cast<uint64_t>(f.seed);
  req.return_prompt_logits = !f.logits_out.empty();

  const bool text_mode = f.format == "text";
  TokenCallback stream;
  if (text_mode) {
    std::fputs(f.prompt.c_str(), stdout);
    std::fflush(stdout);
    stream = [](int, const std::string& delta) {
      std::fputs(delta.c_str(), stdout);
      std::fflush(stdout);
      return true;
    };
  }
  auto result = engine.value()->generate(req, stream);
  if (!result.ok()) {
    if (text_mode) std::fputs("\n", stdout);
    std::string msg = result.status().message();
    return fail(msg);
  }
  const GenerateResult& r = result.value();
  if (f.rebalance_every > 0) {
    const Engine::EpStats ep = engine.value()->ep_stats();
    std::fprintf(stderr, "[rebalancing: %lld plans applied, %lld failed, %lld not worth moving, %lld experts moved, "
                 "%.1f ms]\n",
                 static_cast<long long>(ep.rebalances), static_cast<long long>(ep.rebalance_failures),
                 static_cast<long long>(ep.rebalances_skipped), static_cast<long long>(ep.experts_moved),
                 ep.rebalance_seconds * 1e3);
  }
  if (!f.stats_out.empty()) {
    Status st = engine.value()->expert_load_stats().write_json_file(f.stats_out);
    if (!st.ok()) return fail("--stats-out: " + st.message());
  }
  if (!f.logits_out.empty()) {
    std::ofstream out(f.logits_out, std::ios::binary);
    out.write(reinterpret_cast<const char*>(r.prompt_logits.data()),
              static_cast<std::streamsize>(r.prompt_logits.size() * sizeof(float)));
    if (!out) return fail("cannot write --logits-out file " + f.logits_out);
  }
  if (text_mode) {
    std::fputs("\n", stdout);
    const double prefill_tps = r.prefill_seconds > 0 ? r.prompt_token_ids.size() / r.prefill_seconds : 0;
    const size_t steps = r.output_token_ids.empty() ? 0 : r.output_token_ids.size() - 1;
    const double decode_tps = r.decode_seconds > 0 ? steps / r.decode_seconds : 0;
    std::fprintf(stderr, "[prompt %zu tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s | finish: %s]\n",
                 r.prompt_token_ids.size(), prefill_tps, r.output_token_ids.size(), decode_tps,
                 r.finish_reason.c_str());
    if (comm) {
      const Engine::EpStats ep = engine.value()->ep_stats();
      std::fprintf(stderr, "[expert parallel: %d ranks, %lld MoE exchanges, %.1f MB sent by rank 0, "
                   "comm wait %.1f ms, expert compute %.1f ms]\n",
                   comm->size(), static_cast<long long>(ep.calls), ep.bytes_sent / 1e6, ep.comm_wait_seconds * 1e3,
                   ep.compute_seconds * 1e3);

    }
  } else {
    nlohmann::json j;
    j["prompt_token_ids"] = r.prompt_token_ids;
    j["output_token_ids"] = r.output_token_ids;
    j["text"] = r.text;
    j["finish_reason"] = r.finish_reason;
    // Invalid UTF-8 (a cut multi-byte character) is replaced, never thrown.
    std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace

RunFn add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  app.add_option("--model", f->model, "Model directory (HF format); default: the shipped tiny-mixtral-shakespeare");
  app.add_option("--prompt", f->prompt, "Text to continue")->required();
  app.add_option("--max-tokens", f->max_tokens, "New tokens at most (stops earlier at EOS)")->capture_default_str();
  app.add_option("--temperature", f->temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", f->top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
  app.add_option("--top-p", f->top_p, "Nucleus sampling mass in (0, 1]; 1 = off")->capture_default_str();
  app.add_option("--seed", f->seed, "Random seed (reproducible output); default: random");
  app.add_option("--format", f->format, "Output: text (streamed) or json (one object)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--logits-out", f->logits_out, "Write the last prompt position's logits (f32 little-endian)");
  app.add_option("--threads", f->threads, "CPU threads; 0 = all cores")->capture_default_str();
  app.add_option("--ep", f->ep, "Expert-parallel ranks (run under mpirun -np N)")->capture_default_str();
  app.add_option("--ranks-per-node", f->ranks_per_node,
                 "Emulate nodes of K consecutive ranks (0 = real nodes from MPI)")->capture_default_str();
  app.add_flag("--ep-overlap", f->ep_overlap, "Overlap all-to-all with expert compute (two micro-batches)");
  app.add_option("--a2a-dtype", f->a2a_dtype, "Dispatch/combine activation dtype: f32 (exact) or bf16 (half the bytes)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  app.add_option("--a2a-mode", f->a2a_mode,
                 "flat, hierarchical (inter-node then intra-node), or auto (hierarchical when ranks span nodes)")
      ->check(CLI::IsMember({"auto", "flat", "hierarchical"}))
      ->capture_default_str();
  app.add_option("--max-nodes-per-token", f->max_nodes_per_token,
                 "Node-limited routing: experts of each token on at most M nodes (0 = off)")
      ->capture_default_str();
  auto* capacity = app.add_option("--capacity-factor", f->capacity_factor,
                                  "Expert capacity: ceil(tokens * top_k * F / experts) per expert and step "
                                  "(implies --overflow-policy drop unless given)");
  app.add_option("--overflow-policy", f->overflow_policy,
                 "What happens past capacity: dropless (no capacity; default), drop, or reroute "
                 "(to the token's next-best expert with room)")
      ->check(CLI::IsMember({"dropless", "drop", "reroute"}));
  app.add_option("--stats-out", f->stats_out,
                 "Write per-layer, per-expert load statistics (JSON; plot with moe stats plot)");
  app.add_option("--stats-ema-decay", f->stats_ema_decay, "Decay of the per-step load EMA in --stats-out")
      ->capture_default_str();
  app.add_option("--placement", f->placement,
                 "Static expert placement plan (moe placement plan output) for EP ranks");
  app.add_option("--rebalance-every", f->rebalance_every,
                 "Re-plan the expert placement from the load statistics every N decode steps (0 = never; EP only)")
      ->capture_default_str();
  app.add_option("--slots-per-rank", f->slots_per_rank,
                 "Expert slots per rank when rebalancing (spare slots hold replicas of hot experts); "
                 "0 = ceil(experts / ranks)")
      ->capture_default_str();
  app.add_option("--replica-cap", f->replica_cap, "Most replicas of one expert when rebalancing")->capture_default_str();
  app.add_option("--rebalance-min-gain", f->rebalance_min_gain,
                 "Adopt a new plan only if it lowers the predicted max rank load by this fraction")
      ->capture_default_str();
  app.add_option("--test-corrupt-migration-rank", f->test_corrupt_migration_rank,
                 "(tests) this rank corrupts a received expert, so the migration must fail safely")
      ->group("");
  return [f, capacity] {
    f->capacity_given = capacity->count() > 0;
    return run_generate(*f);
  };
}

}  // namespace moe::cli
