// Expert-level failover without a restart (level 1 of docs/reliability.md).
//
// After the EP group re-formed without failed ranks (EpSession::recover), every
// survivor adopts the survivors' placement (placement/failover_placement.h): each
// expert keeps the replicas that live on survivors, renumbered; an expert whose every
// replica was on a failed rank is "lost" and the EP layer routes its tokens to each
// token's next-best live expert (degraded mode, counted in the load statistics). The
// lost experts are then re-replicated: a deterministic target placement gives each one
// a survivor (the one with the most free slots), which loads it on a background
// thread from the model's files (the checkpoint store: hash-verified; or the Hugging
// Face directory), while serving goes on. At a step boundary (EpStepKind::kReplicaSwitch)
// every rank says whether its share is loaded; once all are, every rank switches to
// the target placement together and outputs are exact again. A load that fails leaves
// the placement degraded (logged; `degraded()` stays true).
//
// Thread-safety: every method on the one thread that runs the engine's steps; the
// background loader touches only its own staging buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/runtime/expert_migration.h"
#include "moe/status.h"

namespace moe {

// Loads expert (layer, expert) for this rank into staging: it sets
// (*layers)[layer].experts[expert] (layers: [num_layers], MoE layers' expert vectors
// sized num_experts) and may keep the bytes in (*store)[{layer, expert}]. Runs on a
// background thread: it must not touch the engine's live weights.
using ExpertLoadFn = std::function<Status(int layer, int expert, std::vector<LayerWeights>* layers, ExpertStore* store)>;

// What a failover reads and updates. Pointers are not owned and must outlive the
// Failover; all are required.
struct FailoverInputs {
  Communicator* comm = nullptr;
  const ModelConfig* config = nullptr;
  std::vector<EpContext>* ep = nullptr;         // [num_layers] placements (dense layers unused); updated
  std::vector<LayerWeights>* layers = nullptr;  // this rank's weights; re-replicated experts bound in
  ExpertStore* expert_store = nullptr;          // owns the bytes of re-replicated experts
  int slots_per_rank = 1;                       // memory budget per rank, in experts per layer (>= 1)
  // How long on_group_shrunk waits for the re-replication before serving degraded (>= 0 s).
  double wait_seconds = 0;
  ExpertLoadFn load_expert;
};

// Totals since start-up.
struct FailoverStats {
  int64_t group_changes = 0;       // placements adopted after a re-formation
  int64_t experts_lost = 0;        // (layer, expert) pairs left with no live replica, summed over changes
  int64_t experts_rereplicated = 0;  // lost pairs given a replica again (over all ranks)
  int64_t rereplication_failures = 0;  // re-replications abandoned (a load failed on some rank)
  double last_rereplication_seconds = 0;  // from the group change to the switch
};

class Failover {
 public:
  explicit Failover(FailoverInputs inputs);
  ~Failover();  // waits for the background loader
  Failover(const Failover&) = delete;
  Failover& operator=(const Failover&) = delete;

  // Every survivor, after a re-formation (EpStepRunner::on_group_shrunk): `kept` are the
  // previous ranks that survive, ascending. Adopts the survivors' placement of every MoE
  // layer and starts loading this rank's share of the re-replication. A re-replication
  // in progress is abandoned first. Then, if experts were lost, it waits up to
  // wait_seconds for this rank's loads and tries the switch once (collective): a quick
  // re-load serves on exact, a slow one degraded. When some layer has fewer live experts
  // than top_k (it cannot route at all), it waits for the loads however long they take.
  // Errors: InvalidArgument for a bad `kept`; communication errors.
  Status on_group_shrunk(const std::vector<int>& kept);
  // A re-replication is in progress (identical on every rank).
  bool pending() const { return pending_; }
  // Collective (every rank at the same step boundary): if every rank's share is loaded,
  // binds them and switches every layer to the re-replicated placement; if a load
  // failed anywhere, abandons the re-replication (stays degraded, logged); otherwise
  // does nothing. Errors: communication only.
  Status switch_if_ready();
  // Some expert of some layer has no live replica (tokens are being rerouted).
  bool degraded() const;
  // (layer, expert) pairs with no live replica now.
  int64_t lost_now() const;
  const FailoverStats& stats() const { return stats_; }

 private:
  void join_loader();

  FailoverInputs in_;
  FailoverStats stats_;
  bool pending_ = false;
  double changed_at_ = 0;
  std::vector<ExpertPlacement> target_;  // [num_layers] the re-replicated placements
  // Staging of the background loader (owned by it until done_).
  std::vector<LayerWeights> stage_layers_;
  ExpertStore stage_store_;
  std::vector<std::pair<int, int>> to_load_;
  Status load_status_;
  std::atomic<bool> done_{true};
  std::thread loader_;
};

}  // namespace moe
