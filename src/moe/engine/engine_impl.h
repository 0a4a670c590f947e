// Engine::Impl, shared by engine.cc and the scheduler (scheduler.cc), which drives the
// decoder directly for batched steps. Internal to src/moe/engine.
#pragma once

#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/engine.h"
#include "moe/transformer/decoder.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/config.h"
#include "moe/model/tokenizer.h"
#include "moe/model/weights.h"
#include "moe/moe/capacity.h"
#include "moe/runtime/expert_migration.h"
#include "moe/stats/expert_load_stats.h"

namespace moe {

// Step headers rank 0 broadcasts to the EP workers (run_worker): {kind, tokens}.
enum EpHeader : int64_t {
  kEpHeaderStop = 0,       // workers return from run_worker()
  kEpHeaderStep = 1,       // one forward pass (tokens on rank 0 = header[1])
  kEpHeaderRebalance = 2,  // live rebalancing (collective)
  kEpHeaderIdle = 3,       // nothing to do (keeps idle workers within the comm timeout)
};

struct Engine::Impl {
  ModelConfig config;
  HfCheckpoint checkpoint;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Decoder> decoder;
  ModelInfo info;
  Communicator* comm = nullptr;
  std::vector<EpContext> ep;  // [num_layers] per-layer expert placement (dense layers: unused)
  CapacityOptions capacity;
  std::unique_ptr<ExpertLoadStats> load_stats;
  // Live rebalancing.
  int rebalance_every = 0, slots_per_rank = 0, replica_cap = 4;
  double rebalance_min_gain = 0.1;
  MigrationFaults faults;
  ExpertStore expert_store;
  int64_t decode_steps = 0;
  Engine::EpStats rebalance_stats;
  bool workers_stopped = false;

  ~Impl() {
    if (comm != nullptr && comm->rank() == 0 && !workers_stopped) {
      int64_t header[2] = {kEpHeaderStop, 0};
      (void)comm->broadcast(header, sizeof(header), 0);
    }
  }
};


// Shared by Engine::generate and the Scheduler (engine.cc).
// InvalidArgument naming the bad sampling value.
Status validate_sampling(const SamplingParams& sampling);
// The prompt's token ids: `ids` if non-empty, else `prompt` tokenized (BOS per
// tokenizer_config). InvalidArgument for an empty prompt or ids outside the vocabulary.
StatusOr<std::vector<int>> prompt_tokens(const Engine::Impl& impl, const std::string& prompt,
                                         const std::vector<int>& ids);
// Bytes at the end of `s` that are U+FFFD from a partial byte-fallback character: held
// back while streaming until the character completes.
size_t unstable_suffix(const std::string& s);

}  // namespace moe
