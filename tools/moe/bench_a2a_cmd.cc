// moe bench a2a: the expert-parallel dispatch + combine exchange of our EP layer
// (ep_moe_forward_routed) against a plain MPI_Alltoallv of the naive layout (one row per
// (token, expert) assignment), against single-thread memcpy, flat vs hierarchical, f32
// vs bf16 on the wire, and how much communication the overlap mode hides.
//
// Run under mpirun (rank 0 prints):
//   mpirun -np 4 moe bench a2a --ranks-per-node 2
#include <omp.h>

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

#include "bench_a2a.h"
#include "commands.h"
#include "moe/comm/mpi_baseline.h"
#include "moe/comm/mpi_communicator.h"
#include "moe/core/clock.h"
#include "moe/moe/ep_moe_layer.h"

namespace moe::cli {
namespace {


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
  if (f.both_topk_spellings) return "--top-k is the old spelling of --num-topk: give only one of them";
  if (f.num_topk < 1) return ("--num-topk must be >= 1 (got " + std::to_string(f.num_topk) + ")");
  if (f.num_topk > f.experts) {
    return ("--num-topk " + std::to_string(f.num_topk) + " exceeds --experts " + std::to_string(f.experts));
  }
  if (f.num_topk > 64) {
    return ("--num-topk must be <= 64 (the hierarchical exchange's limit; got " + std::to_string(f.num_topk) + ")");
  }
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
  const int world_rank = mpi_world_rank(), world_size = mpi_world_size();
  const bool root = world_rank == 0;
  // Errors every rank hits alike are printed by rank 0 only; all ranks exit 1.
  auto fail_all = [root](const std::string& message) { return root ? fail(message) : 1; };
  if (std::string bad = validate(f); !bad.empty()) return fail_all(bad);
  const int N = world_size;
  const int rpn = f.ranks_per_node >= 0 ? f.ranks_per_node : (N >= 4 ? N / 2 : 0);
  omp_set_num_threads(f.threads);
  set_stat_min(f.stat == "min");

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
                f.num_topk, f.threads, f.threads == 1 ? "" : "s");
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
        "  overlap         EpOptions.overlap (pipelined micro-batches, --overlap-micro-batches), flat and (with\n"
        "                  several nodes) hierarchical, with experts of intermediate size 'inter', chosen so\n"
        "                  expert compute ~ the flat exchange time; wait = slowest\n"
        "                  rank's EpTimings.comm_wait_seconds; hidden = 1 - wait(on) / wait(off); ratio = the\n"
        "                  engine's comm_overlap_ratio with overlap on (1 - wait / exchange time, lowest rank);\n"
        "                  call = slowest whole call\n\n");
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
        LayerRun hoff, hon;  // the same load through the hierarchical exchange (several nodes)
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
        make_routing(routing, f.zipf_s, tokens, f.experts, f.num_topk, seed, &p.idx, &p.w);
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
        auto tiny = make_layer(hidden, 1, f.experts, f.num_topk, placement, world_rank);
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
            auto cal = make_layer(hidden, i0, f.experts, f.num_topk, placement, world_rank);
            const LayerRun c = run_layer(p, *cal, EpOptions{}, 1, 3, "overlap calibration");
            const double per = (c.compute - ex.flat.compute) / (i0 - 1);
            if (per > 0 && ex.flat.exchange > ex.flat.compute) {
              inter = 1 + static_cast<int>(std::lround((ex.flat.exchange - ex.flat.compute) / per));
            }
            inter = std::clamp(inter, 1, f.overlap_max_intermediate);
          }
          if (Status st = mpi_world_broadcast(&inter); !st.ok()) die(world_rank, "broadcast", st);
          ex.inter = inter;
          auto loaded = make_layer(hidden, inter, f.experts, f.num_topk, placement, world_rank);
          progress("overlap off");
          ex.off = run_layer(p, *loaded, EpOptions{}, f.warmup, f.repeats, "overlap off");
          progress("overlap on");
          EpOptions o;
          o.overlap = true;
          o.micro_batches = f.overlap_micro_batches;
          ex.on = run_layer(p, *loaded, o, f.warmup, f.repeats, "overlap on");
          if (hier) {
            progress("hierarchical overlap off");
            EpOptions h;
            h.hierarchical = true;
            ex.hoff = run_layer(p, *loaded, h, f.warmup, f.repeats, "hierarchical overlap off");
            progress("hierarchical overlap on");
            h.overlap = true;
            h.micro_batches = f.overlap_micro_batches;
            ex.hon = run_layer(p, *loaded, h, f.warmup, f.repeats, "hierarchical overlap on");
          }
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
      for (int mode = 0; root && !f.no_overlap && mode < (hier ? 2 : 1); ++mode) {
        std::printf("\n  overlap (%s f32; %s micro-batches)\n", mode == 0 ? "flat" : "hierarchical",
                    f.overlap_micro_batches == 0 ? "auto" : std::to_string(f.overlap_micro_batches).c_str());
        std::printf("%8s | %6s %8s | %9s %9s %7s %7s | %9s %9s %8s\n", "tokens", "inter", "ffn ms", "wait off", "wait on",
                    "hidden", "ratio", "call off", "call on", "speed-up");
        std::printf("%8s | %6s %8s | %9s %9s %7s %7s | %9s %9s %8s\n", "per rank", "", "", "ms", "ms", "", "", "ms", "ms",
                    "");
        for (const Extra& ex : extras) {
          const LayerRun& off = mode == 0 ? ex.off : ex.hoff;
          const LayerRun& on = mode == 0 ? ex.on : ex.hon;
          const double hidden_share = off.wait > 0 ? 1.0 - on.wait / off.wait : 0.0;
          std::printf("%8d | %6d %8.3f | %9.3f %9.3f %6.0f%% %6.0f%% | %9.3f %9.3f %7.2fx\n", ex.tokens, ex.inter,
                      off.compute * 1e3, off.wait * 1e3, on.wait * 1e3, 100.0 * hidden_share, 100.0 * on.ratio,
                      off.call * 1e3, on.call * 1e3, off.call / on.call);
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
    make_routing("uniform", f.zipf_s, p.tokens, f.experts, f.num_topk,
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
    auto tiny = make_layer(p.hidden, 1, f.experts, f.num_topk, placement, world_rank);
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
  auto* num_topk = app.add_option("--num-topk", f->num_topk, "Experts per token")->capture_default_str();
  // The old spelling, kept for scripts (hidden: `moe generate --top-k` is sampling top-k).
  auto* top_k = app.add_option("--top-k", f->num_topk, "Alias of --num-topk")->group("");
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
  app.add_option("--overlap-micro-batches", f->overlap_micro_batches,
                 "Micro-batches of the overlap rows: 2..8, or 0 = auto (EpOptions::micro_batches)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  app.add_option("--algo-hidden", f->algo_hidden, "Hidden size of the a2a_algo comparison (0 skips it)")
      ->capture_default_str();
  app.add_option("--algo-tokens", f->algo_tokens, "Tokens per rank of the a2a_algo comparison")->capture_default_str();
  app.add_option("--stat", f->stat, "Statistic over the repeats: median or min")->capture_default_str();
  app.add_option("--threads", f->threads, "OpenMP threads per rank (expert compute)")->capture_default_str();
  app.add_option("--seed", f->seed, "Routing and activation seed")->capture_default_str();
  app.add_option("--timeout", f->timeout, "Communicator timeout per operation (seconds)")->capture_default_str();
  return [f, num_topk, top_k] {
    f->both_topk_spellings = num_topk->count() > 0 && top_k->count() > 0;
    return run_a2a(*f);
  };
}

}  // namespace moe::cli
