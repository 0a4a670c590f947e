// The packing machinery of the replica planner (replica_planner.h): replica counts from
// per-expert load (a max-heap on load per replica), the Packer that holds replicas on
// ranks, LPT packing, and the local searches on the max rank load and on cross-node
// traffic. Internal to src/moe/placement (namespace placement_detail).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "moe/core/check.h"
#include "moe/placement/placement_plan.h"

namespace moe::placement_detail {

// A load difference below this fraction of the loads involved is noise, not progress.
constexpr double kRelEps = 1e-12;

// One packing problem: replicas of some experts onto a set of ranks, each holding at most
// `slots` replicas and no expert twice. Experts keep their global ids (0..E-1); ranks are
// local indices 0..n-1 mapped to global ids by `rank_ids`. counts[e] is the number of
// replicas expert e has (or will have once packed); each carries w[e] / counts[e].
// Floors kept by every change after packing: an expert keeps >= min_count replicas
// (drop_replica refuses below it) and, once packed, replicas on >= min_nodes nodes
// (can_leave tells whether removing one keeps that).
class Packer {
 public:
  Packer(int num_experts, int slots, std::vector<int> rank_ids, std::vector<int> rank_node, int num_nodes,
         const std::vector<double>& w, std::vector<int> counts, int cap, int min_count = 1, int min_nodes = 1)
      : E_(num_experts),
        S_(slots),
        cap_(cap),
        min_count_(min_count),
        min_nodes_(min_nodes),
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
  int num_nodes() const { return num_nodes_; }
  int cap() const { return cap_; }
  int min_count() const { return min_count_; }
  int min_nodes() const { return min_nodes_; }
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
  // Nodes holding at least one replica of e.
  int covered_nodes(int e) const {
    int c = 0;
    for (int n = 0; n < num_nodes_; ++n) c += node_count(n, e) > 0 ? 1 : 0;
    return c;
  }
  // Whether e's replica on p may leave p (for a rank on `dest_node`, or -1: dropped)
  // without e's node count dropping, or dropping to no fewer than min_nodes nodes.
  bool can_leave(int p, int e, int dest_node) const {
    const int from = node(p);
    if (node_count(from, e) > 1 || dest_node == from) return true;
    if (dest_node >= 0 && node_count(dest_node, e) == 0) return true;  // one node for another
    return covered_nodes(e) - 1 >= min_nodes_;
  }
  // Whether a replica of e on p may be dropped (count and node floors kept).
  bool can_drop(int p, int e) const { return count(e) > min_count_ && can_leave(p, e, -1); }
  // Every expert of `experts` with replicas on >= min(min_nodes, its count) nodes.
  bool nodes_spread(const std::vector<int>& experts) const {
    for (int e : experts) {
      if (covered_nodes(e) < std::min(min_nodes_, count(e))) return false;
    }
    return true;
  }
  // Empties every rank (counts kept).
  void clear() {
    for (auto& v : items_) v.clear();
    std::fill(load_.begin(), load_.end(), 0.0);
    std::fill(on_.begin(), on_.end(), 0);
    std::fill(node_cnt_.begin(), node_cnt_.end(), 0);
  }

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
    MOE_CHECK(count(e) > min_count_);
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

  int E_, S_, cap_, min_count_, min_nodes_;
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

// Adds replicas one at a time to the expert of `experts` with the largest load per
// replica (ties: lower id) while slots remain (*used < total_slots), its count is below
// cap and its load is positive. r: replica counts by global expert id, each >= 1.
void add_replicas_by_load(const std::vector<double>& w, const std::vector<int>& experts, int64_t total_slots, int cap,
                          std::vector<int>* r, int64_t* used);
// Greedy replication: every expert in `experts` starts with min_count replicas (<= cap);
// while fewer than
// `total_slots` replicas exist, the expert with the largest load per replica (lowest id on
// ties) under `cap` gets one more. Experts without load get none. Returns counts indexed
// by global expert id (0 for experts outside `experts`).
std::vector<int> replicate(const std::vector<double>& w, const std::vector<int>& experts, int64_t total_slots,
                           int cap, int min_count = 1);
// Replica counts: the fewest replicas (at least min_count) that keep every replica's load
// <= `max_replica_load` (as far as the cap allows), then one more replica at a time for the hottest experts up
// to min(num_nodes, cap) (each, put on a new node, saves load / num_nodes of crossing),
// then, with `fill`, the remaining slots by load per replica as in replicate(). Empty if
// the minimum already needs more than total_slots.
std::vector<int> replicate_for_coverage(const std::vector<double>& w, const std::vector<int>& experts,
                                        int64_t total_slots, int cap, int num_nodes, double max_replica_load,
                                        bool fill, int min_count = 1);
// Balanced packing (LPT): replicas by size descending (lowest id first on ties), each on
// the least-loaded rank (lowest index on ties) with a free slot that lacks the expert;
// ranks on nodes that hold no replica of the expert yet come first with `spread`, and
// always while the expert is on fewer than min_nodes nodes. If some expert still ends on
// fewer than min(min_nodes, count) nodes, the ranks are emptied and the replicas dealt
// round-robin instead (slot-major over ranks interleaved by node: an expert's c <= ranks
// consecutive replicas land on c distinct ranks spanning min(c, nodes) nodes).
void pack_lpt(Packer& P, const std::vector<int>& experts, bool spread);
// Local search on the maximum rank load (moves, swaps, drops and adds of replicas while
// they lower the max), never below the Packer's min_count / min_nodes floors.
void improve_max(Packer& P);
// Cross-node pass, keeping every rank at or below `max_load` (and the floors).
void improve_cross(Packer& P, const std::vector<int>& experts, double max_load, int num_nodes);
// [begin, end) as a vector.
std::vector<int> iota_vec(int begin, int end);

}  // namespace moe::placement_detail
