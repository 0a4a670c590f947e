// moe bench a2a: measurements (see bench_a2a.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_a2a.h"
#include "moe/comm/mpi_baseline.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/core/clock.h"

namespace moe::cli {
namespace {

// ---------------------------------------------------------------------------------------
// Statistics over ranks and repeats.

bool g_use_min = false;  // --stat min

}  // namespace

void set_stat_min(bool on) { g_use_min = on; }

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
  if (Status st = mpi_world_max(&v); !st.ok()) die(mpi_world_rank(), "max over ranks", st);
  return v;
}

int64_t sum_over_ranks(int64_t v) {
  if (Status st = mpi_world_sum(&v); !st.ok()) die(mpi_world_rank(), "sum over ranks", st);
  return v;
}

// Timed repeats after the warm-ups: at least `base`, more when a call is fast (to about
// 0.2 s of calls, at most 10x base), from the slowest rank's last warm-up (so every rank
// agrees). Fast calls are the ones a scheduler hiccup on the shared 2-core machine skews.
int adapt_repeats(double last_warmup_seconds, int base) {
  double d = last_warmup_seconds;
  if (Status st = mpi_world_max(&d); !st.ok()) die(mpi_world_rank(), "max over ranks", st);
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

// Each token's num_topk distinct experts: uniform, or Zipf(s) over expert ids (expert e has
// weight 1/(e+1)^s, so the hottest experts are the low ids, held by rank 0 under the
// contiguous placement), sampled without replacement. Routing weights 1/num_topk.
void make_routing(const std::string& kind, double s, int num_tokens, int num_experts, int num_topk, uint64_t seed,
                  std::vector<int>* idx, std::vector<float>* w) {
  std::mt19937_64 rng(seed);
  idx->assign(static_cast<size_t>(num_tokens) * num_topk, 0);
  w->assign(static_cast<size_t>(num_tokens) * num_topk, 1.0f / static_cast<float>(num_topk));
  std::vector<double> base(static_cast<size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) base[static_cast<size_t>(e)] = kind == "zipf" ? std::pow(e + 1.0, -s) : 1.0;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> p;
  for (int t = 0; t < num_tokens; ++t) {
    p = base;
    double total = 0;
    for (double v : p) total += v;
    for (int j = 0; j < num_topk; ++j) {
      double r = u(rng) * total;
      int pick = -1;
      for (int e = 0; e < num_experts; ++e) {
        if (p[static_cast<size_t>(e)] <= 0) continue;
        pick = e;  // the last positive one absorbs rounding
        r -= p[static_cast<size_t>(e)];
        if (r < 0) break;
      }
      (*idx)[static_cast<size_t>(t) * num_topk + j] = pick;
      total -= p[static_cast<size_t>(pick)];
      p[static_cast<size_t>(pick)] = 0;
    }
  }
}


std::unique_ptr<SyntheticLayer> make_layer(int hidden, int intermediate, int num_experts, int num_topk,
                                           const ExpertPlacement& placement, int rank) {
  auto s = std::make_unique<SyntheticLayer>();
  s->config.model_type = "synthetic";
  s->config.hidden_size = hidden;
  s->config.intermediate_size = intermediate;
  s->config.moe_intermediate_size = intermediate;
  s->config.num_hidden_layers = 1;
  s->config.moe_layer = {true};
  s->config.router.num_experts = num_experts;
  s->config.router.top_k = num_topk;
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



LayerRun run_layer(const Problem& p, const SyntheticLayer& sl, const EpOptions& opt, int warmup, int repeats,
                   const char* what) {
  EpContext ctx{p.comm, p.placement, opt};
  EpWorkspacePtr ws = make_ep_workspace(sl.config, ctx, p.tokens);
  std::vector<double> call, comp, wait, unhidden;
  int64_t bytes = 0;
  float* out = p.out.data();
  for (int i = 0; i < warmup + repeats; ++i) {
    Status st = p.comm->barrier();
    if (!st.ok()) die(p.comm->rank(), "barrier", st);
    EpTimings t;
    const double t0 = now_seconds();
    st = ep_moe_forward_routed(MoeLayerArgs::f32(sl.config, sl.layer, p.x.data(), p.tokens, out),
                               {p.idx.data(), p.w.data(), p.tokens, sl.config.router.top_k}, ctx, ws.get(), &t);
    const double dt = now_seconds() - t0;
    if (!st.ok()) die(p.comm->rank(), what, st);
    if (i == warmup - 1) repeats = adapt_repeats(dt, repeats);
    if (i < warmup) continue;
    call.push_back(dt);
    comp.push_back(t.compute_seconds);
    wait.push_back(t.comm_wait_seconds);
    unhidden.push_back(1.0 - t.comm_overlap_ratio());
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
  r.ratio = 1.0 - stat_of(max_over_ranks(unhidden));
  r.bytes = sum_over_ranks(bytes);
  return r;
}


// Rows of the exchange to time: dispatch rows of `send_row` bytes to each rank, combine
// rows of `back_row` bytes returned.
WireRun time_wire(const std::vector<int>& send_cnt, int64_t send_row, int64_t back_row, int warmup, int repeats) {
  auto x_or = MpiRowExchange::create(send_cnt, send_row, back_row);
  if (!x_or.ok()) die(mpi_world_rank(), "raw MPI exchange", x_or.status());
  MpiRowExchange& x = *x_or.value();
  const int64_t ns = x.num_send_rows(), nr = x.num_recv_rows();
  std::vector<char> send(static_cast<size_t>(ns * send_row) + 1, 1), recv(static_cast<size_t>(nr * send_row) + 1);
  std::vector<char> back_send(static_cast<size_t>(nr * back_row) + 1, 2), back_recv(static_cast<size_t>(ns * back_row) + 1);
  std::vector<double> times;
  for (int i = 0; i < warmup + repeats; ++i) {
    if (Status st = mpi_world_barrier(); !st.ok()) die(mpi_world_rank(), "barrier", st);
    const double t0 = now_seconds();
    Status st = x.exchange(send.data(), recv.data(), back_send.data(), back_recv.data());
    const double dt = now_seconds() - t0;
    if (!st.ok()) die(mpi_world_rank(), "raw MPI exchange", st);
    if (i == warmup - 1) repeats = adapt_repeats(dt, repeats);
    if (i >= warmup) times.push_back(dt);
  }
  WireRun w;
  w.time = stat_of(max_over_ranks(times));
  w.bytes = sum_over_ranks(ns * send_row + nr * back_row);
  return w;
}

// Our layer's wire pattern alone: one row per (token, destination rank) with the
// expert ids and weights (f32), one f32 row back; raw MPI, no packing.
WireRun run_ours_wire(const Problem& p, int warmup, int repeats) {
  const int R = p.comm->size(), k = p.f->num_topk;
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
  const int R = p.comm->size(), k = p.f->num_topk;
  std::vector<int> send_cnt(static_cast<size_t>(R), 0);
  for (int t = 0; t < p.tokens; ++t) {
    for (int j = 0; j < k; ++j) ++send_cnt[static_cast<size_t>(p.placement.rank_of(p.idx[static_cast<size_t>(t) * k + j]))];
  }
  WireRun w = time_wire(send_cnt, static_cast<int64_t>(p.hidden) * 4, static_cast<int64_t>(p.hidden) * 4, warmup, repeats);

  // Full naive step with packing and summing.
  const size_t row = static_cast<size_t>(p.hidden);
  auto x_or = MpiRowExchange::create(send_cnt, static_cast<int64_t>(row * sizeof(float)),
                                     static_cast<int64_t>(row * sizeof(float)));
  if (!x_or.ok()) die(p.comm->rank(), "raw MPI exchange", x_or.status());
  MpiRowExchange& x = *x_or.value();
  const std::vector<int>& sdispl = x.send_displs();
  std::vector<float> send(static_cast<size_t>(x.num_send_rows()) * row + 1);
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
  std::vector<float> recv(static_cast<size_t>(x.num_recv_rows()) * row + 1);
  std::vector<float> back(send.size());
  std::vector<float> out(static_cast<size_t>(p.tokens) * row);
  std::vector<double> times;
  int n = repeats;
  for (int i = 0; i < warmup + n; ++i) {
    if (Status st = mpi_world_barrier(); !st.ok()) die(p.comm->rank(), "barrier", st);
    const double t0 = now_seconds();
    for (int t = 0; t < p.tokens; ++t) {
      for (int j = 0; j < k; ++j) {
        std::memcpy(send.data() + static_cast<size_t>(pos[static_cast<size_t>(t) * k + j]) * row,
                    p.x.data() + static_cast<size_t>(t) * row, row * sizeof(float));
      }
    }
    if (Status st = x.exchange(send.data(), recv.data(), recv.data(), back.data()); !st.ok()) {
      die(p.comm->rank(), "raw MPI exchange", st);
    }
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


CrossNode cross_node_bytes(const Problem& p) {
  const Communicator& c = *p.comm;
  const int k = p.f->num_topk, me = c.rank();
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
  const int R = p.comm->size(), k = p.f->num_topk;
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
  if (Status st = mpi_world_sum(&rows); !st.ok()) die(p.comm->rank(), "sum over ranks", st);
  if (Status st = mpi_world_sum(&assign); !st.ok()) die(p.comm->rank(), "sum over ranks", st);
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


}  // namespace moe::cli
