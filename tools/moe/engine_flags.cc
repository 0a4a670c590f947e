#include "engine_flags.h"

#include <cmath>

#include "commands.h"
#include "moe/comm/mpi_communicator.h"

namespace moe::cli {

void add_engine_flags(CLI::App& app, EngineFlags* f, bool batch_invariant_default) {
  f->batch_invariant = batch_invariant_default;
  app.add_option("--model", f->model, "Model directory (HF format); default: the shipped tiny-mixtral-shakespeare");
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
  f->capacity_option = app.add_option("--capacity-factor", f->capacity_factor,
                                      "Expert capacity: ceil(tokens * top_k * F / experts) per expert and step "
                                      "(implies --overflow-policy drop unless given)");
  app.add_option("--overflow-policy", f->overflow_policy,
                 "What happens past capacity: dropless (no capacity; default), drop, or reroute "
                 "(to the token's next-best expert with room)")
      ->check(CLI::IsMember({"dropless", "drop", "reroute"}));
  app.add_option("--stats-ema-decay", f->stats_ema_decay, "Decay of the per-step load EMA in the load statistics")
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
  app.add_option("--batch-invariant", f->batch_invariant,
                 "true|false: batch-invariant kernels (a token's logits do not depend on what shares its batch; "
                 "GEMV instead of sgemm for prefill)")
      ->capture_default_str();
  app.add_option("--test-corrupt-migration-rank", f->test_corrupt_migration_rank,
                 "(tests) this rank corrupts a received expert, so the migration must fail safely")
      ->group("");
}

std::string check_engine_flags(const EngineFlags& f) {
  if (f.threads < 0) return "--threads must be >= 0 (got " + std::to_string(f.threads) + ")";
  if (f.ep < 1) return "--ep must be >= 1 (got " + std::to_string(f.ep) + ")";
  if (f.max_nodes_per_token < 0) {
    return "--max-nodes-per-token must be >= 0 (got " + std::to_string(f.max_nodes_per_token) + ")";
  }
  if (f.ranks_per_node < 0) return "--ranks-per-node must be >= 0 (got " + std::to_string(f.ranks_per_node) + ")";
  if (f.capacity_given() && !(f.capacity_factor > 0 && std::isfinite(f.capacity_factor))) {
    return "--capacity-factor must be a positive number (got " + std::to_string(f.capacity_factor) + ")";
  }
  if (f.overflow_policy == "dropless" && f.capacity_given()) {
    return "--capacity-factor has no effect with --overflow-policy dropless; use drop or reroute";
  }
  if (f.rebalance_every < 0) return "--rebalance-every must be >= 0 (got " + std::to_string(f.rebalance_every) + ")";
  if (f.slots_per_rank < 0) return "--slots-per-rank must be >= 0 (got " + std::to_string(f.slots_per_rank) + ")";
  if (f.replica_cap < 1) return "--replica-cap must be >= 1 (got " + std::to_string(f.replica_cap) + ")";
  if (!(f.rebalance_min_gain >= 0 && f.rebalance_min_gain < 1)) {
    return "--rebalance-min-gain must be in [0, 1) (got " + std::to_string(f.rebalance_min_gain) + ")";
  }
  if ((!f.placement.empty() || f.rebalance_every > 0) && !launched_under_mpi()) {
    return std::string(f.placement.empty() ? "--rebalance-every" : "--placement") +
           " places experts on EP ranks: run under mpirun with --ep N";
  }
  if (!(f.stats_ema_decay >= 0 && f.stats_ema_decay < 1)) {
    return "--stats-ema-decay must be in [0, 1) (got " + std::to_string(f.stats_ema_decay) + ")";
  }
  return "";
}

StatusOr<OpenedEngine> open_engine(const EngineFlags& f, const std::string& command) {
  OpenedEngine out;
  if (f.ep > 1 || launched_under_mpi()) {
    if (!launched_under_mpi()) {
      return invalid_argument("--ep " + std::to_string(f.ep) + " needs " + std::to_string(f.ep) +
                              " processes: run it as mpirun -np " + std::to_string(f.ep) + " moe " + command + " --ep " +
                              std::to_string(f.ep) + " ...");
    }
    MpiOptions mo;
    mo.ranks_per_node = f.ranks_per_node;
    auto c = make_mpi_communicator(mo);
    if (!c.ok()) return c.status();
    out.comm = std::move(c).value();
    if (out.comm->size() != f.ep) {
      return invalid_argument("--ep " + std::to_string(f.ep) + " but mpirun started " +
                              std::to_string(out.comm->size()) + " ranks; they must match");
    }
  }
  out.rank = out.comm ? out.comm->rank() : 0;
  EngineOptions options{.model_dir = f.model.empty() ? default_model_dir() : f.model, .num_threads = f.threads,
                        .comm = out.comm.get()};
  options.ep_overlap = f.ep_overlap;
  options.a2a_bf16 = f.a2a_dtype == "bf16";
  options.a2a_hierarchical = f.a2a_mode == "auto" ? -1 : (f.a2a_mode == "hierarchical" ? 1 : 0);
  options.max_nodes_per_token = f.max_nodes_per_token;
  options.overflow_policy = !f.overflow_policy.empty() ? f.overflow_policy : (f.capacity_given() ? "drop" : "dropless");
  options.capacity_factor = f.capacity_factor;
  options.stats_ema_decay = f.stats_ema_decay;
  options.placement_file = f.placement;
  options.rebalance_every = f.rebalance_every;
  options.slots_per_rank = f.slots_per_rank;
  options.replica_cap = f.replica_cap;
  options.rebalance_min_gain = f.rebalance_min_gain;
  options.test_corrupt_migration_rank = f.test_corrupt_migration_rank;
  options.batch_invariant = f.batch_invariant;
  auto engine = Engine::open(options);
  if (!engine.ok()) {
    if (!out.comm) return engine.status();
    return Status(engine.status().code(), "rank " + std::to_string(out.rank) + ": " + engine.status().message());
  }
  out.engine = std::move(engine).value();
  return out;
}

}  // namespace moe::cli
