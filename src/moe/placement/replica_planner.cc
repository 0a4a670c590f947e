#include "moe/placement/replica_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <numeric>
#include <queue>
#include <set>

#include <nlohmann/json.hpp>

#include "moe/core/check.h"
#include "moe/core/mapped_file.h"
#include "moe/placement/text_format.h"

namespace moe {
namespace {

using placement_detail::num;
using placement_detail::str;

// A load difference below this fraction of the loads involved is noise, not progress.
constexpr double kRelEps = 1e-12;

// One packing problem: replicas of some experts onto a set of ranks, each holding at most
// `slots` replicas and no expert twice. Experts keep their global ids (0..E-1); ranks are
// local indices 0..n-1 mapped to global ids by `rank_ids`. counts[e] is the number of
// replicas expert e has (or will have once packed); each carries w[e] / counts[e].
class Packer {
 public:
  Packer(int num_experts, int slots, std::vector<int> rank_ids, std::vector<int> rank_node, int num_nodes,
         const std::vector<double>& w, std::vector<int> counts, int cap)
      : E_(num_experts),
        S_(slots),
        cap_(cap),
        rank_ids_(std::move(rank_ids)),
        node_(std::move(rank_node)),
        num_nodes_(num_nodes),
        w_(&w),
        count_(std::move(counts)),
        size_(w.size(), 0.0),
        items_(rank_ids_.size()),
        load_(rank_ids_.size(), 0.0),
        on_(rank_ids_.size() * static_cast<size_t>(E_), 0),
        node_cnt_(static_cast<size_t>(num_nodes) * static_cast<size_t>(E_), 0) {
    for (size_t e = 0; e < size_.size(); ++e) size_[e] = count_[e] > 0 ? w[e] / count_[e] : 0.0;
  }

  int num_ranks() const { return static_cast<int>(rank_ids_.size()); }
  int cap() const { return cap_; }
  bool holds(int p, int e) const { return on_[idx(p, e)] != 0; }
  bool full(int p) const { return static_cast<int>(items_[static_cast<size_t>(p)].size()) >= S_; }
  double load(int p) const { return load_[static_cast<size_t>(p)]; }
  double size(int e) const { return size_[static_cast<size_t>(e)]; }
  double weight(int e) const { return (*w_)[static_cast<size_t>(e)]; }
  int count(int e) const { return count_[static_cast<size_t>(e)]; }
  const std::vector<int>& counts() const { return count_; }
  const std::vector<int>& items(int p) const { return items_[static_cast<size_t>(p)]; }
  int node(int p) const { return node_[static_cast<size_t>(p)]; }
  int node_count(int n, int e) const { return node_cnt_[static_cast<size_t>(n) * E_ + static_cast<size_t>(e)]; }

  // Places one of e's counts[e] replicas on p.
  void add(int p, int e) {
    MOE_CHECK(!holds(p, e) && !full(p));
    items_[static_cast<size_t>(p)].push_back(e);
    load_[static_cast<size_t>(p)] += size(e);
    on_[idx(p, e)] = 1;
    ++node_cnt_[static_cast<size_t>(node(p)) * E_ + static_cast<size_t>(e)];
  }
  void remove(int p, int e) {
    auto& v = items_[static_cast<size_t>(p)];
    auto it = std::find(v.begin(), v.end(), e);
    MOE_CHECK(it != v.end());
    v.erase(it);
    load_[static_cast<size_t>(p)] -= size(e);
    on_[idx(p, e)] = 0;
    --node_cnt_[static_cast<size_t>(node(p)) * E_ + static_cast<size_t>(e)];
  }
  // One replica fewer: e leaves p, its other replicas carry w/(count-1) each.
  void drop_replica(int p, int e) {
    MOE_CHECK(count(e) > 1);
    remove(p, e);
    set_count(e, count(e) - 1);
  }
  // One replica more, on p: every replica of e then carries w/(count+1).
  void add_replica(int p, int e) {
    MOE_CHECK(count(e) < cap_);
    set_count(e, count(e) + 1);
    add(p, e);
  }

  double max_load() const { return *std::max_element(load_.begin(), load_.end()); }
  int argmax() const { return static_cast<int>(std::max_element(load_.begin(), load_.end()) - load_.begin()); }

  // Load that crosses nodes (in units of load * nodes, i.e. not yet divided by num_nodes),
  // counted over the experts in `experts`.
  double crossing(const std::vector<int>& experts) const {
    double c = 0;
    for (int e : experts) {
      int covered = 0;
      for (int n = 0; n < num_nodes_; ++n) covered += node_count(n, e) > 0 ? 1 : 0;
      c += weight(e) * (num_nodes_ - covered);
    }
    return c;
  }

  // Writes the ranks' contents into a layer plan (slots sorted ascending) and the counts
  // of `experts`.
  void emit(const std::vector<int>& experts, LayerPlan* out) const {
    for (int p = 0; p < num_ranks(); ++p) {
      std::vector<int> v = items(p);
      std::sort(v.begin(), v.end());
      out->rank_slots[static_cast<size_t>(rank_ids_[static_cast<size_t>(p)])] = std::move(v);
    }
    for (int e : experts) out->replica_count[static_cast<size_t>(e)] = count(e);
  }

 private:
  size_t idx(int p, int e) const { return static_cast<size_t>(p) * static_cast<size_t>(E_) + static_cast<size_t>(e); }
  void set_count(int e, int c) {
    const double s = weight(e) / c;
    const double d = s - size(e);
    for (int q = 0; q < num_ranks(); ++q) {
      if (holds(q, e)) load_[static_cast<size_t>(q)] += d;
    }
    size_[static_cast<size_t>(e)] = s;
    count_[static_cast<size_t>(e)] = c;
  }

  int E_, S_, cap_;
  std::vector<int> rank_ids_, node_;
  int num_nodes_;
  const std::vector<double>* w_;
  std::vector<int> count_;
  std::vector<double> size_;
  std::vector<std::vector<int>> items_;
  std::vector<double> load_;
  std::vector<uint8_t> on_;
  std::vector<int> node_cnt_;
};

// Greedy replication: every expert in `experts` starts with one replica; while fewer than
// `total_slots` replicas exist, the expert with the largest load per replica (lowest id on
// ties) under `cap` gets one more. Experts without load get none. Returns counts indexed
// by global expert id (0 for experts outside `experts`).
// Adds replicas one at a time to the expert of `experts` with the largest load per
// replica (ties: lower id) while slots remain (*used < total_slots), its count is below
// cap and its load is positive. r: replica counts by global expert id, each >= 1.
void add_replicas_by_load(const std::vector<double>& w, const std::vector<int>& experts, int64_t total_slots, int cap,
                          std::vector<int>* r, int64_t* used) {
  struct Entry {
    double per_replica;
    int e;
    bool operator<(const Entry& o) const {  // max-heap: larger load first, then lower id
      if (per_replica != o.per_replica) return per_replica < o.per_replica;
      return e > o.e;
    }
  };
  std::priority_queue<Entry> heap;
  for (int e : experts) {
    const int c = (*r)[static_cast<size_t>(e)];
    if (c < cap) heap.push({w[static_cast<size_t>(e)] / c, e});
  }
  while (*used < total_slots && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    if (!(top.per_replica > 0)) break;
    int& c = (*r)[static_cast<size_t>(top.e)];
    ++c;
    ++*used;
    if (c < cap) heap.push({w[static_cast<size_t>(top.e)] / c, top.e});
  }
}

std::vector<int> replicate(const std::vector<double>& w, const std::vector<int>& experts, int64_t total_slots,
                           int cap) {
  std::vector<int> r(w.size(), 0);
  for (int e : experts) r[static_cast<size_t>(e)] = 1;
  int64_t used = static_cast<int64_t>(experts.size());
  add_replicas_by_load(w, experts, total_slots, cap, &r, &used);
  return r;
}

// Called when every rank with a free slot already holds `e`: some full rank p lacks e
// (e has fewer placed replicas than ranks), and it holds an expert x that a rank q with
// a free slot lacks (p holds more experts than q). Moves x from p to q and puts e on p,
// choosing the (p, q, x) with the lowest resulting max(load p, load q).
void place_by_exchange(Packer& P, int e) {
  int bp = -1, bq = -1, bx = -1;
  double best = 0;
  for (int q = 0; q < P.num_ranks(); ++q) {
    if (P.full(q)) continue;
    for (int p = 0; p < P.num_ranks(); ++p) {
      if (p == q || P.holds(p, e)) continue;
      for (int x : P.items(p)) {
        if (P.holds(q, x)) continue;
        const double v = std::max(P.load(p) - P.size(x) + P.size(e), P.load(q) + P.size(x));
        if (bx < 0 || v < best) {
          best = v;
          bp = p;
          bq = q;
          bx = x;
        }
      }
    }
  }
  MOE_CHECK(bx >= 0);  // impossible while replicas <= ranks and replicas <= slots
  P.remove(bp, bx);
  P.add(bq, bx);
  P.add(bp, e);
}

// Balanced packing (LPT): replicas by size descending (lowest id first on ties), each on
// the least-loaded rank (lowest index on ties) with a free slot that lacks the expert;
// with `spread`, ranks on nodes that hold no replica of the expert yet come first.
void pack_lpt(Packer& P, const std::vector<int>& experts, bool spread) {
  std::vector<int> order;
  for (int e : experts) {
    for (int k = 0; k < P.count(e); ++k) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (P.size(a) != P.size(b)) return P.size(a) > P.size(b);
    return a < b;
  });
  for (int e : order) {
    int best = -1;
    bool best_covered = true;
    for (int p = 0; p < P.num_ranks(); ++p) {
      if (P.full(p) || P.holds(p, e)) continue;
      const bool covered = spread && P.node_count(P.node(p), e) > 0;
      if (best < 0 || (covered != best_covered ? !covered : P.load(p) < P.load(best))) {
        best = p;
        best_covered = covered;
      }
    }
    if (best >= 0) {
      P.add(best, e);
    } else {
      place_by_exchange(P, e);
    }
  }
}

// Local search on the maximum. While one of these changes lowers max(load of the ranks
// it touches) below the load of the most-loaded rank p, the best one is applied:
//  - move a replica from p to a rank with a free slot;
//  - swap a replica on p with a smaller one on another rank;
//  - drop a replica on p of an expert that has others (they take over its share);
//  - add a replica of an expert on p in a free slot elsewhere (all its replicas shrink).
// Dropping frees slots where replicas were only filling them; adding uses free slots.
void improve_max(Packer& P) {
  const int R = P.num_ranks();
  size_t total_items = 0;
  for (int p = 0; p < R; ++p) total_items += P.items(p).size();
  const size_t limit = 64 * total_items + 1024;
  enum Op { kMove, kSwap, kDrop, kAdd };
  for (size_t iter = 0; iter < limit; ++iter) {
    const int p = P.argmax();
    const double lp = P.load(p);
    if (!(lp > 0)) return;
    double best = lp - kRelEps * lp;
    int bq = -1, ba = -1, bb = -1;
    Op bop = kMove;
    auto consider = [&](double v, Op op, int q, int a, int b) {
      if (v < best) {
        best = v;
        bop = op;
        bq = q;
        ba = a;
        bb = b;
      }
    };
    for (int a : P.items(p)) {
      const double sa = P.size(a);
      if (!(sa > 0)) continue;
      const int ca = P.count(a);
      if (ca > 1) {  // drop
        const double grow = P.weight(a) / (ca - 1) - sa;
        double v = lp - sa;
        for (int q = 0; q < R && v < best; ++q) {
          if (q != p && P.holds(q, a)) v = std::max(v, P.load(q) + grow);
        }
        consider(v, kDrop, -1, a, -1);
      }
      const double s_more = ca < P.cap() ? P.weight(a) / (ca + 1) : 0.0;
      for (int q = 0; q < R; ++q) {
        if (q == p || P.holds(q, a)) continue;
        const double lq = P.load(q);
        if (lq >= best) continue;  // any change would leave q at or above the target
        if (!P.full(q)) {
          consider(std::max(lp - sa, lq + sa), kMove, q, a, -1);
          if (ca < P.cap()) consider(std::max(lp - sa + s_more, lq + s_more), kAdd, q, a, -1);
        }
        for (int b : P.items(q)) {
          const double sb = P.size(b);
          if (!(sb < sa) || P.holds(p, b)) continue;
          consider(std::max(lp - sa + sb, lq + sa - sb), kSwap, q, a, b);
        }
      }
    }
    if (ba < 0) return;
    switch (bop) {
      case kMove:
        P.remove(p, ba);
        P.add(bq, ba);
        break;
      case kSwap:
        P.remove(p, ba);
        P.remove(bq, bb);
        P.add(p, bb);
        P.add(bq, ba);
        break;
      case kDrop:
        P.drop_replica(p, ba);
        break;
      case kAdd:
        P.add_replica(bq, ba);
        break;
    }
  }
}

// Cross-node pass, keeping every rank at or below `max_load`: free slots get replicas of
// the hottest experts their node lacks; then moves and swaps of replicas between ranks on
// different nodes that lower the crossing load.
void improve_cross(Packer& P, const std::vector<int>& experts, double max_load, int num_nodes) {
  if (num_nodes <= 1) return;
  const int R = P.num_ranks();
  double total = 0;
  for (int e : experts) total += P.weight(e);
  if (!(total > 0)) return;
  const double limit = max_load + kRelEps * max_load;
  const double tol = kRelEps * total;
  // Change in uncovered-node load when one replica of e moves from node A to node B.
  auto delta = [&](int e, int A, int B) {
    int d = 0;
    if (P.node_count(A, e) == 1) ++d;
    if (P.node_count(B, e) == 0) --d;
    return d * P.weight(e);
  };
  size_t total_items = 0;
  for (int p = 0; p < R; ++p) total_items += P.items(p).size();
  size_t changes = 0;
  const size_t max_changes = 16 * total_items + 1024;
  std::vector<double> da, db;  // per replica on p / q: crossing change of moving it alone
  auto try_swap = [&](int p, int q) {
    const int A = P.node(p), B = P.node(q);
    da.clear();
    db.clear();
    bool any_gain = false;
    for (int a : P.items(p)) {
      da.push_back(P.holds(q, a) ? 1.0 : delta(a, A, B));
      any_gain = any_gain || da.back() < 0;
    }
    for (int b : P.items(q)) {
      db.push_back(P.holds(p, b) ? 1.0 : delta(b, B, A));
      any_gain = any_gain || db.back() < 0;
    }
    if (!any_gain) return false;
    for (size_t i = 0; i < da.size(); ++i) {
      const int a = P.items(p)[i];
      if (P.holds(q, a)) continue;
      for (size_t j = 0; j < db.size(); ++j) {
        const int b = P.items(q)[j];
        if (P.holds(p, b) || !(da[i] + db[j] < -tol)) continue;
        const double d = P.size(a) - P.size(b);
        if (P.load(p) - d > limit || P.load(q) + d > limit) continue;
        P.remove(p, a);
        P.remove(q, b);
        P.add(p, b);
        P.add(q, a);
        return true;
      }
    }
    return false;
  };
  for (int pass = 0; pass < 64; ++pass) {
    bool improved = false;
    for (int q = 0; q < R; ++q) {
      while (!P.full(q)) {
        int best = -1;
        for (int e : experts) {
          if (P.node_count(P.node(q), e) > 0 || P.count(e) >= P.cap() || !(P.weight(e) > 0)) continue;
          if (P.load(q) + P.weight(e) / (P.count(e) + 1) > limit) continue;
          if (best < 0 || P.weight(e) > P.weight(best)) best = e;
        }
        if (best < 0) break;
        P.add_replica(q, best);
        improved = true;
      }
    }
    for (int p = 0; p < R; ++p) {
      for (int q = p + 1; q < R; ++q) {
        const int A = P.node(p), B = P.node(q);
        if (A == B) continue;
        bool changed = true;
        while (changed && changes < max_changes) {
          changed = false;
          // Moves p -> q and q -> p.
          for (int dir = 0; dir < 2 && !changed; ++dir) {
            const int from = dir == 0 ? p : q, to = dir == 0 ? q : p;
            if (P.full(to)) continue;
            for (int a : P.items(from)) {
              if (P.holds(to, a) || P.load(to) + P.size(a) > limit) continue;
              if (delta(a, P.node(from), P.node(to)) < -tol) {
                P.remove(from, a);
                P.add(to, a);
                changed = true;
                break;
              }
            }
          }
          // Swaps: only worth a look when some replica's move alone would gain.
          if (!changed) changed = try_swap(p, q);
          if (changed) {
            improved = true;
            ++changes;
          }
        }
      }
    }
    if (!improved) return;
  }
}

struct LayerShape {
  int E, R, N, S, cap, G;
  PlannerAlgorithm algorithm;
  double tolerance;  // max_load_tolerance
};

std::vector<int> iota_vec(int begin, int end) {
  std::vector<int> v(static_cast<size_t>(std::max(0, end - begin)));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// Replica counts: the fewest replicas that keep every replica's load <= `max_replica_load`
// (as far as the cap allows), then one more replica at a time for the hottest experts up
// to min(num_nodes, cap) (each, put on a new node, saves load / num_nodes of crossing),
// then, with `fill`, the remaining slots by load per replica as in replicate(). Empty if
// the minimum already needs more than total_slots.
std::vector<int> replicate_for_coverage(const std::vector<double>& w, const std::vector<int>& experts,
                                        int64_t total_slots, int cap, int num_nodes, double max_replica_load,
                                        bool fill) {
  std::vector<int> r(w.size(), 0);
  int64_t used = 0;
  for (int e : experts) {
    const double x = w[static_cast<size_t>(e)];
    int need = 1;
    if (max_replica_load > 0 && x > max_replica_load) {
      need = static_cast<int>(std::ceil(x / max_replica_load * (1 - 1e-12)));
    }
    r[static_cast<size_t>(e)] = std::min(std::max(need, 1), cap);
    used += r[static_cast<size_t>(e)];
  }
  if (used > total_slots) return {};
  std::vector<int> order = experts;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return w[static_cast<size_t>(a)] > w[static_cast<size_t>(b)]; });
  const int spread_cap = std::min(num_nodes, cap);
  for (int e : order) {
    if (!(w[static_cast<size_t>(e)] > 0)) break;
    while (r[static_cast<size_t>(e)] < spread_cap && used < total_slots) {
      ++r[static_cast<size_t>(e)];
      ++used;
    }
  }
  if (!fill) return r;
  // The rest: largest load per replica first, as replicate() does.
  add_replicas_by_load(w, experts, total_slots, cap, &r, &used);
  return r;
}

// Without expert groups: the whole layer is one packing problem.
void plan_flat(const std::vector<double>& w, const LayerShape& L, LayerPlan* out) {
  const int S = std::min(L.S, L.E);
  const int cap = std::min(L.cap, L.R);
  const int64_t total_slots = static_cast<int64_t>(L.R) * S;
  const std::vector<int> experts = iota_vec(0, L.E);
  const std::vector<int> r = replicate(w, experts, total_slots, cap);
  std::vector<int> nodes(static_cast<size_t>(L.R));
  for (int p = 0; p < L.R; ++p) nodes[static_cast<size_t>(p)] = p / (L.R / L.N);
  auto make = [&](const std::vector<int>& counts) { return Packer(L.E, S, iota_vec(0, L.R), nodes, L.N, w, counts, cap); };

  if (L.algorithm == PlannerAlgorithm::kEplb) {
    Packer P = make(r);
    pack_lpt(P, experts, /*spread=*/false);
    P.emit(experts, out);
    return;
  }
  // Candidates, each packed (LPT, with and without preferring new nodes when there are
  // several) and improved for the max (improve_max):
  //  - the greedy replica counts, every slot used (the baseline's start);
  //  - the fewest replicas that keep every replica at or below the mean rank load,
  //    leaving slots free (a rank with a big replica need not be filled with more);
  //  - with several nodes, coverage-oriented counts (replicate_for_coverage).
  // M = the lowest max among them. The candidates within max_load_tolerance of M then get
  // the cross-node pass under the limit M * (1 + tolerance), and the lowest crossing wins
  // (then the lower max, then the earlier candidate).
  struct Candidate {
    Packer packer;
    double max_load;
  };
  std::vector<Candidate> cands;
  std::vector<std::vector<int>> tried;
  auto add = [&](const std::vector<int>& counts) {
    if (counts.empty() || std::find(tried.begin(), tried.end(), counts) != tried.end()) return;
    tried.push_back(counts);
    for (int spread = 1; spread >= (L.N > 1 ? 0 : 1); --spread) {
      Packer P = make(counts);
      pack_lpt(P, experts, spread != 0);
      improve_max(P);
      const double m = P.max_load();
      cands.push_back({std::move(P), m});
    }
  };
  auto lowest_max = [&] {
    double m = cands[0].max_load;
    for (const Candidate& c : cands) m = std::min(m, c.max_load);
    return m;
  };
  double total = 0;
  for (double x : w) total += x;
  add(r);
  add(replicate_for_coverage(w, experts, total_slots, cap, /*num_nodes=*/1, total / L.R, /*fill=*/false));
  if (L.N > 1) {
    add(replicate_for_coverage(w, experts, total_slots, cap, L.N, lowest_max() * (1 + L.tolerance), /*fill=*/true));
  }
  const double M = lowest_max();
  const double limit = M * (1 + L.tolerance);
  int best = -1;
  double best_cross = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    Candidate& c = cands[i];
    if (c.max_load > limit) continue;
    improve_cross(c.packer, experts, limit, L.N);
    c.max_load = c.packer.max_load();
    const double x = c.packer.crossing(experts);
    const double tol = kRelEps * std::max(x, best_cross);
    if (best < 0 || x < best_cross - tol ||
        (x <= best_cross + tol && c.max_load < cands[static_cast<size_t>(best)].max_load)) {
      best = static_cast<int>(i);
      best_cross = x;
    }
  }
  cands[static_cast<size_t>(best)].packer.emit(experts, out);
}

// With expert groups: groups packed onto nodes (equal counts), then each node planned
// on its own with its ranks and its groups' experts.
void plan_grouped(const std::vector<double>& w, const LayerShape& L, LayerPlan* out) {
  const int G = L.G, N = L.N, rpn = L.R / L.N, per_group = L.E / G, groups_per_node = G / N;
  std::vector<double> gload(static_cast<size_t>(G), 0.0);
  for (int e = 0; e < L.E; ++e) gload[static_cast<size_t>(e / per_group)] += w[static_cast<size_t>(e)];
  std::vector<int> gorder = iota_vec(0, G);
  std::stable_sort(gorder.begin(), gorder.end(),
                   [&](int a, int b) { return gload[static_cast<size_t>(a)] > gload[static_cast<size_t>(b)]; });
  std::vector<std::vector<int>> node_groups(static_cast<size_t>(N));
  std::vector<double> nload(static_cast<size_t>(N), 0.0);
  for (int g : gorder) {
    int best = -1;
    for (int n = 0; n < N; ++n) {
      if (static_cast<int>(node_groups[static_cast<size_t>(n)].size()) >= groups_per_node) continue;
      if (best < 0 || nload[static_cast<size_t>(n)] < nload[static_cast<size_t>(best)]) best = n;
    }
    node_groups[static_cast<size_t>(best)].push_back(g);
    nload[static_cast<size_t>(best)] += gload[static_cast<size_t>(g)];
  }
  if (L.algorithm == PlannerAlgorithm::kBalanced) {
    // Swap groups between the heaviest node and another while that lowers the heaviest.
    for (int iter = 0; iter < 64 * G + 64; ++iter) {
      const int hn = static_cast<int>(std::max_element(nload.begin(), nload.end()) - nload.begin());
      const double lh = nload[static_cast<size_t>(hn)];
      double best = lh - kRelEps * lh;
      int bn = -1;
      size_t bi = 0, bj = 0;
      for (int n = 0; n < N; ++n) {
        if (n == hn) continue;
        for (size_t i = 0; i < node_groups[static_cast<size_t>(hn)].size(); ++i) {
          for (size_t j = 0; j < node_groups[static_cast<size_t>(n)].size(); ++j) {
            const double d = gload[static_cast<size_t>(node_groups[static_cast<size_t>(hn)][i])] -
                             gload[static_cast<size_t>(node_groups[static_cast<size_t>(n)][j])];
            if (!(d > 0)) continue;
            const double v = std::max(lh - d, nload[static_cast<size_t>(n)] + d);
            if (v < best) {
              best = v;
              bn = n;
              bi = i;
              bj = j;
            }
          }
        }
      }
      if (bn < 0) break;
      auto& gh = node_groups[static_cast<size_t>(hn)];
      auto& gn = node_groups[static_cast<size_t>(bn)];
      const double d = gload[static_cast<size_t>(gh[bi])] - gload[static_cast<size_t>(gn[bj])];
      std::swap(gh[bi], gn[bj]);
      nload[static_cast<size_t>(hn)] -= d;
      nload[static_cast<size_t>(bn)] += d;
    }
  }
  const int S = std::min(L.S, L.E);
  const int cap = std::min(L.cap, rpn);
  for (int n = 0; n < N; ++n) {
    std::vector<int> experts;
    for (int g : node_groups[static_cast<size_t>(n)]) {
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) experts.push_back(e);
    }
    std::sort(experts.begin(), experts.end());
    const std::vector<int> r = replicate(w, experts, static_cast<int64_t>(rpn) * S, cap);
    Packer P(L.E, S, iota_vec(n * rpn, (n + 1) * rpn), std::vector<int>(static_cast<size_t>(rpn), 0), 1, w, r, cap);
    pack_lpt(P, experts, /*spread=*/false);
    if (L.algorithm == PlannerAlgorithm::kBalanced) improve_max(P);
    P.emit(experts, out);
  }
}

}  // namespace

Status validate_planner_input(const PlannerInput& in) {
  if (in.num_ranks < 1) return invalid_argument("num_ranks must be >= 1 (got " + str(in.num_ranks) + ")");
  if (in.num_nodes < 1) return invalid_argument("num_nodes must be >= 1 (got " + str(in.num_nodes) + ")");
  if (in.num_ranks % in.num_nodes != 0) {
    return invalid_argument("num_ranks " + str(in.num_ranks) + " is not divisible by num_nodes " + str(in.num_nodes) +
                            " (every node needs the same number of ranks)");
  }
  if (in.slots_per_rank < 1) return invalid_argument("slots_per_rank must be >= 1 (got " + str(in.slots_per_rank) + ")");
  if (in.replica_cap < 1) {
    return invalid_argument("replica_cap must be >= 1 (got " + str(in.replica_cap) +
                            "): every expert keeps at least one replica");
  }
  if (in.load.empty()) return invalid_argument("load has no layers");
  const size_t E = in.load[0].size();
  if (E == 0) return invalid_argument("load[0] has no experts");
  for (size_t l = 0; l < in.load.size(); ++l) {
    if (in.load[l].size() != E) {
      return invalid_argument("load[" + std::to_string(l) + "] has " + std::to_string(in.load[l].size()) +
                              " experts, expected " + std::to_string(E) + " (as load[0])");
    }
    for (size_t e = 0; e < E; ++e) {
      const double v = in.load[l][e];
      if (!std::isfinite(v) || v < 0) {
        return invalid_argument("load[" + std::to_string(l) + "][" + std::to_string(e) + "] is " + num(v) +
                                ": loads must be finite and >= 0");
      }
    }
  }
  if (!in.layer_ids.empty()) {
    if (in.layer_ids.size() != in.load.size()) {
      return invalid_argument("layer_ids has " + std::to_string(in.layer_ids.size()) + " entries but load has " +
                              std::to_string(in.load.size()) + " layers");
    }
    std::set<int> seen;
    for (int id : in.layer_ids) {
      if (id < 0) return invalid_argument("layer_ids: layer id " + str(id) + " is negative");
      if (!seen.insert(id).second) return invalid_argument("layer_ids: layer " + str(id) + " appears twice");
    }
  }
  const int64_t slots = static_cast<int64_t>(in.num_ranks) * in.slots_per_rank;
  if (slots < static_cast<int64_t>(E)) {
    const int64_t need = (static_cast<int64_t>(E) + in.num_ranks - 1) / in.num_ranks;
    return invalid_argument("num_ranks " + str(in.num_ranks) + " x slots_per_rank " + str(in.slots_per_rank) + " = " +
                            std::to_string(slots) + " slots cannot hold each of the " + std::to_string(E) +
                            " experts once (need slots_per_rank >= " + std::to_string(need) + ")");
  }
  if (!std::isfinite(in.max_load_tolerance) || in.max_load_tolerance < 0 || in.max_load_tolerance > 1) {
    return invalid_argument("max_load_tolerance must be in [0, 1] (got " + num(in.max_load_tolerance) + ")");
  }
  if (in.num_groups < 0) return invalid_argument("num_groups must be >= 0 (got " + str(in.num_groups) + ")");
  if (in.num_groups > 0) {
    if (E % static_cast<size_t>(in.num_groups) != 0) {
      return invalid_argument("num_groups " + str(in.num_groups) + " does not divide the " + std::to_string(E) +
                              " experts into equal groups");
    }
    if (in.num_groups % in.num_nodes != 0) {
      return invalid_argument("num_groups " + str(in.num_groups) + " is not a multiple of num_nodes " +
                              str(in.num_nodes) + " (each node gets whole groups, the same number each)");
    }
  }
  return ok_status();
}

StatusOr<PlacementPlan> plan_placement(const PlannerInput& in) {
  MOE_RETURN_IF_ERROR(validate_planner_input(in));
  PlacementPlan plan;
  plan.num_experts = static_cast<int>(in.load[0].size());
  plan.num_ranks = in.num_ranks;
  plan.slots_per_rank = in.slots_per_rank;
  const LayerShape shape{plan.num_experts, in.num_ranks,   in.num_nodes, in.slots_per_rank,
                         in.replica_cap,   in.num_groups, in.algorithm,  in.max_load_tolerance};
  for (size_t l = 0; l < in.load.size(); ++l) {
    LayerPlan L;
    L.layer = in.layer_ids.empty() ? static_cast<int>(l) : in.layer_ids[l];
    L.rank_slots.assign(static_cast<size_t>(in.num_ranks), {});
    L.replica_count.assign(static_cast<size_t>(plan.num_experts), 0);
    if (in.num_groups > 0) {
      plan_grouped(in.load[l], shape, &L);
    } else {
      plan_flat(in.load[l], shape, &L);
    }
    plan.layers.push_back(std::move(L));
  }
  Status st = validate_plan(plan);
  if (!st.ok()) return internal_error("placement planner produced an invalid plan (a bug): " + st.message());
  return plan;
}

PlacementPlan contiguous_plan(int num_experts, int num_ranks, const std::vector<int>& layer_ids) {
  PlacementPlan plan;
  plan.num_experts = num_experts;
  plan.num_ranks = num_ranks;
  plan.slots_per_rank = std::max(1, (num_experts + num_ranks - 1) / std::max(num_ranks, 1));
  const std::vector<int> ids = layer_ids.empty() ? std::vector<int>{0} : layer_ids;
  for (int id : ids) {
    LayerPlan L;
    L.layer = id;
    L.rank_slots.resize(static_cast<size_t>(num_ranks));
    for (int r = 0; r < num_ranks; ++r) {
      const int begin = static_cast<int>(static_cast<int64_t>(r) * num_experts / num_ranks);
      const int end = static_cast<int>(static_cast<int64_t>(r + 1) * num_experts / num_ranks);
      L.rank_slots[static_cast<size_t>(r)] = iota_vec(begin, end);
    }
    L.replica_count.assign(static_cast<size_t>(num_experts), 1);
    plan.layers.push_back(std::move(L));
  }
  return plan;
}

std::vector<double> rank_loads(const LayerPlan& layer, const std::vector<double>& load, int num_ranks) {
  std::vector<double> out(static_cast<size_t>(num_ranks), 0.0);
  for (size_t r = 0; r < layer.rank_slots.size() && r < out.size(); ++r) {
    for (int e : layer.rank_slots[r]) {
      out[r] += load[static_cast<size_t>(e)] / layer.replica_count[static_cast<size_t>(e)];
    }
  }
  return out;
}

LayerMetrics evaluate_layer(const LayerPlan& layer, const std::vector<double>& load, int num_ranks, int num_nodes) {
  MOE_CHECK(num_ranks >= 1 && num_nodes >= 1 && num_ranks % num_nodes == 0);
  MOE_CHECK(layer.replica_count.size() == load.size() && layer.rank_slots.size() == static_cast<size_t>(num_ranks));
  LayerMetrics m;
  for (double x : load) m.total_load += x;
  const std::vector<double> ranks = rank_loads(layer, load, num_ranks);
  m.max_load = *std::max_element(ranks.begin(), ranks.end());
  m.mean_load = m.total_load / num_ranks;
  m.max_over_mean = m.total_load > 0 ? m.max_load / m.mean_load : 1.0;
  if (num_nodes > 1 && m.total_load > 0) {
    const int rpn = num_ranks / num_nodes;
    const size_t E = load.size();
    std::vector<uint8_t> covered(static_cast<size_t>(num_nodes) * E, 0);
    for (int r = 0; r < num_ranks; ++r) {
      for (int e : layer.rank_slots[static_cast<size_t>(r)]) {
        covered[static_cast<size_t>(r / rpn) * E + static_cast<size_t>(e)] = 1;
      }
    }
    double crossing = 0;
    for (size_t e = 0; e < E; ++e) {
      int uncovered = 0;
      for (int n = 0; n < num_nodes; ++n) uncovered += covered[static_cast<size_t>(n) * E + e] ? 0 : 1;
      crossing += load[e] * uncovered;
    }
    m.cross_node_share = crossing / num_nodes / m.total_load;
  }
  return m;
}

double max_load_lower_bound(const std::vector<double>& load, int num_ranks, int slots_per_rank, int replica_cap) {
  if (load.empty() || num_ranks < 1) return 0;
  const int E = static_cast<int>(load.size());
  double total = 0;
  for (double x : load) total += x;
  const std::vector<int> r =
      replicate(load, iota_vec(0, E), static_cast<int64_t>(num_ranks) * std::min(std::max(slots_per_rank, 1), E),
                std::max(1, std::min(replica_cap, num_ranks)));
  double per_replica = 0;
  for (int e = 0; e < E; ++e) per_replica = std::max(per_replica, load[static_cast<size_t>(e)] / r[static_cast<size_t>(e)]);
  double bound = std::max(total / num_ranks, per_replica);
  const int S = std::min(std::max(slots_per_rank, 1), E);
  if (static_cast<int64_t>(num_ranks) * S == E && S > 1) {
    // No spare slot: every rank holds exactly S experts, one copy each, so the hottest
    // expert shares its rank with at least the S - 1 coldest others.
    std::vector<double> sorted = load;
    std::sort(sorted.begin(), sorted.end());
    double with_coldest = sorted.back();
    for (int i = 0; i < S - 1; ++i) with_coldest += sorted[static_cast<size_t>(i)];
    bound = std::max(bound, with_coldest);
  }
  return bound;
}

StatusOr<PlanMetrics> evaluate_plan(const PlacementPlan& plan, const std::vector<std::vector<double>>& load,
                                    int num_nodes) {
  if (num_nodes < 1 || plan.num_ranks % num_nodes != 0) {
    return invalid_argument("num_ranks " + str(plan.num_ranks) + " is not divisible by num_nodes " + str(num_nodes));
  }
  if (plan.layers.size() != load.size()) {
    return invalid_argument("the plan has " + std::to_string(plan.layers.size()) + " layers but the load has " +
                            std::to_string(load.size()));
  }
  MOE_RETURN_IF_ERROR(validate_plan(plan));
  PlanMetrics pm;
  double sum_max = 0, sum_mean = 0, crossing = 0, total = 0;
  for (size_t l = 0; l < load.size(); ++l) {
    if (load[l].size() != static_cast<size_t>(plan.num_experts)) {
      return invalid_argument("load layer " + std::to_string(l) + " has " + std::to_string(load[l].size()) +
                              " experts but the plan has num_experts " + str(plan.num_experts));
    }
    LayerMetrics m = evaluate_layer(plan.layers[l], load[l], plan.num_ranks, num_nodes);
    sum_max += m.max_load;
    sum_mean += m.mean_load;
    crossing += m.cross_node_share * m.total_load;
    total += m.total_load;
    pm.worst_layer_max_over_mean = std::max(pm.worst_layer_max_over_mean, m.max_over_mean);
    pm.layers.push_back(m);
  }
  pm.max_over_mean = sum_mean > 0 ? sum_max / sum_mean : 1.0;
  pm.cross_node_share = total > 0 ? crossing / total : 0.0;
  return pm;
}

}  // namespace moe
