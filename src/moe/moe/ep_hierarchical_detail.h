// Internal to src/moe/moe: the hierarchical exchange's state and its steps, shared by
// the blocking form (ep_hierarchical.cc) and the overlapped pipeline
// (ep_hierarchical_pipeline.cc). Both run the same steps on the same rows in the same
// order, so their results are bitwise equal; only when the bytes move differs.
//
// One call (or one micro-batch of it, tokens [t0, t0 + n)) goes through:
//   build_stage1 + probe_stage1_counts -> stage-1 rows (pack_stage, exchange,
//   unpack_stage) -> build_gateway_rows + build_stage2 -> stage-2 counts -> stage-2 rows
//   -> check_stage2_experts + compute_experts -> combine stage 2 (pack_results, exchange,
//   accumulate_results into the gateway rows) -> combine stage 1 (add_own_rows, then
//   accumulate_results into out).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moe/comm/communicator.h"
#include "moe/moe/ep_hierarchical.h"
#include "moe/moe/ep_moe_layer.h"
#include "moe/moe/ep_trace.h"
#include "moe/moe/expert_ffn.h"

namespace moe {
namespace hier_detail {

inline constexpr int kMaxTopK = 64;

// The wire format of one row: activations (f32 or bf16), then top_k ids and weights.
struct Wire {
  int64_t hidden = 0;
  int top_k = 0;
  bool bf16 = false;
  int layer = -1;  // for the trace and the per-link byte counters
  size_t act_bytes() const { return static_cast<size_t>(hidden) * (bf16 ? 2 : 4); }
  size_t row_bytes() const { return act_bytes() + static_cast<size_t>(top_k) * (sizeof(int) + sizeof(float)); }
};

struct Topology {
  std::vector<std::vector<int>> ranks_in_node;  // ascending ranks per node
  std::vector<int> local_index;                 // [num_ranks]
  // The rank of `node` with sender's local index (modulo the node's size).
  int gateway(int sender, int node) const {
    const auto& rs = ranks_in_node[static_cast<size_t>(node)];
    return rs[static_cast<size_t>(local_index[static_cast<size_t>(sender)]) % rs.size()];
  }
};
Topology make_topology(const Communicator& comm);

// One stage's rows: what to send where and the rows each way.
struct StageRows {
  std::vector<int> src_row;   // [rows] the row's source (stage 1: token of the call; stage 2: gateway row)
  std::vector<int> expert;    // [rows, top_k] ids for the destination, -1 elsewhere
  std::vector<float> weight;  // [rows, top_k]
  std::vector<int64_t> send_count, recv_count;  // [num_ranks] rows
  int64_t num_recv = 0;
};

// One micro-batch's state (the blocking form uses one for the whole call); buffers are
// reused across calls.
struct HierBatch {
  int64_t t0 = 0, n = 0;  // tokens [t0, t0 + n) of the call
  StageRows s1, s2;
  std::vector<uint8_t> send, recv;  // the payload of the exchange in flight
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<float> gw_x, gw_w, gw_out, y, recv_x, recv_w;
  std::vector<int> gw_e, recv_e;
  std::vector<int> gw_token;                 // own-node gateway rows -> token of the call
  std::vector<int> assign, gw_dest;          // chosen replica ranks (source, gateway)
  std::vector<int> own_e;                    // [own_rows, top_k] own-node gateway rows' expert ids
  std::vector<float> own_w;                  // [own_rows, top_k] their weights
  std::vector<int64_t> load;                 // replica choice scratch
  int own_rows = 0;
  int64_t gateway_rows = 0;                  // own_rows + s1.num_recv
  // Pipeline: the exchange in flight and its issue time; the stage-2 counts exchange's
  // buffers.
  std::unique_ptr<CommRequest> request;
  double started = 0;
  std::vector<int64_t> count_send, count_recv;
  std::vector<size_t> count_bytes;
};

}  // namespace hier_detail

struct HierWorkspace {
  hier_detail::HierBatch mb[kMaxEpMicroBatches];
  std::vector<int> rank_node;
  std::vector<float> row;  // one returned row, unpacked
  ExpertWorkspace experts;
};

namespace hier_detail {

// The constants of one call.
struct HierCall {
  const MoeLayerArgs& args;
  const TopkRoutingView& topk;
  const EpContext& ctx;
  HierWorkspace* ws;
  EpTimings* timings;
  Wire wire;
  Topology topo;
  Communicator& comm() const { return *ctx.comm; }
};

// Routing of tokens [b.t0, b.t0 + b.n): InvalidArgument for an out-of-range, lost or
// duplicate expert (token numbers of the call).
Status validate_routing(const HierCall& c, const HierBatch& b);
// Stage-1 rows (one per (token, remote node), grouped by gateway, tokens ascending) and
// own-node gateway rows; with routing_ok false, counts of -1 (announce the rejection).
void build_stage1(const HierCall& c, HierBatch& b, bool routing_ok);
// Blocking counts exchange of stage 1, so that a rejected routing fails every rank
// before any payload moves; s1.recv_count on success.
Status probe_stage1_counts(const HierCall& c, HierBatch& b, const Status& routing);
// Bytes per rank of a dispatch (rows) or combine (activations) of stage s; sets
// s.num_recv for a dispatch.
void dispatch_bytes(const Wire& wire, StageRows& s, std::vector<size_t>* sb, std::vector<size_t>* rb);
void combine_bytes(const Wire& wire, const StageRows& s, std::vector<size_t>* sb, std::vector<size_t>* rb);
// Packs stage s's rows (activations act + src_row * hidden) into send.
void pack_stage(const Wire& wire, const StageRows& s, const float* act, std::vector<uint8_t>* send);
// Unpacks s.num_recv received rows into b.recv_x / recv_e / recv_w.
void unpack_stage(const Wire& wire, const StageRows& s, const uint8_t* recv, HierBatch& b);
// After stage 1: the gateway rows (own-node tokens, then the received rows).
void build_gateway_rows(const HierCall& c, HierBatch& b);
// Stage-2 rows: gateway row -> each rank of this node computing some of its experts
// (s2.send_count set; recv_count comes from the counts exchange).
void build_stage2(const HierCall& c, HierBatch& b);
// Internal error when a received row names an expert this rank does not hold.
Status check_stage2_experts(const HierCall& c, const HierBatch& b);
// b.y = the local experts' FFN of the stage-2 rows received (ws->experts, its progress
// hook as the caller set it); timings and the trace span.
void compute_experts(const HierCall& c, HierBatch& b);
// Packs n result rows (f32 [n, hidden]) for a combine.
void pack_results(const Wire& wire, const float* rows, int64_t n, std::vector<uint8_t>* send);
// Adds the returned rows of stage s into acc[s.src_row[i]] (rows in order).
void accumulate_results(const HierCall& c, const StageRows& s, const uint8_t* recv, float* acc);
// Zeroes b.gw_out ([gateway_rows, hidden]) before the stage-2 combine.
float* zero_gateway_out(const HierCall& c, HierBatch& b);
// out[gw_token[i]] += gw_out[i] for the own-node gateway rows (before the stage-1 combine).
void add_own_rows(const HierCall& c, const HierBatch& b, float* out);
// The counters and trace of an exchange: its bytes when issued, its wait and duration
// (issued to the wait's end) when finished.
void count_issued(const HierCall& c, const std::vector<size_t>& sb, const std::vector<size_t>& rb);
void count_finished(const HierCall& c, EpWaitRecord w);  // w.layer: the call's, whatever given

// The overlapped form (ep_hierarchical_pipeline.cc): n_mb >= 2 micro-batches.
Status hierarchical_pipeline(const HierCall& c, int n_mb);

}  // namespace hier_detail
}  // namespace moe
