#include "moe/placement/replica_packing.h"

#include <cmath>
#include <numeric>
#include <queue>
#include <set>

namespace moe::placement_detail {
namespace {

// Called when every rank with a free slot already holds `e`: some full rank p lacks e
// (e has fewer placed replicas than ranks), and it holds an expert x that a rank q with
// a free slot lacks (p holds more experts than q). Moves x from p to q and puts e on p,
// choosing the (p, q, x) with the lowest resulting max(load p, load q).
void place_by_exchange(Packer& P, int e) {
  int bp = -1, bq = -1, bx = -1;
  double best = 0;
  // First only exchanges that keep x on as many nodes (P.can_leave), then any.
  for (int keep_nodes = 1; keep_nodes >= 0 && bx < 0; --keep_nodes) {
    for (int q = 0; q < P.num_ranks(); ++q) {
      if (P.full(q)) continue;
      for (int p = 0; p < P.num_ranks(); ++p) {
        if (p == q || P.holds(p, e)) continue;
        for (int x : P.items(p)) {
          if (P.holds(q, x) || (keep_nodes != 0 && !P.can_leave(p, x, P.node(q)))) continue;
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
  }
  MOE_CHECK(bx >= 0);  // impossible while replicas <= ranks and replicas <= slots
  P.remove(bp, bx);
  P.add(bq, bx);
  P.add(bp, e);
}

// The replicas in `order` (each expert's consecutive) dealt slot-major over the ranks
// taken one per node in turn: position k goes to rank ranks[k % R], so c <= R
// consecutive replicas sit on c distinct ranks spanning min(c, nodes) nodes, and no rank
// gets more than ceil(total / R) <= slots.
void pack_round_robin(Packer& P, const std::vector<int>& order) {
  std::vector<std::vector<int>> by_node(static_cast<size_t>(P.num_nodes()));
  for (int p = 0; p < P.num_ranks(); ++p) by_node[static_cast<size_t>(P.node(p))].push_back(p);
  std::vector<int> ranks;
  for (size_t i = 0; ranks.size() < static_cast<size_t>(P.num_ranks()); ++i) {
    for (const auto& v : by_node) {
      if (i < v.size()) ranks.push_back(v[i]);
    }
  }
  for (size_t k = 0; k < order.size(); ++k) P.add(ranks[k % ranks.size()], order[k]);
}

}  // namespace

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
                           int cap, int min_count) {
  std::vector<int> r(w.size(), 0);
  const int first = std::max(1, std::min(min_count, cap));
  for (int e : experts) r[static_cast<size_t>(e)] = first;
  int64_t used = static_cast<int64_t>(experts.size()) * first;
  add_replicas_by_load(w, experts, total_slots, cap, &r, &used);
  return r;
}

// Balanced packing (LPT), falling back to round-robin dealing when the node floor is
// missed (see the header).
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
    const bool prefer_new = spread || P.covered_nodes(e) < P.min_nodes();
    for (int p = 0; p < P.num_ranks(); ++p) {
      if (P.full(p) || P.holds(p, e)) continue;
      const bool covered = prefer_new && P.node_count(P.node(p), e) > 0;
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
  if (!P.nodes_spread(experts)) {
    P.clear();
    pack_round_robin(P, order);
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
      if (P.can_drop(p, a)) {  // drop
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
        const bool a_may_go = P.can_leave(p, a, P.node(q));
        if (!P.full(q)) {
          if (a_may_go) consider(std::max(lp - sa, lq + sa), kMove, q, a, -1);
          if (ca < P.cap()) consider(std::max(lp - sa + s_more, lq + s_more), kAdd, q, a, -1);
        }
        if (!a_may_go) continue;
        for (int b : P.items(q)) {
          const double sb = P.size(b);
          if (!(sb < sa) || P.holds(p, b) || !P.can_leave(q, b, P.node(p))) continue;
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
        if (!P.can_leave(p, a, B) || !P.can_leave(q, b, A)) continue;
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
              if (P.holds(to, a) || P.load(to) + P.size(a) > limit || !P.can_leave(from, a, P.node(to))) continue;
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

std::vector<int> iota_vec(int begin, int end) {
  std::vector<int> v(static_cast<size_t>(std::max(0, end - begin)));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// Replica counts: the fewest replicas (at least min_count) that keep every replica's load
// <= `max_replica_load` (as far as the cap allows), then one more replica at a time for the hottest experts up
// to min(num_nodes, cap) (each, put on a new node, saves load / num_nodes of crossing),
// then, with `fill`, the remaining slots by load per replica as in replicate(). Empty if
// the minimum already needs more than total_slots.
std::vector<int> replicate_for_coverage(const std::vector<double>& w, const std::vector<int>& experts,
                                        int64_t total_slots, int cap, int num_nodes, double max_replica_load,
                                        bool fill, int min_count) {
  std::vector<int> r(w.size(), 0);
  int64_t used = 0;
  for (int e : experts) {
    const double x = w[static_cast<size_t>(e)];
    int need = 1;
    if (max_replica_load > 0 && x > max_replica_load) {
      need = static_cast<int>(std::ceil(x / max_replica_load * (1 - 1e-12)));
    }
    r[static_cast<size_t>(e)] = std::min(std::max(need, std::max(min_count, 1)), cap);
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

}  // namespace moe::placement_detail
