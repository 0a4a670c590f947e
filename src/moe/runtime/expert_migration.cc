#include "moe/runtime/expert_migration.h"

#include <xxhash.h>

#include <cstring>

#include "moe/core/clock.h"
#include "moe/tensor/dtype.h"

namespace moe {
namespace {

constexpr int kTagHeader = kMigrationTagHeader, kTagData = kMigrationTagData, kTagSum = kMigrationTagSum;

struct Transfer {
  int layer, expert, src, dst;
};

// Expert bytes as one buffer: w1 | w2 | w3.
std::vector<uint8_t> pack(const ExpertWeights& w) {
  std::vector<uint8_t> out(w.bytes());
  uint8_t* p = out.data();
  for (const Weight2D* m : {&w.w1, &w.w2, &w.w3}) {
    std::memcpy(p, m->data, m->bytes());
    p += m->bytes();
  }
  return out;
}

}  // namespace

Status migrate_experts(Communicator& comm, const MigrationPlan& plan, const MigrationTarget& target,
                       MigrationStats* stats) {
  const ModelConfig& config = plan.config;
  const std::vector<int>& moe_layers = plan.moe_layers;
  const std::vector<const ExpertPlacement*>& current = plan.current;
  const std::vector<const ExpertPlacement*>& next = plan.next;
  std::vector<LayerWeights>* layers = target.layers;
  ExpertStore* store = target.store;
  const double t0 = now_seconds();
  const int me = comm.rank();
  const int E = config.router.num_experts;
  const int64_t hidden = config.hidden_size, inter = config.moe_intermediate_size;
  *stats = MigrationStats{};
  // The same list, in the same order, on every rank.
  std::vector<Transfer> transfers;
  for (int l : moe_layers) {
    const ExpertPlacement& cur = *current[static_cast<size_t>(l)];
    const ExpertPlacement& nxt = *next[static_cast<size_t>(l)];
    for (int e = 0; e < E; ++e) {
      for (int r : nxt.replicas(e)) {
        if (!cur.holds(r, e)) transfers.push_back({l, e, cur.rank_of(e), r});
      }
    }
  }
  stats->experts_moved = static_cast<int64_t>(transfers.size());

  struct Received {
    int layer, expert;
    DType dtype[3];
    std::vector<uint8_t> bytes;
  };
  std::vector<Received> received;
  Status failure = ok_status();
  for (const Transfer& t : transfers) {
    if (t.src == me) {
      const ExpertWeights& w = (*layers)[static_cast<size_t>(t.layer)].experts[static_cast<size_t>(t.expert)];
      int64_t header[4] = {static_cast<int64_t>(w.w1.dtype), static_cast<int64_t>(w.w2.dtype),
                           static_cast<int64_t>(w.w3.dtype), static_cast<int64_t>(w.bytes())};
      const std::vector<uint8_t> bytes = pack(w);
      const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
      MOE_RETURN_IF_ERROR(comm.send(header, sizeof(header), t.dst, kTagHeader));
      MOE_RETURN_IF_ERROR(comm.send(bytes.data(), bytes.size(), t.dst, kTagData));
      MOE_RETURN_IF_ERROR(comm.send(&sum, sizeof(sum), t.dst, kTagSum));
      ++stats->experts_sent;
    } else if (t.dst == me) {
      int64_t header[4];
      MOE_RETURN_IF_ERROR(comm.recv(header, sizeof(header), t.src, kTagHeader));
      Received r{t.layer, t.expert, {}, {}};
      size_t expected = 0;
      const int64_t shapes[3] = {inter * hidden, hidden * inter, inter * hidden};
      bool bad_dtype = false;
      for (int i = 0; i < 3; ++i) {
        if (header[i] < 0 || header[i] > static_cast<int64_t>(DType::kF16)) {
          bad_dtype = true;
          break;
        }
        r.dtype[i] = static_cast<DType>(header[i]);
        expected += static_cast<size_t>(shapes[i]) * dtype_size(r.dtype[i]);
      }
      const std::string what = "layer " + std::to_string(t.layer) + " expert " + std::to_string(t.expert) +
                               " from rank " + std::to_string(t.src);
      if (bad_dtype || header[3] != static_cast<int64_t>(expected)) {
        // The peer sends the payload anyway: receive it into a scratch buffer to stay in step.
        std::vector<uint8_t> scratch(static_cast<size_t>(std::max<int64_t>(header[3], 0)));
        MOE_RETURN_IF_ERROR(comm.recv(scratch.data(), scratch.size(), t.src, kTagData));
        uint64_t sum = 0;
        MOE_RETURN_IF_ERROR(comm.recv(&sum, sizeof(sum), t.src, kTagSum));
        if (failure.ok()) failure = data_loss("migration of " + what + ": size or dtype header does not match the model");
        continue;
      }
      r.bytes.resize(expected);
      MOE_RETURN_IF_ERROR(comm.recv(r.bytes.data(), r.bytes.size(), t.src, kTagData));
      uint64_t sum = 0;
      MOE_RETURN_IF_ERROR(comm.recv(&sum, sizeof(sum), t.src, kTagSum));
      if (XXH3_64bits(r.bytes.data(), r.bytes.size()) != sum) {
        if (failure.ok()) failure = data_loss("migration of " + what + ": checksum mismatch");
        continue;
      }
      stats->bytes_received += static_cast<int64_t>(r.bytes.size());
      ++stats->experts_received;
      received.push_back(std::move(r));
    }
  }
  // Every rank learns whether all transfers succeeded.
  int64_t failed = failure.ok() ? 0 : 1;
  MOE_RETURN_IF_ERROR(comm.allreduce_sum(&failed, 1));
  if (!failure.ok()) return failure.with_context("rank " + std::to_string(me));
  if (failed > 0) {
    return data_loss("expert migration failed on " + std::to_string(failed) + " rank(s) (see their errors); "
                   "the previous placement stays in force");
  }

  // Commit: gained experts point into the store, lost ones are unloaded.
  for (Received& r : received) {
    std::vector<uint8_t>& buf = (*store)[{r.layer, r.expert}];
    buf = std::move(r.bytes);
    ExpertWeights& w = (*layers)[static_cast<size_t>(r.layer)].experts[static_cast<size_t>(r.expert)];
    const uint8_t* p = buf.data();
    w.w1 = Weight2D{p, r.dtype[0], inter, hidden};
    p += w.w1.bytes();
    w.w2 = Weight2D{p, r.dtype[1], hidden, inter};
    p += w.w2.bytes();
    w.w3 = Weight2D{p, r.dtype[2], inter, hidden};
    w.loaded = true;
  }
  for (int l : moe_layers) {
    const ExpertPlacement& nxt = *next[static_cast<size_t>(l)];
    for (int e = 0; e < E; ++e) {
      if (nxt.holds(me, e)) continue;
      ExpertWeights& w = (*layers)[static_cast<size_t>(l)].experts[static_cast<size_t>(e)];
      w = ExpertWeights{};
      store->erase({l, e});
    }
  }
  stats->seconds = now_seconds() - t0;
  return ok_status();
}

}  // namespace moe
