// Internal to src/moe/moe: the expert-parallel layer's workspace (EpWorkspace, opaque
// in ep_moe_layer.h) and its micro-batch state, shared by ep_moe_layer.cc (the
// exchanges) and ep_route.cc (the routing step).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/model/config.h"
#include "moe/model/weights.h"
#include "moe/moe/dispatch_layout.h"
#include "moe/moe/ep_hierarchical.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/expert_ffn.h"
#include "moe/moe/moe_layer.h"

namespace moe {
namespace ep_detail {

// One micro-batch's exchange state; buffers are reused across calls.
struct MicroBatch {
  int64_t t0 = 0, n = 0;  // token range [t0, t0 + n)
  DispatchLayout layout;
  std::vector<int64_t> send_rows, recv_rows;
  std::vector<size_t> send_bytes, recv_bytes, back_send_bytes, back_recv_bytes;
  std::vector<uint8_t> send_buf, recv_buf, back_send_buf, back_recv_buf;
  std::vector<float> recv_x, recv_w, y;
  std::vector<int> recv_e;
  std::vector<int> assign;             // [n, top_k] chosen replica rank (with replicas)
  std::vector<int64_t> replica_load;   // choose_replicas scratch
  int64_t num_recv = 0;
  std::unique_ptr<CommRequest> request;
  double started = 0;
  // Stage-wise state (ep_moe_begin / ep_moe_step).
  enum class Phase { kIdle, kDispatch, kGather, kScatter, kCombine } phase = Phase::kIdle;
  const ModelConfig* config = nullptr;
  const LayerWeights* layer = nullptr;
  float* out = nullptr;
  // expert_tp: rows received by each rank of the TP group, the all-gather of the
  // received rows and the reduce-scatter of the partial results.
  std::vector<int64_t> tp_rows;
  std::vector<size_t> ag_send_bytes, ag_recv_bytes, rs_send_bytes, rs_recv_bytes;
  std::vector<uint8_t> ag_send, ag_recv;
  std::vector<float> y_all, rs_recv;
  int64_t tp_total = 0, tp_offset = 0;  // rows gathered; this rank's first row among them
};

// FailedPrecondition when ctx combines expert_tp with the hierarchical exchange.
Status check_expert_tp(const EpContext& ctx);

// With overlap: the number of micro-batches of a call of num_tokens tokens on this rank
// (EpOptions::micro_batches, or auto: one int64 all-reduce over ctx.comm, so the same
// on every rank; 2 with expert_tp). InvalidArgument for micro_batches out of range,
// before any exchange.
StatusOr<int> micro_batch_count(const EpContext& ctx, int64_t num_tokens);

}  // namespace ep_detail

struct EpWorkspace {
  MoeWorkspace moe;
  ExpertWorkspace experts;
  // The pipeline's micro-batches (EpOptions::micro_batches); the stage-wise form
  // (ep_moe_begin/step) uses slots 0 and 1.
  ep_detail::MicroBatch mb[kMaxEpMicroBatches];
  std::vector<float> row;  // one returned row, unpacked
  std::vector<int> expert_node;  // [num_experts] node of each expert (node-limited routing)
  std::vector<int> rank_node;    // [num_ranks] node of each rank
  std::vector<uint8_t> alive;    // [num_experts] degraded mode: 0 = lost expert
  std::unique_ptr<HierWorkspace, HierWorkspaceDeleter> hier = make_hier_workspace();
};

}  // namespace moe
