// moe bench a2a: the expert-parallel dispatch + combine exchange of our EP layer
// (ep_moe_forward_routed) against a plain MPI_Alltoallv of the naive layout (one row per
// (token, expert) assignment), against single-thread memcpy, flat vs hierarchical, f32
// vs bf16 on the wire, and how much communication the overlap mode hides.
//
// Run under mpirun (rank 0 prints):
//   mpirun -np 4 moe bench a2a --ranks-per-node 2
#include <omp.h>

// The C API only (Debian's Open MPI would otherwise pull in the C++ bindings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_moe_layer.h"

namespace moe::cli {
namespace {

struct A2aFlags {
  std::vector<int> hidden = {1024, 4096};
  std::vector<int> tokens = {16, 64, 256};
  std::vector<std::string> routing = {"uniform", "zipf"};
  int experts = 64;
  int top_k = 8;
  double zipf_s = 1.2;
  int repeats = 10;
  int warmup = 2;
  int ranks_per_node = -1;  // -1: N/2 when N >= 4, else 0 (one node)
  bool no_overlap = false;
  bool no_bf16 = false;
  int overlap_max_intermediate = 512;
  int algo_hidden = 4096;
  int algo_tokens = 256;
  int threads = 1;
  int64_t seed = 1;
  double timeout = 120;
  std::string stat = "median";  // or "min": the statistic over repeats
};

// ---------------------------------------------------------------------------------------
// Statistics over ranks and repeats.

bool g_use_min = false;  // --stat min

// The statistic over repeats: median (default) or min (--stat min).
double stat_of(std::vector<double> v) {
  if (g_use_min && !v.empty()) return *std::min_element(v.begin(), v.end());
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Element-wise max over ranks (per repeat: the collective takes as long as its slowest rank).
std::vector<double> max_over_ranks(std::vector<double> v) {
  if (!v.empty()) MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

int64_t sum_over_ranks(int64_t v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

// Timed repeats after the warm-ups: at least `base`, more when a call is fast (to about
// 0.2 s of calls, at most 10x base), from the slowest rank's last warm-up (so every rank
// agrees). Fast calls are the ones a scheduler hiccup on the shared 2-core machine skews.
int adapt_repeats(double last_warmup_seconds, int base) {
  double d = last_warmup_seconds;
  MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (!(d > 0)) return base;
  return static_cast<int>(std::clamp(0.2 / d, static_cast<double>(base), 10.0 * base));
}

[[noreturn]] void die(int rank, const std::string& what, const Status& st) {
  std::fprintf(stderr, "error: rank %d: %s: %s\n", rank, what.c_str(), st.message().c_str());
  std::fflush(stderr);
  mpi_abort(1);
}

// ---------------------------------------------------------------------------------------
// Synthetic routing and layer.

// Each token's top_k distinct experts: uniform, or Zipf(s) over expert ids (expert e has
// weight 1/(e+1)^s, so the hottest experts are the low ids, held by rank 0 under the
// contiguous placement), sampled without replacement. Routing weights 1/top_k.
void make_routing(const std::string& kind, double s, int num_tokens, int num_experts, int top_k, uint64_t seed,
                  std::vector<int>* idx, std::vector<float>* w) {
  std::mt19937_64 rng(seed);
  idx->assign(static_cast<size_t>(num_tokens) * top_k, 0);
  w->assign(static_cast<size_t>(num_tokens) * top_k, 1.0f / static_cast<float>(top_k));
  std::vector<double> base(static_cast<size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) base[static_cast<size_t>(e)] = kind == "zipf" ? std::pow(e + 1.0, -s) : 1.0;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> p;
  for (int t = 0; t < num_tokens; ++t) {
    p = base;
    double total = 0;
    for (double v : p) total += v;
    for (int j = 0; j < top_k; ++j) {
      double r = u(rng) * total;
      int pick = -1;
      for (int e = 0; e < num_experts; ++e) {
        if (p[static_cast<size_t>(e)] <= 0) continue;
        pick = e;  // the last positive one absorbs rounding
        r -= p[static_cast<size_t>(e)];
        if (r < 0) break;
      }
      (*idx)[static_cast<size_t>(t) * top_k + j] = pick;
      total -= p[static_cast<size_t>(pick)];
      p[static_cast<size_t>(pick)] = 0;
    }
  }
}

// A layer whose experts all view one shared set of f32 matrices (only the experts
// placed on this rank are marked loaded). With intermediate 1 the GEMMs are nearly free;
// the FFN's gather and weighted scatter of the received rows remain.
struct SyntheticLayer {
  ModelConfig config;
  LayerWeights layer;
  std::vector<float> w1, w2, w3;
};

std::unique_ptr<SyntheticLayer> make_layer(int hidden, int intermediate, int num_experts, int top_k,
                                           const ExpertPlacement& placement, int rank) {
  auto s = std::make_unique<SyntheticLayer>();
  s->config.model_type = "synthetic";
  s->config.hidden_size = hidden;
  s->config.intermediate_size = intermediate;
  s->config.router.num_experts = num_experts;
  s->config.router.top_k = top_k;
  const size_t n = static_cast<size_t>(hidden) * static_cast<size_t>(intermediate);
  s->w1.resize(n);
  s->w2.resize(n);
  s->w3.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s->w1[i] = 0.01f * static_cast<float>(static_cast<int>(i % 7) - 3);
    s->w3[i] = 0.01f * static_cast<float>(static_cast<int>(i % 5) - 2);
    s->w2[i] = 0.01f * static_cast<float>(static_cast<int>(i % 3) - 1);
  }
  s->layer.experts.resize(static_cast<size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) {
    ExpertWeights& ew = s->layer.experts[static_cast<size_t>(e)];
    ew.w1 = {s->w1.data(), DType::kF32, intermediate, hidden};
    ew.w3 = {s->w3.data(), DType::kF32, intermediate, hidden};
    ew.w2 = {s->w2.data(), DType::kF32, hidden, intermediate};
    ew.loaded = placement.rank_of(e) == rank;
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// Measurements.

struct LayerRun {
  // Each a statistic (stat_of: median, or min) over the repeats.
  double call = 0;      // the slowest rank's whole call
  double exchange = 0;  // slowest call - slowest expert compute: the exchange's critical path
  double compute = 0;   // the slowest rank's expert compute
  double wait = 0;      // the slowest rank's EpTimings.comm_wait_seconds
  int64_t bytes = 0;    // bytes sent by all ranks in one call (dispatch + combine)
};

struct Problem {
  const A2aFlags* f = nullptr;
  Communicator* comm = nullptr;
  ExpertPlacement placement;
  int hidden = 0, tokens = 0;
  std::vector<float> x;
  mutable std::vector<float> out;  // the layer's output, scratch
  std::vector<int> idx;
  std::vector<float> w;
};

LayerRun run_layer(const Problem& p, const SyntheticLayer& sl, const EpOptions& opt, int warmup, int repeats,
                   const char* what) {
  EpContext ctx{p.comm, p.placement, opt};
  EpWorkspacePtr ws = make_ep_workspace();
  std::vector<double> call, comp, wait;
  int64_t bytes = 0;
  float* out = p.out.data();
  for (int i = 0; i < warmup + repeats; ++i) {
    Status st = p.comm->barrier();
    if (!st.ok()) die(p.comm->rank(), "barrier", st);
    EpTimings t;
    const double t0 = now_seconds();
    st = ep_moe_forward_routed(sl.config, sl.layer, p.x.data(), p.tokens, p.idx.data(), p.w.data(), ctx, ws.get(),
                               out, &t);
    const double dt = now_seconds() - t0;
    if (!st.ok()) die(p.comm->rank(), what, st);
    if (i == warmup - 1) repeats = adapt_repeats(dt, repeats);
    if (i < warmup) continue;
    call.push_back(dt);
    comp.push_back(t.compute_seconds);
    wait.push_back(t.comm_wait_seconds);
    bytes = t.bytes_sent;
  }
  // A rank that finishes its experts early waits in the combine for the slowest one, so
  // "own call - own compute" would count another rank's compute as communication; the
  // critical path is the slowest call minus the slowest compute.
  call = max_over_ranks(call);
  comp = max_over_ranks(comp);
  std::vector<double> exch(call.size());
  for (size_t i = 0; i < call.size(); ++i) exch[i] = std::max(0.0, call[i] - comp[i]);
  LayerRun r;
  r.call = stat_of(call);
  r.exchange = stat_of(exch);
  r.compute = stat_of(comp);
  r.wait = stat_of(max_over_ranks(wait));
  r.bytes = sum_over_ranks(bytes);
  return r;
}

struct WireRun {
  double time = 0;       // counts MPI_Alltoall + dispatch and combine MPI_Alltoallv
  double with_pack = 0;  // the same plus packing the rows and summing the returned rows (plain only)
  int64_t bytes = 0;     // all ranks, both directions
};

// Rows of the exchange to time: dispatch rows of `send_row` bytes to each rank, combine
// rows of `back_row` bytes returned.
WireRun time_wire(const std::vector<int>& send_cnt, int64_t send_row, int64_t back_row, int warmup, int repeats) {
  const int R = static_cast<int>(send_cnt.size());
  std::vector<int> recv_cnt(static_cast<size_t>(R)), sdispl(static_cast<size_t>(R) + 1, 0),
      rdispl(static_cast<size_t>(R) + 1, 0);
  for (int r = 0; r < R; ++r) sdispl[static_cast<size_t>(r) + 1] = sdispl[static_cast<size_t>(r)] + send_cnt[static_cast<size_t>(r)];
  MPI_Alltoall(send_cnt.data(), 1, MPI_INT, recv_cnt.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < R; ++r) rdispl[static_cast<size_t>(r) + 1] = rdispl[static_cast<size_t>(r)] + recv_cnt[static_cast<size_t>(r)];
  const int64_t ns = sdispl[static_cast<size_t>(R)], nr = rdispl[static_cast<size_t>(R)];
  std::vector<char> send(static_cast<size_t>(ns * send_row) + 1, 1), recv(static_cast<size_t>(nr * send_row) + 1);
  std::vector<char> back_send(static_cast<size_t>(nr * back_row) + 1, 2), back_recv(static_cast<size_t>(ns * back_row) + 1);
  MPI_Datatype st, bt;
  MPI_Type_contiguous(static_cast<int>(send_row), MPI_BYTE, &st);
  MPI_Type_commit(&st);
  MPI_Type_contiguous(static_cast<int>(back_row), MPI_BYTE, &bt);
  MPI_Type_commit(&bt);
  std::vector<int> probe(static_cast<size_t>(R));
  std::vector<double> times;
  for (int i = 0; i < warmup + repeats; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    MPI_Alltoall(send_cnt.data(), 1, MPI_INT, probe.data(), 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Alltoallv(send.data(), send_cnt.data(), sdispl.data(), st, recv.data(), probe.data(), rdispl.data(), st,
                  MPI_COMM_WORLD);
    MPI_Alltoallv(back_send.data(), probe.data(), rdispl.data(), bt, back_recv.data(), send_cnt.data(), sdispl.data(),
                  bt, MPI_COMM_WORLD);
    const double dt = now_seconds() - t0;
    if (i == warmup - 1) repeats = adapt_repeats(dt, repeats);
    if (i >= warmup) times.push_back(dt);
  }
  MPI_Type_free(&st);
  MPI_Type_free(&bt);
  WireRun w;
  w.time = stat_of(max_over_ranks(times));
  w.bytes = sum_over_ranks(ns * send_row + nr * back_row);
  return w;
}

// Our layer's wire pattern alone: one row per (token, destination rank) with the
// expert ids and weights (f32), one f32 row back; raw MPI, no packing.
WireRun run_ours_wire(const Problem& p, int warmup, int repeats) {
  const int R = p.comm->size(), k = p.f->top_k;
  std::vector<int> cnt(static_cast<size_t>(R), 0);
  std::vector<char> hit(static_cast<size_t>(R));
  for (int t = 0; t < p.tokens; ++t) {
    std::fill(hit.begin(), hit.end(), 0);
    for (int j = 0; j < k; ++j) hit[static_cast<size_t>(p.placement.rank_of(p.idx[static_cast<size_t>(t) * k + j]))] = 1;
    for (int r = 0; r < R; ++r) cnt[static_cast<size_t>(r)] += hit[static_cast<size_t>(r)];
  }
  const int64_t act = static_cast<int64_t>(p.hidden) * 4;
  return time_wire(cnt, act + 8 * k, act, warmup, repeats);
}

// What a simple EP implementation sends: every (token, expert) assignment as its own f32
// row to the expert's rank (dispatch), and every expert output row back (combine), with
// blocking MPI_Alltoallv on MPI_COMM_WORLD. `time`: the counts MPI_Alltoall and both
// MPI_Alltoallv calls; `with_pack` adds packing the k rows per token and the weighted
// sum of the k returned rows (the work our layer's time includes).
WireRun run_plain(const Problem& p, int warmup, int repeats) {
  const int R = p.comm->size(), k = p.f->top_k;
  std::vector<int> send_cnt(static_cast<size_t>(R), 0), recv_cnt(static_cast<size_t>(R), 0);
  for (int t = 0; t < p.tokens; ++t) {
    for (int j = 0; j < k; ++j) ++send_cnt[static_cast<size_t>(p.placement.rank_of(p.idx[static_cast<size_t>(t) * k + j]))];
  }
  WireRun w = time_wire(send_cnt, static_cast<int64_t>(p.hidden) * 4, static_cast<int64_t>(p.hidden) * 4, warmup, repeats);

  // Full naive step with packing and summing.
  std::vector<int> sdispl(static_cast<size_t>(R) + 1, 0), rdispl(static_cast<size_t>(R) + 1, 0);
  for (int r = 0; r < R; ++r) sdispl[static_cast<size_t>(r) + 1] = sdispl[static_cast<size_t>(r)] + send_cnt[static_cast<size_t>(r)];
  const size_t row = static_cast<size_t>(p.hidden);
  std::vector<float> send(static_cast<size_t>(sdispl[static_cast<size_t>(R)]) * row + 1);
  std::vector<int> pos(static_cast<size_t>(p.tokens) * k);  // send row of each (token, slot)
  {
    std::vector<int> fill(sdispl.begin(), sdispl.end() - 1);
    for (int t = 0; t < p.tokens; ++t) {
      for (int j = 0; j < k; ++j) {
        const int dest = p.placement.rank_of(p.idx[static_cast<size_t>(t) * k + j]);
        pos[static_cast<size_t>(t) * k + j] = fill[static_cast<size_t>(dest)]++;
      }
    }
  }
  MPI_Alltoall(send_cnt.data(), 1, MPI_INT, recv_cnt.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < R; ++r) rdispl[static_cast<size_t>(r) + 1] = rdispl[static_cast<size_t>(r)] + recv_cnt[static_cast<size_t>(r)];
  std::vector<float> recv(static_cast<size_t>(rdispl[static_cast<size_t>(R)]) * row + 1);
  std::vector<float> back(send.size());
  std::vector<float> out(static_cast<size_t>(p.tokens) * row);
  MPI_Datatype row_type;
  MPI_Type_contiguous(p.hidden, MPI_FLOAT, &row_type);
  MPI_Type_commit(&row_type);
  std::vector<int> probe(static_cast<size_t>(R));
  std::vector<double> times;
  int n = repeats;
  for (int i = 0; i < warmup + n; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_seconds();
    for (int t = 0; t < p.tokens; ++t) {
      for (int j = 0; j < k; ++j) {
        std::memcpy(send.data() + static_cast<size_t>(pos[static_cast<size_t>(t) * k + j]) * row,
                    p.x.data() + static_cast<size_t>(t) * row, row * sizeof(float));
      }
    }
    MPI_Alltoall(send_cnt.data(), 1, MPI_INT, probe.data(), 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Alltoallv(send.data(), send_cnt.data(), sdispl.data(), row_type, recv.data(), probe.data(), rdispl.data(),
                  row_type, MPI_COMM_WORLD);
    MPI_Alltoallv(recv.data(), probe.data(), rdispl.data(), row_type, back.data(), send_cnt.data(), sdispl.data(),
                  row_type, MPI_COMM_WORLD);
    std::fill(out.begin(), out.end(), 0.0f);
    for (int t = 0; t < p.tokens; ++t) {
      float* dst = out.data() + static_cast<size_t>(t) * row;
      for (int j = 0; j < k; ++j) {
        const float wt = p.w[static_cast<size_t>(t) * k + j];
        const float* src = back.data() + static_cast<size_t>(pos[static_cast<size_t>(t) * k + j]) * row;
        for (size_t h = 0; h < row; ++h) dst[h] += wt * src[h];
      }
    }
    const double dt = now_seconds() - t0;
    if (i == warmup - 1) n = adapt_repeats(dt, n);
    if (i >= warmup) times.push_back(dt);
  }
  MPI_Type_free(&row_type);
  w.with_pack = stat_of(max_over_ranks(times));
  return w;
}

// Single-thread memcpy bandwidth (bytes/s) copying `bytes` (buffers capped at 256 MiB,
// chunks repeated beyond that); median (--stat min: best) of 5 samples of >= ~2 ms each.
double memcpy_bandwidth(int64_t bytes) {
  const size_t cap = size_t{256} << 20;
  const size_t n = static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(bytes, static_cast<int64_t>(cap))));
  std::vector<char> src(n, 1), dst(n, 0);
  std::memcpy(dst.data(), src.data(), n);  // fault the pages in
  const int64_t chunks = std::max<int64_t>(1, (bytes + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n));
  int64_t iters = chunks;
  std::vector<double> bw;
  for (int s = 0; s < 5;) {
    const double t0 = now_seconds();
    for (int64_t i = 0; i < iters; ++i) {
      std::memcpy(dst.data(), src.data(), n);
      src[static_cast<size_t>(i) % n] ^= static_cast<char>(dst[n - 1 - static_cast<size_t>(i) % n]);  // keep it live
    }
    const double dt = now_seconds() - t0;
    if (dt < 2e-3 && iters < (int64_t{1} << 30)) {
      iters *= 2;
      continue;
    }
    bw.push_back(static_cast<double>(iters) * static_cast<double>(n) / dt);
    ++s;
  }
  if (g_use_min) return *std::max_element(bw.begin(), bw.end());  // best case, like the min times
  return stat_of(bw);
}

// Bytes crossing node boundaries in one call (all ranks, dispatch + combine), f32, for
// plain (one row per remote-node assignment), flat (one row per (token, remote-node
// rank)) and hierarchical (one row per (token, remote node)).
struct CrossNode {
  int64_t plain = 0, flat = 0, hier = 0;
};

CrossNode cross_node_bytes(const Problem& p) {
  const Communicator& c = *p.comm;
  const int k = p.f->top_k, me = c.rank();
  const int64_t act = static_cast<int64_t>(p.hidden) * 4, row = act + static_cast<int64_t>(k) * 8;
  CrossNode x;
  std::vector<char> rank_hit(static_cast<size_t>(c.size())), node_hit(static_cast<size_t>(c.num_nodes()));
  for (int t = 0; t < p.tokens; ++t) {
    std::fill(rank_hit.begin(), rank_hit.end(), 0);
    std::fill(node_hit.begin(), node_hit.end(), 0);
    for (int j = 0; j < k; ++j) {
      const int r = p.placement.rank_of(p.idx[static_cast<size_t>(t) * k + j]);
      if (c.node_of(r) == c.node_of(me)) continue;
      x.plain += 2 * act;
      rank_hit[static_cast<size_t>(r)] = 1;
      node_hit[static_cast<size_t>(c.node_of(r))] = 1;
    }
    for (char h : rank_hit) x.flat += h ? row + act : 0;
    for (char h : node_hit) x.hier += h ? row + act : 0;
  }
  x.plain = sum_over_ranks(x.plain);
  x.flat = sum_over_ranks(x.flat);
  x.hier = sum_over_ranks(x.hier);
  return x;
}

// Rough peak memory of one configuration on all ranks together (bytes): inputs, the EP
// layer's buffers (flat), the expert FFN's gathered rows, and the plain run's buffers.
int64_t estimate_memory(const Problem& p) {
  const int R = p.comm->size(), k = p.f->top_k;
  std::vector<int64_t> rows(static_cast<size_t>(R), 0), assign(static_cast<size_t>(R), 0);
  std::vector<char> hit(static_cast<size_t>(R));
  for (int t = 0; t < p.tokens; ++t) {
    std::fill(hit.begin(), hit.end(), 0);
    for (int j = 0; j < k; ++j) {
      const int r = p.placement.rank_of(p.idx[static_cast<size_t>(t) * k + j]);
      ++assign[static_cast<size_t>(r)];
      hit[static_cast<size_t>(r)] = 1;
    }
    for (int r = 0; r < R; ++r) rows[static_cast<size_t>(r)] += hit[static_cast<size_t>(r)];
  }
  int64_t sent_rows = 0, sent_assign = 0;
  for (int r = 0; r < R; ++r) {
    sent_rows += rows[static_cast<size_t>(r)];
    sent_assign += assign[static_cast<size_t>(r)];
  }
  // Received counts: sum over senders.
  MPI_Allreduce(MPI_IN_PLACE, rows.data(), R, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, assign.data(), R, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  const int64_t act = static_cast<int64_t>(p.hidden) * 4, row = act + static_cast<int64_t>(k) * 8;
  const int me = p.comm->rank();
  const int64_t recv_rows = rows[static_cast<size_t>(me)], recv_assign = assign[static_cast<size_t>(me)];
  int64_t mine = 2 * static_cast<int64_t>(p.tokens) * act                  // x, out
                 + sent_rows * (row + act) + recv_rows * (row + 3 * act)   // layer buffers
                 + 2 * recv_assign * act                                    // FFN gather + expert out
                 + 2 * sent_assign * act + recv_assign * act;               // plain
  return sum_over_ranks(mine);
}

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return int64_t{1} << 40;  // unknown: do not limit
}

// ---------------------------------------------------------------------------------------

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// The first bad flag, or "" when all are fine.
std::string validate(const A2aFlags& f) {
  if (f.hidden.empty()) return ("--hidden needs at least one value");
  for (int h : f.hidden) {
    if (h < 1) return ("--hidden values must be >= 1 (got " + std::to_string(h) + ")");
    if (h > (1 << 20)) return ("--hidden values must be <= 1048576 (got " + std::to_string(h) + ")");
  }
  if (f.tokens.empty()) return ("--tokens needs at least one value");
  for (int t : f.tokens) {
    if (t < 1) return ("--tokens values must be >= 1 (got " + std::to_string(t) + ")");
    if (t > (1 << 24)) return ("--tokens values must be <= 16777216 (got " + std::to_string(t) + ")");
  }
  if (f.routing.empty()) return ("--routing needs at least one value");
  for (const std::string& r : f.routing) {
    if (r != "uniform" && r != "zipf") return ("--routing values must be uniform or zipf (got '" + r + "')");
  }
  if (f.experts < 1) return ("--experts must be >= 1 (got " + std::to_string(f.experts) + ")");
  if (f.experts > 65536) return ("--experts must be <= 65536 (got " + std::to_string(f.experts) + ")");
  if (f.top_k < 1) return ("--top-k must be >= 1 (got " + std::to_string(f.top_k) + ")");
  if (f.top_k > f.experts) {
    return ("--top-k " + std::to_string(f.top_k) + " exceeds --experts " + std::to_string(f.experts));
  }
  if (f.top_k > 64) return ("--top-k must be <= 64 (the hierarchical exchange's limit; got " + std::to_string(f.top_k) + ")");
  if (!(f.zipf_s > 0 && f.zipf_s <= 50)) {
    return ("--zipf-s must be in (0, 50] (got " + std::to_string(f.zipf_s) + ")");
  }
  if (f.repeats < 1) return ("--repeats must be >= 1 (got " + std::to_string(f.repeats) + ")");
  if (f.warmup < 0) return ("--warmup must be >= 0 (got " + std::to_string(f.warmup) + ")");
  if (f.ranks_per_node < -1) {
    return ("--ranks-per-node must be >= 0 (got " + std::to_string(f.ranks_per_node) + ")");
  }
  if (f.overlap_max_intermediate < 1) {
    return ("--overlap-max-intermediate must be >= 1 (got " + std::to_string(f.overlap_max_intermediate) + ")");
  }
  if (f.algo_hidden < 0) return ("--algo-hidden must be >= 0 (0 skips; got " + std::to_string(f.algo_hidden) + ")");
  if (f.algo_tokens < 1) return ("--algo-tokens must be >= 1 (got " + std::to_string(f.algo_tokens) + ")");
  if (f.stat != "median" && f.stat != "min") return ("--stat must be median or min (got '" + f.stat + "')");
  if (f.threads < 1) return ("--threads must be >= 1 (got " + std::to_string(f.threads) + ")");
  if (!(f.timeout > 0) || !std::isfinite(f.timeout)) {
    return ("--timeout must be a finite number of seconds > 0 (got " + std::to_string(f.timeout) + ")");
  }
  return "";
}

int run_a2a(const A2aFlags& f) {
  // Every rank sees the same argv, so every rank fails the same check here, before any
  // collective: no rank is left waiting. Only rank 0 prints the message.
  if (!launched_under_mpi()) {
    return fail("bench a2a measures an MPI exchange: run it as mpirun -np N moe bench a2a ... (N >= 1)");
  }
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const bool root = world_rank == 0;
  // Errors every rank hits alike are printed by rank 0 only; all ranks exit 1.
  auto fail_all = [root](const std::string& message) { return root ? fail(message) : 1; };
  if (std::string bad = validate(f); !bad.empty()) return fail_all(bad);
  const int N = world_size;
  const int rpn = f.ranks_per_node >= 0 ? f.ranks_per_node : (N >= 4 ? N / 2 : 0);
  omp_set_num_threads(f.threads);
  g_use_min = f.stat == "min";

  MpiOptions mo;
  mo.ranks_per_node = rpn;
  mo.timeout_seconds = f.timeout;
  auto comm_or = make_mpi_communicator(mo);
  if (!comm_or.ok()) return fail(comm_or.status().message());
  std::unique_ptr<Communicator> comm = std::move(comm_or).value();
  const int nodes = comm->num_nodes();
  const bool hier = nodes > 1;

  if (root) {
    std::printf("moe bench a2a: %d ranks, %d node%s%s, %d experts top-%d (contiguous placement), %d thread%s per rank\n",
                N, nodes, nodes == 1 ? "" : "s",
                rpn > 0 ? (" (emulated: --ranks-per-node " + std::to_string(rpn) + ")").c_str() : "", f.experts,
                f.top_k, f.threads, f.threads == 1 ? "" : "s");
    std::printf("hidden %s, tokens per rank %s, %d warm-up + >= %d timed repeats (barrier before each; fast cases\n"
                "repeat up to 10x, to ~0.2 s), %s of the slowest rank\n\n",
                join(f.hidden).c_str(), join(f.tokens).c_str(), f.warmup, f.repeats, f.stat.c_str());
    std::printf(
        "Columns (MB = 1e6 bytes summed over all ranks and both directions, dispatch + combine, self-copies included;\n"
        "ms = median (or --stat min) over repeats of the slowest rank):\n"
        "  ours MB, ms     our EP layer (ep_moe_forward_routed, flat, f32 on the wire): one row per (token, destination\n"
        "                  rank) carrying the token's expert ids and weights. ms = slowest whole call - slowest expert\n"
        "                  compute, i.e. layout, counts exchange, pack, both exchanges, unpack, weighted sum\n"
        "  GB/s            ours MB / ours ms\n"
        "  ffn ms          the expert compute taken out (synthetic experts of intermediate size 1; mostly the\n"
        "                  gather/scatter of rows, which grows with the rows received, so not zero)\n"
        "  bf16 MB, ms     the same layer with EpOptions.a2a_bf16 (activations as bf16 on the wire)\n"
        "  wire ms         our layout's rows alone through raw MPI (counts MPI_Alltoall + MPI_Alltoallv there and back,\n"
        "                  no packing): the exchange without the layer's CPU work\n"
        "  plain MB, ms    naive layout: one f32 row per (token, expert) assignment, k rows per token; counts\n"
        "                  MPI_Alltoall + blocking MPI_Alltoallv there and back, packing not timed\n"
        "  +pack ms        plain plus packing the k rows per token and the weighted sum of the k returned rows\n"
        "  speed-up        plain ms / ours ms;  vs +pack: +pack ms / ours ms;  wire x: plain ms / wire ms\n"
        "  memcpy GB/s     one thread memcpy of 'ours MB' bytes on rank 0 while the others sleep (buffers <= 256 MiB)\n"
        "  %%memcpy         ours GB/s / memcpy GB/s (the ranks copy in parallel: up to min(ranks, cores) x 100%%)\n"
        "  hierarchical    EpOptions.hierarchical (two-level: one crossing per (token, remote node), forwarded inside\n"
        "                  the node); x-node MB = bytes crossing nodes for plain / flat / hier, from the routing\n"
        "  overlap         EpOptions.overlap (two micro-batches) with experts of intermediate size 'inter', chosen so\n"
        "                  expert compute ~ exchange time; wait = slowest rank's EpTimings.comm_wait_seconds;\n"
        "                  hidden = 1 - wait(on) / wait(off); call = slowest whole call\n\n");
    std::fflush(stdout);
  }

  std::map<int64_t, double> memcpy_cache;
  const ExpertPlacement placement = ExpertPlacement::contiguous(f.experts, N);
  const int64_t avail = mem_available_bytes();

  for (int hidden : f.hidden) {
    for (const std::string& routing : f.routing) {
      const std::string rname = routing == "zipf" ? "zipf (s=" + std::to_string(f.zipf_s).substr(0, 4) + ")" : routing;
      if (root) {
        std::printf("== hidden %d, routing %s ==\n", hidden, rname.c_str());
        std::printf("%8s | %8s %8s %5s %8s | %7s %8s | %8s | %8s %8s %8s | %8s %8s %7s | %6s %7s\n", "tokens",
                    "ours MB", "ours ms", "GB/s", "ffn ms", "bf16 MB", "bf16 ms", "wire ms", "plain MB", "plain ms",
                    "+pack ms", "speed-up", "vs +pack", "wire x", "memcpy", "%memcpy");
        std::printf("%8s | %8s %8s %5s %8s | %7s %8s | %8s | %8s %8s %8s | %8s %8s %7s | %6s %7s\n", "per rank", "", "",
                    "", "", "", "", "", "", "", "", "", "", "", "GB/s", "");
        std::fflush(stdout);
      }
      struct Extra {
        int tokens;
        LayerRun flat, hier;
        WireRun plain, wire;
        CrossNode x;
        int inter = 0;
        LayerRun off, on;
      };
      std::vector<Extra> extras;
      for (int tokens : f.tokens) {
        Problem p;
        p.f = &f;
        p.comm = comm.get();
        p.placement = placement;
        p.hidden = hidden;
        p.tokens = tokens;
        const uint64_t seed = static_cast<uint64_t>(f.seed) * 1000003u + static_cast<uint64_t>(world_rank) * 7919u +
                              static_cast<uint64_t>(tokens) * 31u + (routing == "zipf" ? 17u : 0u);
        make_routing(routing, f.zipf_s, tokens, f.experts, f.top_k, seed, &p.idx, &p.w);
        p.x.resize(static_cast<size_t>(tokens) * static_cast<size_t>(hidden));
        std::mt19937 rng(static_cast<uint32_t>(seed));
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : p.x) v = u(rng);
        p.out.resize(p.x.size());
        const int64_t need = estimate_memory(p);  // same value on every rank
        if (static_cast<double>(need) > 0.8 * static_cast<double>(avail)) {
          return fail_all("hidden " + std::to_string(hidden) + " x tokens " + std::to_string(tokens) + " needs about " +
                      std::to_string(need / 1000000000.0).substr(0, 5) + " GB on " + std::to_string(N) +
                      " ranks, more than 80% of the available memory (" +
                      std::to_string(avail / 1000000000.0).substr(0, 5) + " GB): reduce --tokens or --hidden");
        }
        auto progress = [&](const char* what) {
          if (!root) return;
          std::fprintf(stderr, "\r[hidden %d %s tokens %d] %-24s", hidden, routing.c_str(), tokens, what);
          std::fflush(stderr);
        };
        Extra ex;
        ex.tokens = tokens;
        auto tiny = make_layer(hidden, 1, f.experts, f.top_k, placement, world_rank);
        progress("flat f32");
        ex.flat = run_layer(p, *tiny, EpOptions{}, f.warmup, f.repeats, "flat f32");
        LayerRun bf16;
        if (!f.no_bf16) {
          progress("flat bf16");
          EpOptions o;
          o.a2a_bf16 = true;
          bf16 = run_layer(p, *tiny, o, f.warmup, f.repeats, "flat bf16");
        }
        progress("plain MPI_Alltoallv");
        ex.plain = run_plain(p, f.warmup, f.repeats);
        progress("our layout, raw MPI");
        ex.wire = run_ours_wire(p, f.warmup, f.repeats);
        if (hier) {
          progress("hierarchical f32");
          EpOptions o;
          o.hierarchical = true;
          ex.hier = run_layer(p, *tiny, o, f.warmup, f.repeats, "hierarchical f32");
          ex.x = cross_node_bytes(p);
        }
        tiny.reset();
        // memcpy on rank 0 alone (the others wait in the barrier, sleeping).
        double mbw = 0;
        progress("memcpy");
        if (root) {
          auto it = memcpy_cache.find(ex.flat.bytes);
          if (it == memcpy_cache.end()) it = memcpy_cache.emplace(ex.flat.bytes, memcpy_bandwidth(ex.flat.bytes)).first;
          mbw = it->second;
        }
        if (Status st = comm->barrier(); !st.ok()) die(world_rank, "barrier", st);

        if (!f.no_overlap) {
          // Calibrate the synthetic FFN: compute(I) ~ c1 + (cI - c1) (I - 1) / (I0 - 1).
          progress("overlap calibration");
          const int i0 = std::min(32, f.overlap_max_intermediate);
          int inter = 1;
          if (i0 > 1) {
            auto cal = make_layer(hidden, i0, f.experts, f.top_k, placement, world_rank);
            const LayerRun c = run_layer(p, *cal, EpOptions{}, 1, 3, "overlap calibration");
            const double per = (c.compute - ex.flat.compute) / (i0 - 1);
            if (per > 0 && ex.flat.exchange > ex.flat.compute) {
              inter = 1 + static_cast<int>(std::lround((ex.flat.exchange - ex.flat.compute) / per));
            }
            inter = std::clamp(inter, 1, f.overlap_max_intermediate);
          }
          MPI_Bcast(&inter, 1, MPI_INT, 0, MPI_COMM_WORLD);
          ex.inter = inter;
          auto loaded = make_layer(hidden, inter, f.experts, f.top_k, placement, world_rank);
          progress("overlap off");
          ex.off = run_layer(p, *loaded, EpOptions{}, f.warmup, f.repeats, "overlap off");
          progress("overlap on");
          EpOptions o;
          o.overlap = true;
          ex.on = run_layer(p, *loaded, o, f.warmup, f.repeats, "overlap on");
        }
        if (root) {
          std::fprintf(stderr, "\r%80s\r", "");
          const double ours_gbs = ex.flat.bytes / ex.flat.exchange / 1e9;
          char bf[64] = "", bfm[64] = "";
          if (!f.no_bf16) {
            std::snprintf(bf, sizeof(bf), "%.2f", bf16.bytes / 1e6);
            std::snprintf(bfm, sizeof(bfm), "%.3f", bf16.exchange * 1e3);
          }
          std::printf("%8d | %8.2f %8.3f %5.2f %8.3f | %7s %8s | %8.3f | %8.2f %8.3f %8.3f | %7.2fx %7.2fx %6.2fx | %6.2f "
                      "%6.0f%%\n",
                      tokens, ex.flat.bytes / 1e6, ex.flat.exchange * 1e3, ours_gbs, ex.flat.compute * 1e3, bf, bfm,
                      ex.wire.time * 1e3, ex.plain.bytes / 1e6, ex.plain.time * 1e3, ex.plain.with_pack * 1e3,
                      ex.plain.time / ex.flat.exchange, ex.plain.with_pack / ex.flat.exchange,
                      ex.plain.time / ex.wire.time, mbw / 1e9, 100.0 * ours_gbs * 1e9 / mbw);
          std::fflush(stdout);
        }
        extras.push_back(ex);
      }
      if (root && hier) {
        std::printf("\n  hierarchical (%d nodes of up to %d ranks)\n", nodes, rpn);
        std::printf("%8s | %9s %9s %7s %8s | %9s %9s | %10s %10s %10s\n", "tokens", "hier MB", "hier ms", "GB/s",
                    "ffn ms", "vs plain", "vs flat", "x-node MB", "x-node MB", "x-node MB");
        std::printf("%8s | %9s %9s %7s %8s | %9s %9s | %10s %10s %10s\n", "per rank", "", "", "", "", "", "", "plain",
                    "flat", "hier");
        for (const Extra& ex : extras) {
          std::printf("%8d | %9.2f %9.3f %7.2f %8.3f | %8.2fx %8.2fx | %10.2f %10.2f %10.2f\n", ex.tokens,
                      ex.hier.bytes / 1e6, ex.hier.exchange * 1e3, ex.hier.bytes / ex.hier.exchange / 1e9,
                      ex.hier.compute * 1e3, ex.plain.time / ex.hier.exchange, ex.flat.exchange / ex.hier.exchange,
                      ex.x.plain / 1e6, ex.x.flat / 1e6, ex.x.hier / 1e6);
        }
      }
      if (root && !f.no_overlap) {
        std::printf("\n  overlap (flat f32; two micro-batches)\n");
        std::printf("%8s | %6s %8s | %9s %9s %7s | %9s %9s %8s\n", "tokens", "inter", "ffn ms", "wait off", "wait on",
                    "hidden", "call off", "call on", "speed-up");
        std::printf("%8s | %6s %8s | %9s %9s %7s | %9s %9s %8s\n", "per rank", "", "", "ms", "ms", "", "ms", "ms", "");
        for (const Extra& ex : extras) {
          const double hidden_share = ex.off.wait > 0 ? 1.0 - ex.on.wait / ex.off.wait : 0.0;
          std::printf("%8d | %6d %8.3f | %9.3f %9.3f %6.0f%% | %9.3f %9.3f %7.2fx\n", ex.tokens, ex.inter,
                      ex.off.compute * 1e3, ex.off.wait * 1e3, ex.on.wait * 1e3, 100.0 * hidden_share,
                      ex.off.call * 1e3, ex.on.call * 1e3, ex.off.call / ex.on.call);
        }
      }
      if (root) {
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }

  // The communicator's two alltoallv algorithms on one size (our layer, flat f32, uniform).
  if (f.algo_hidden > 0) {
    Problem p;
    p.f = &f;
    p.comm = comm.get();
    p.placement = placement;
    p.hidden = f.algo_hidden;
    p.tokens = f.algo_tokens;
    make_routing("uniform", f.zipf_s, p.tokens, f.experts, f.top_k,
                 static_cast<uint64_t>(f.seed) * 1000003u + static_cast<uint64_t>(world_rank) * 7919u + 5u, &p.idx,
                 &p.w);
    p.x.assign(static_cast<size_t>(p.tokens) * static_cast<size_t>(p.hidden), 0.5f);
    p.out.resize(p.x.size());
    const int64_t need = estimate_memory(p);
    if (static_cast<double>(need) > 0.8 * static_cast<double>(avail)) {
      return fail_all("--algo-hidden x --algo-tokens needs more than 80% of the available memory: reduce them");
    }
    MpiOptions po = mo;
    po.a2a_algo = A2aAlgo::kPairwise;
    auto pc = make_mpi_communicator(po);
    if (!pc.ok()) return fail(pc.status().message());
    std::unique_ptr<Communicator> pair_comm = std::move(pc).value();
    auto tiny = make_layer(p.hidden, 1, f.experts, f.top_k, placement, world_rank);
    if (root) std::fprintf(stderr, "\r[a2a_algo] kMpiAlltoallv   ");
    LayerRun a = run_layer(p, *tiny, EpOptions{}, f.warmup, f.repeats, "a2a_algo kMpiAlltoallv");
    p.comm = pair_comm.get();
    if (root) std::fprintf(stderr, "\r[a2a_algo] kPairwise       ");
    LayerRun b = run_layer(p, *tiny, EpOptions{}, f.warmup, f.repeats, "a2a_algo kPairwise");
    p.comm = comm.get();
    pair_comm.reset();
    if (root) std::fprintf(stderr, "\r%40s\r", "");
    if (root) {
      std::printf("== MpiOptions.a2a_algo: our layer, flat f32, uniform, hidden %d, %d tokens per rank ==\n",
                  p.hidden, p.tokens);
      std::printf("%-16s %9s %9s %7s\n", "a2a_algo", "MB", "ms", "GB/s");
      std::printf("%-16s %9.2f %9.3f %7.2f\n", "kMpiAlltoallv", a.bytes / 1e6, a.exchange * 1e3,
                  a.bytes / a.exchange / 1e9);
      std::printf("%-16s %9.2f %9.3f %7.2f\n", "kPairwise", b.bytes / 1e6, b.exchange * 1e3,
                  b.bytes / b.exchange / 1e9);
      std::printf("faster: %s (%.2fx)\n", a.exchange <= b.exchange ? "kMpiAlltoallv" : "kPairwise",
                  std::max(a.exchange, b.exchange) / std::min(a.exchange, b.exchange));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

RunFn add_bench_a2a_command(CLI::App& app) {
  auto f = std::make_shared<A2aFlags>();
  app.add_option("--hidden", f->hidden, "Hidden sizes (comma list)")->delimiter(',')->capture_default_str();
  app.add_option("--tokens", f->tokens, "Tokens per rank (comma list); the full sweep is 16,64,256,1024,4096 (slower, more memory)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--routing", f->routing, "Routings: uniform, zipf (comma list)")->delimiter(',')->capture_default_str();
  app.add_option("--experts", f->experts, "Routed experts")->capture_default_str();
  app.add_option("--top-k", f->top_k, "Experts per token")->capture_default_str();
  app.add_option("--zipf-s", f->zipf_s, "Zipf exponent of the skewed routing")->capture_default_str();
  app.add_option("--repeats", f->repeats, "Timed repeats (median reported)")->capture_default_str();
  app.add_option("--warmup", f->warmup, "Untimed warm-up calls before the repeats")->capture_default_str();
  app.add_option("--ranks-per-node", f->ranks_per_node,
                 "Emulated node size for the hierarchical exchange; 0: real nodes; default N/2 when N >= 4, else 0");
  app.add_flag("--no-overlap", f->no_overlap, "Skip the overlap measurement");
  app.add_flag("--no-bf16", f->no_bf16, "Skip the bf16-on-the-wire measurement");
  app.add_option("--overlap-max-intermediate", f->overlap_max_intermediate,
                 "Cap on the synthetic experts' intermediate size for the overlap load")
      ->capture_default_str();
  app.add_option("--algo-hidden", f->algo_hidden, "Hidden size of the a2a_algo comparison (0 skips it)")
      ->capture_default_str();
  app.add_option("--algo-tokens", f->algo_tokens, "Tokens per rank of the a2a_algo comparison")->capture_default_str();
  app.add_option("--stat", f->stat, "Statistic over the repeats: median or min")->capture_default_str();
  app.add_option("--threads", f->threads, "OpenMP threads per rank (expert compute)")->capture_default_str();
  app.add_option("--seed", f->seed, "Routing and activation seed")->capture_default_str();
  app.add_option("--timeout", f->timeout, "Communicator timeout per operation (seconds)")->capture_default_str();
  return [f] { return run_a2a(*f); };
}

}  // namespace moe::cli
