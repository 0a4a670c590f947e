#include "moe/engine/peer_expert_recovery.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "moe/core/logging.h"
#include "moe/store/shard_grouping.h"

namespace moe {
namespace {

// The size a sender announces when it cannot read its copy (no payload follows).
constexpr uint64_t kSendFailed = std::numeric_limits<uint64_t>::max();

struct Transfer {
  int dest = -1;
  int source = -1;
  int layer = -1;
  int expert = -1;
};

std::string what(int layer, int expert) {
  return "layer " + std::to_string(layer) + ", expert " + std::to_string(expert);
}

// Every rank's missing (layer, expert) pairs: [rank] -> list. Collective.
StatusOr<std::vector<std::vector<std::pair<int, int>>>> gather_missing(Communicator& comm,
                                                                       const std::vector<MissingExpert>& mine) {
  const int n = comm.size();
  const int64_t count = static_cast<int64_t>(mine.size());
  std::vector<int64_t> counts(static_cast<size_t>(n));
  MOE_RETURN_IF_ERROR(comm.allgather(&count, sizeof(count), counts.data()).with_context("peer recovery: counts"));
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  std::vector<std::vector<std::pair<int, int>>> all(static_cast<size_t>(n));
  if (longest == 0) return all;
  const size_t row = static_cast<size_t>(2 * longest);
  std::vector<int64_t> send(row, -1), recv(row * static_cast<size_t>(n));
  for (size_t i = 0; i < mine.size(); ++i) {
    send[2 * i] = mine[i].layer;
    send[2 * i + 1] = mine[i].expert;
  }
  MOE_RETURN_IF_ERROR(
      comm.allgather(send.data(), row * sizeof(int64_t), recv.data()).with_context("peer recovery: lists"));
  for (int r = 0; r < n; ++r) {
    const int64_t c = counts[static_cast<size_t>(r)];
    for (int64_t i = 0; i < c && i < longest; ++i) {
      const size_t at = static_cast<size_t>(r) * row + static_cast<size_t>(2 * i);
      all[static_cast<size_t>(r)].emplace_back(static_cast<int>(recv[at]), static_cast<int>(recv[at + 1]));
    }
  }
  return all;
}

// The transfer list every rank computes alike. If some missing expert has no source,
// `unserved` names the first one (rank, layer, expert) and the list is incomplete.
struct TransferPlan {
  std::vector<Transfer> transfers;
  Status error;          // the same on every rank
  Transfer unserved;     // dest = the rank that lacks it; -1 if none
};

TransferPlan plan_transfers(const std::vector<std::vector<std::pair<int, int>>>& missing,
                            const std::vector<ExpertPlacement>& placements, int num_experts) {
  TransferPlan plan;
  for (size_t r = 0; r < missing.size(); ++r) {
    for (const auto& [l, e] : missing[r]) {
      if (l < 0 || static_cast<size_t>(l) >= placements.size() || e < 0 || e >= num_experts ||
          e >= placements[static_cast<size_t>(l)].num_experts()) {
        plan.error = invalid_argument("peer recovery: rank " + std::to_string(r) + " reports missing " + what(l, e) +
                                      ", which is not an expert of the model");
        return plan;
      }
      int source = -1;
      for (int p : placements[static_cast<size_t>(l)].replicas(e)) {
        if (p == static_cast<int>(r) || static_cast<size_t>(p) >= missing.size()) continue;
        const auto& theirs = missing[static_cast<size_t>(p)];
        if (std::find(theirs.begin(), theirs.end(), std::pair(l, e)) != theirs.end()) continue;
        source = p;
        break;
      }
      if (source < 0) {
        plan.error = data_loss(what(l, e) + ": rank " + std::to_string(r) +
                               " has no good copy of its shard and no other rank holds a copy");
        plan.unserved = Transfer{static_cast<int>(r), -1, l, e};
        return plan;
      }
      plan.transfers.push_back(Transfer{static_cast<int>(r), source, l, e});
    }
  }
  return plan;
}

// The expert's shard bytes as the store lays them out: its tensors in name order.
StatusOr<std::vector<uint8_t>> shard_bytes(const ModelSource& source, ModelFamily family, int layer, int expert) {
  std::vector<const StoredTensor*> parts;
  for (const TensorInfo& t : source.tensor_infos()) {  // sorted by name
    const ShardKey key = shard_key_for(t.name, family);
    if (key.kind != ShardKind::kExpert || key.layer != layer || key.expert != expert) continue;
    MOE_ASSIGN_OR_RETURN(const StoredTensor* view, source.get(t.name));
    parts.push_back(view);
  }
  if (parts.empty()) return not_found(what(layer, expert) + ": no tensors of it in " + source.location());
  size_t total = 0;
  for (const StoredTensor* t : parts) total += t->nbytes;
  std::vector<uint8_t> bytes(total);
  size_t at = 0;
  for (const StoredTensor* t : parts) {
    if (t->nbytes > 0) std::memcpy(bytes.data() + at, t->data, t->nbytes);
    at += t->nbytes;
  }
  return bytes;
}

// Sends one expert (size, then chunks); a copy it cannot read is announced as kSendFailed.
Status send_expert(const PeerRecoveryInputs& in, const Transfer& t, Status* local) {
  Communicator& comm = *in.comm;
  auto bytes = shard_bytes(*in.source, in.config->family, t.layer, t.expert);
  if (!bytes.ok()) {
    *local = data_loss("cannot send " + what(t.layer, t.expert) + " to rank " + std::to_string(t.dest) + ": " +
                       bytes.status().message());
    const uint64_t failed = kSendFailed;
    return comm.send(&failed, sizeof(failed), t.dest, kPeerRecoveryTagSize);
  }
  const uint64_t size = bytes->size();
  MOE_RETURN_IF_ERROR(comm.send(&size, sizeof(size), t.dest, kPeerRecoveryTagSize));
  for (size_t at = 0; at < bytes->size(); at += kPeerRecoveryChunkBytes) {
    const size_t n = std::min(kPeerRecoveryChunkBytes, bytes->size() - at);
    MOE_RETURN_IF_ERROR(comm.send(bytes->data() + at, n, t.dest, kPeerRecoveryTagData));
  }
  MOE_LOG_INFO("peer recovery: sent {} ({} bytes) to rank {}", what(t.layer, t.expert), size, t.dest);
  return ok_status();
}

// Receives one expert whole, then verifies and binds it; a bad copy sets *local.
Status receive_expert(const PeerRecoveryInputs& in, const Transfer& t, const std::string& why_missing, Status* local,
                      PeerRecoveryReport* report) {
  Communicator& comm = *in.comm;
  const std::string from = "rank " + std::to_string(t.source);
  uint64_t size = 0;
  MOE_RETURN_IF_ERROR(comm.recv(&size, sizeof(size), t.source, kPeerRecoveryTagSize));
  if (size == kSendFailed) {
    *local = data_loss(what(t.layer, t.expert) + ": " + why_missing + "; " + from + " could not send its copy");
    return ok_status();
  }
  const ShardEntry* entry = in.store != nullptr ? in.store->manifest().find_expert(t.layer, t.expert) : nullptr;
  const bool fits = entry != nullptr && entry->raw_bytes == size;
  std::vector<uint8_t> bytes(fits ? size : 0);
  std::vector<uint8_t> scratch(fits ? 0 : std::min<uint64_t>(size, kPeerRecoveryChunkBytes));
  for (uint64_t at = 0; at < size; at += kPeerRecoveryChunkBytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kPeerRecoveryChunkBytes, size - at));
    MOE_RETURN_IF_ERROR(comm.recv(fits ? bytes.data() + at : scratch.data(), n, t.source, kPeerRecoveryTagData));
  }
  if (in.store == nullptr) {
    *local = failed_precondition(what(t.layer, t.expert) + ": received from " + from +
                                 " but this rank has no store to verify it against");
    return ok_status();
  }
  if (!fits) {
    *local = entry == nullptr ? not_found(what(t.layer, t.expert) + " is not in " + in.store->location())
                              : data_loss(what(t.layer, t.expert) + ": the copy from " + from + " has " +
                                          std::to_string(size) + " bytes, the manifest of " + in.store->location() +
                                          " says " + std::to_string(entry->raw_bytes));
    return ok_status();
  }
  if (static_cast<size_t>(t.layer) >= in.layers->size() ||
      static_cast<size_t>(t.expert) >= (*in.layers)[static_cast<size_t>(t.layer)].experts.size()) {
    *local = invalid_argument(what(t.layer, t.expert) + ": this rank's weights have no slot for it");
    return ok_status();
  }
  Status adopted = in.store->adopt_expert_shard(t.layer, t.expert, std::move(bytes), from);
  if (adopted.ok()) {
    adopted = bind_expert(*in.config, *in.store, t.layer, t.expert,
                          &(*in.layers)[static_cast<size_t>(t.layer)].experts[static_cast<size_t>(t.expert)]);
  }
  if (!adopted.ok()) {
    *local = adopted;
    return ok_status();
  }
  MOE_LOG_WARN("{}: this rank's copy is bad ({}); using the copy from {} (hash verified)", what(t.layer, t.expert),
               why_missing, from);
  if (report != nullptr) {
    ++report->experts_received;
    report->bytes_received += size;
  }
  return ok_status();
}

}  // namespace

Status recover_experts_from_peers(const PeerRecoveryInputs& in, PeerRecoveryReport* report) {
  if (in.comm == nullptr || in.config == nullptr || in.source == nullptr || in.placements == nullptr ||
      in.layers == nullptr) {
    return invalid_argument("recover_experts_from_peers: comm, config, source, placements and layers are required");
  }
  Communicator& comm = *in.comm;
  const int me = comm.rank();
  MOE_ASSIGN_OR_RETURN(auto missing, gather_missing(comm, in.missing));
  const TransferPlan plan = plan_transfers(missing, *in.placements, in.config->router.num_experts);
  std::map<std::pair<int, int>, std::string> why;
  for (const MissingExpert& m : in.missing) why[{m.layer, m.expert}] = m.error;
  if (!plan.error.ok()) {
    // The same text on every rank; the lacking rank adds its own read error.
    if (plan.unserved.dest == me) {
      return Status(plan.error.code(),
                    plan.error.message() + " (its own: " + why[{plan.unserved.layer, plan.unserved.expert}] + ")");
    }
    return plan.error;
  }
  Status local = ok_status();  // this rank's first failure; it still takes part in every transfer
  Status comm_error = ok_status();
  for (const Transfer& t : plan.transfers) {
    Status failure = ok_status();
    if (t.source == me) {
      comm_error = send_expert(in, t, &failure);
      if (comm_error.ok() && failure.ok() && report != nullptr) ++report->experts_sent;
    } else if (t.dest == me) {
      comm_error = receive_expert(in, t, why[{t.layer, t.expert}], &failure, report);
    }
    if (local.ok()) local = failure;
    if (!comm_error.ok()) break;
  }
  if (!comm_error.ok()) return comm_error.with_context("peer recovery");
  int64_t failed = local.ok() ? 0 : 1;
  MOE_RETURN_IF_ERROR(comm.allreduce_sum(&failed, 1).with_context("peer recovery: outcome"));
  if (!local.ok()) return local;
  if (failed > 0) {
    return data_loss("peer recovery: " + std::to_string(failed) +
                     " rank(s) failed to recover experts from their peers (see their errors)");
  }
  return ok_status();
}

}  // namespace moe
