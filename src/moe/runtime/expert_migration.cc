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

// Expert bytes as one buffer: w1 | w1's scales | w2 | w2's scales | w3 | w3's scales
// (FP8 block scales travel with their matrix; other dtypes have none).
std::vector<uint8_t> pack(const ExpertWeights& w) {
  std::vector<uint8_t> out(w.bytes());
  uint8_t* p = out.data();
  for (const Weight2D* m : {&w.w1, &w.w2, &w.w3}) {
    std::memcpy(p, m->data, m->data_bytes());
    p += m->data_bytes();
    if (m->has_scale()) {
      std::memcpy(p, m->scale, m->scale_bytes());
      p += m->scale_bytes();
    }
  }
  return out;
}

// Per matrix on the wire: dtype, scale dtype (-1: none), block rows, block cols.
constexpr int kHeaderPerMatrix = 4;
constexpr int kHeaderWords = 3 * kHeaderPerMatrix + 1;  // + the payload's bytes

void put_header(const ExpertWeights& w, int64_t* header) {
  const Weight2D* ms[3] = {&w.w1, &w.w2, &w.w3};
  for (int i = 0; i < 3; ++i) {
    int64_t* h = header + i * kHeaderPerMatrix;
    h[0] = static_cast<int64_t>(ms[i]->dtype);
    h[1] = ms[i]->has_scale() ? static_cast<int64_t>(ms[i]->scale_dtype) : -1;
    h[2] = ms[i]->has_scale() ? ms[i]->block_rows : 0;
    h[3] = ms[i]->has_scale() ? ms[i]->block_cols : 0;
  }
  header[kHeaderWords - 1] = static_cast<int64_t>(w.bytes());
}

// The matrices a header describes, without data (shapes from the model); an error
// names what disagrees with the model: a dtype out of range, an FP8 matrix without
// scales or with another block size than quantization_config, scales on a non-FP8 one.
Status read_header(const int64_t* header, const ModelConfig& config, Weight2D out[3]) {
  const int64_t hidden = config.hidden_size, inter = config.moe_intermediate_size;
  const int64_t shapes[3][2] = {{inter, hidden}, {hidden, inter}, {inter, hidden}};
  const char* names[3] = {"w1", "w2", "w3"};
  auto is_dtype = [](int64_t d) { return d >= 0 && d <= static_cast<int64_t>(DType::kI8); };
  for (int i = 0; i < 3; ++i) {
    const int64_t* h = header + i * kHeaderPerMatrix;
    const std::string m = std::string(names[i]) + ": ";
    if (!is_dtype(h[0])) return data_loss(m + "unknown dtype code " + std::to_string(h[0]));
    Weight2D& w = out[i];
    w = Weight2D{};
    w.dtype = static_cast<DType>(h[0]);
    w.rows = shapes[i][0];
    w.cols = shapes[i][1];
    if (w.dtype == DType::kI8) {  // "--weights int8" (model/int8_quant.h): [1, 32] blocks, f32 scales
      if (h[1] != static_cast<int64_t>(DType::kF32) || h[2] != 1 || h[3] != 32 || w.cols % 32 != 0) {
        return data_loss(m + "I8 without [1, 32] f32 block scales");
      }
      w.scale_dtype = DType::kF32;
      w.block_rows = 1;
      w.block_cols = 32;
      w.scale = &w;  // placeholder, as for FP8 below
      continue;
    }
    if (w.dtype != DType::kF8E4M3) {
      if (h[1] != -1) return data_loss(m + dtype_name(w.dtype) + " with block scales");
      continue;
    }
    if (!config.fp8.enabled || h[2] != config.fp8.block_rows || h[3] != config.fp8.block_cols) {
      return data_loss(m + "F8_E4M3 with blocks of [" + std::to_string(h[2]) + ", " + std::to_string(h[3]) +
                       "], the model's quantization_config says " +
                       (config.fp8.enabled ? "[" + std::to_string(config.fp8.block_rows) + ", " +
                                                 std::to_string(config.fp8.block_cols) + "]"
                                           : std::string("nothing (no quantization_config)")));
    }
    if (!is_dtype(h[1]) || static_cast<DType>(h[1]) == DType::kF8E4M3) {
      return data_loss(m + "F8_E4M3 without float block scales (scale dtype code " + std::to_string(h[1]) + ")");
    }
    w.scale_dtype = static_cast<DType>(h[1]);
    w.block_rows = static_cast<int32_t>(h[2]);
    w.block_cols = static_cast<int32_t>(h[3]);
    w.scale = &w;  // a placeholder until the bytes arrive: has_scale() and scale_bytes() count it
  }
  return ok_status();
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
    Weight2D meta[3];  // shapes, dtypes and scale layout; data set at commit
    std::vector<uint8_t> bytes;
  };
  std::vector<Received> received;
  Status failure = ok_status();
  for (const Transfer& t : transfers) {
    if (t.src == me) {
      const ExpertWeights& w = (*layers)[static_cast<size_t>(t.layer)].experts[static_cast<size_t>(t.expert)];
      int64_t header[kHeaderWords];
      put_header(w, header);
      const std::vector<uint8_t> bytes = pack(w);
      const uint64_t sum = XXH3_64bits(bytes.data(), bytes.size());
      MOE_RETURN_IF_ERROR(comm.send(header, sizeof(header), t.dst, kTagHeader));
      MOE_RETURN_IF_ERROR(comm.send(bytes.data(), bytes.size(), t.dst, kTagData));
      MOE_RETURN_IF_ERROR(comm.send(&sum, sizeof(sum), t.dst, kTagSum));
      ++stats->experts_sent;
    } else if (t.dst == me) {
      int64_t header[kHeaderWords];
      MOE_RETURN_IF_ERROR(comm.recv(header, sizeof(header), t.src, kTagHeader));
      Received r{t.layer, t.expert, {}, {}};
      const std::string what = "layer " + std::to_string(t.layer) + " expert " + std::to_string(t.expert) +
                               " from rank " + std::to_string(t.src);
      Status header_ok = read_header(header, config, r.meta);
      size_t expected = 0;
      for (const Weight2D& m : r.meta) expected += m.bytes();
      const int64_t payload = header[kHeaderWords - 1];
      if (header_ok.ok() && payload != static_cast<int64_t>(expected)) {
        header_ok = data_loss("size header " + std::to_string(payload) + " bytes, the model's shapes need " +
                              std::to_string(expected));
      }
      if (!header_ok.ok()) {
        // The peer sends the payload anyway: receive it into a scratch buffer to stay in step.
        std::vector<uint8_t> scratch(static_cast<size_t>(std::max<int64_t>(payload, 0)));
        MOE_RETURN_IF_ERROR(comm.recv(scratch.data(), scratch.size(), t.src, kTagData));
        uint64_t sum = 0;
        MOE_RETURN_IF_ERROR(comm.recv(&sum, sizeof(sum), t.src, kTagSum));
        if (failure.ok()) {
          failure = data_loss("migration of " + what + ": size or dtype header does not match the model (" +
                              header_ok.message() + ")");
        }
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
    Weight2D* ms[3] = {&w.w1, &w.w2, &w.w3};
    for (int i = 0; i < 3; ++i) {
      Weight2D m = r.meta[i];
      m.data = p;
      p += m.data_bytes();
      if (m.has_scale()) {
        m.scale = p;
        p += m.scale_bytes();
      }
      *ms[i] = m;
    }
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
