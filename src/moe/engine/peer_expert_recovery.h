// Start-up recovery of experts a rank could not load from its own files: a shard that is
// corrupt or missing in its store, with no good HF source copy either
// (RestoreOptions::tolerate_missing_experts), is copied from another rank that holds a
// replica of that expert under the layer's placement, and verified against the
// receiver's manifest hash before it is used.
#pragma once

#include <cstdint>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/model_source.h"
#include "moe/model/weights.h"
#include "moe/placement/expert_placement.h"
#include "moe/status.h"
#include "moe/store/store_model.h"

namespace moe {

// Point-to-point tags (distinct from runtime/expert_migration.h's 7101-7103).
inline constexpr int kPeerRecoveryTagSize = 7111, kPeerRecoveryTagData = 7112;
// A shard travels as a u64 size, then chunks of at most this many bytes.
inline constexpr size_t kPeerRecoveryChunkBytes = size_t{16} << 20;

struct PeerRecoveryInputs {
  Communicator* comm = nullptr;
  const ModelConfig* config = nullptr;
  // What this rank loaded from (an HF directory or a restored store): the copies it
  // sends are read through source->get(), so it must serve the experts this rank holds.
  const ModelSource* source = nullptr;
  // The store this rank restored from; it adopts (hash-verifies) what arrives. Required
  // if `missing` is not empty, else may be null (a rank on an HF directory).
  StoreModel* store = nullptr;
  // [num_layers] each layer's placement (dense layers: any); the same on every rank.
  const std::vector<ExpertPlacement>* placements = nullptr;
  // [num_layers] this rank's bound weights; recovered experts are bound into them.
  std::vector<LayerWeights>* layers = nullptr;
  // The experts this rank holds under its placement but has no good copy of
  // (RestoreReport::missing); empty on a rank that has them all.
  std::vector<MissingExpert> missing;
};

struct PeerRecoveryReport {
  int experts_received = 0;  // by this rank
  int experts_sent = 0;      // by this rank
  uint64_t bytes_received = 0;
};

// Collective over in.comm: every EP rank calls it once after the start-up agreement,
// whatever it loaded from and whether or not it misses anything (with nothing missing
// anywhere it costs one small allgather).
//
// Protocol: allgather each rank's missing count, then the (layer, expert) lists (padded
// to the longest). Every rank computes the same transfer list: for missing (rank r,
// layer l, expert e), in rank order then (l, e), the source is the first rank p != r in
// placements[l].replicas(e) that is not itself missing (l, e). The source sends the
// expert's shard bytes (its tensors, those whose shard_key_for() is (l, e), concatenated
// in name order, as the store writer lays a shard out) as a u64 size then chunks;
// transfers run one after another in list order, so no send can wait on a receive that
// waits on it. The receiver always takes the whole payload, then
// StoreModel::adopt_expert_shard() checks size and hash, then bind_expert() points
// (*layers)[l].experts[e] at it, and a warning names the layer, the expert, why its own
// copy was bad and "using the copy from rank p (hash verified)". Finally a failure flag
// is summed over the ranks, so either every rank returns OK with every held expert
// bound, or every rank returns an error.
//
// Errors: DataLoss on every rank, the same text, naming the first missing expert's
// layer and expert, the rank that lacks it and "no other rank holds a copy" if some
// missing expert has no source (nothing is sent then; the rank that lacks it adds its
// own read error). DataLoss on the receiver naming the layer, expert, sending rank and
// expected vs actual size or hash for a bad copy; on the sender if it cannot read its
// copy; and on every other rank, "N rank(s) failed ...". InvalidArgument on every rank
// for a missing entry outside the model. Communication errors as the communicator's.
Status recover_experts_from_peers(const PeerRecoveryInputs& in, PeerRecoveryReport* report = nullptr);

}  // namespace moe
