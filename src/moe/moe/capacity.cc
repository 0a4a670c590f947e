#include "moe/moe/capacity.h"

#include <algorithm>
#include <cmath>

#include "moe/moe/dispatch_layout.h"

namespace moe {

StatusOr<OverflowPolicy> parse_overflow_policy(const std::string& name) {
  if (name == "dropless") return OverflowPolicy::kDropless;
  if (name == "drop") return OverflowPolicy::kDrop;
  if (name == "reroute") return OverflowPolicy::kReroute;
  if (name == "adaptive_requeue") return OverflowPolicy::kAdaptiveRequeue;
  return invalid_argument("unknown overflow policy '" + name +
                          "' (expected dropless, drop, reroute or adaptive_requeue)");
}

const char* overflow_policy_name(OverflowPolicy policy) {
  switch (policy) {
    case OverflowPolicy::kDropless:
      return "dropless";
    case OverflowPolicy::kDrop:
      return "drop";
    case OverflowPolicy::kReroute:
      return "reroute";
    case OverflowPolicy::kAdaptiveRequeue:
      return "adaptive_requeue";
  }
  return "?";
}

Status validate_capacity_options(const CapacityOptions& options) {
  if (options.policy == OverflowPolicy::kDropless) return ok_status();
  if (!std::isfinite(options.capacity_factor) || options.capacity_factor <= 0) {
    return invalid_argument("capacity factor must be a positive number (got " +
                            std::to_string(options.capacity_factor) + ")");
  }
  return ok_status();
}

int64_t expert_capacity(int64_t global_tokens, int top_k, int num_experts, double factor) {
  const double c = std::ceil(static_cast<double>(global_tokens) * top_k * factor / num_experts);
  // An expert holds at most one assignment per token: clamping there also keeps huge
  // factors from overflowing the conversion.
  if (!(c > 0)) return 0;
  return c >= static_cast<double>(global_tokens) ? global_tokens : static_cast<int64_t>(c);
}

namespace {

// kAdaptiveRequeue's second round (capacity.h). overflow: this rank's round-1 overflow
// (flat slots t * top_k + j, in order); room: per expert, round-1 capacity left.
Status requeue(Communicator* comm, int* topk_idx, float* topk_weights, const std::vector<int64_t>& overflow,
               const std::vector<int64_t>& room, StepRoutingCounts* counts) {
  const int R = comm ? comm->size() : 1, me = comm ? comm->rank() : 0;
  int64_t budget = 0;
  for (int64_t r : room) budget += r;
  const int64_t cap = counts->capacity;
  std::vector<int> mine;  // the overflowing experts, in order
  mine.reserve(overflow.size());
  for (int64_t i : overflow) mine.push_back(topk_idx[i]);
  std::vector<int> entries;
  std::vector<int64_t> sizes;
  MOE_RETURN_IF_ERROR(allgather_ints(comm, mine, &entries, &sizes));
  std::vector<int64_t> round2(room.size(), 0);
  size_t pos = 0;
  for (int r = 0; r < R; ++r) {
    for (int64_t n = 0; n < sizes[static_cast<size_t>(r)]; ++n, ++pos) {
      const size_t e = static_cast<size_t>(entries[pos]);
      const bool admit = budget > 0 && round2[e] < cap;
      if (admit) {
        --budget;
        ++round2[e];
        ++counts->tokens_per_expert[e];
        ++counts->requeued;
      } else {
        ++counts->dropped;
      }
      if (r == me && !admit) {
        const int64_t i = overflow[static_cast<size_t>(n)];
        topk_idx[i] = kDroppedExpert;
        topk_weights[i] = 0.0f;
      }
    }
  }
  return ok_status();
}

}  // namespace

Status apply_capacity(const CapacityOptions& options, Communicator* comm, int num_experts, const TopkRouting& routing,
                      StepRoutingCounts* counts) {
  const int64_t num_tokens = routing.num_tokens;
  const int top_k = routing.num_topk;
  int* topk_idx = routing.topk_idx;
  float* topk_weights = routing.topk_weights;
  const int* ranked = routing.ranked;
  const int R = comm ? comm->size() : 1, me = comm ? comm->rank() : 0;
  const size_t E = static_cast<size_t>(num_experts);
  const int64_t n_assign = num_tokens * top_k;
  cap_to_max_k(options.adaptive, routing);  // adaptive k, step 1 (local)
  // This rank's assignments per expert, its token count, its degraded tokens per
  // expert and its degraded tokens ([E + 1 + E + 1]); gathered from all ranks (always
  // the same size, so ranks agree on the exchange whatever their placements say).
  const size_t W = 2 * E + 2;
  std::vector<int64_t> local(W, 0);
  for (int64_t i = 0; i < n_assign; ++i) {
    if (topk_idx[i] >= 0) ++local[static_cast<size_t>(topk_idx[i])];
  }
  local[E] = num_tokens;
  if (counts->degraded_per_expert.size() == E) {
    std::copy(counts->degraded_per_expert.begin(), counts->degraded_per_expert.end(),
              local.begin() + static_cast<int64_t>(E) + 1);
  }
  local[W - 1] = counts->degraded_tokens;
  std::vector<int64_t> all(static_cast<size_t>(R) * W);
  if (comm != nullptr) {
    MOE_RETURN_IF_ERROR(comm->allgather(local.data(), local.size() * sizeof(int64_t), all.data()));
  } else {
    all = local;
  }
  std::vector<int64_t> total(E, 0), before(E, 0);
  counts->global_tokens = 0;
  for (int r = 0; r < R; ++r) counts->global_tokens += all[static_cast<size_t>(r) * W + E];
  // Adaptive k, steps 2-4: sheds assignments and lowers their ranks' rows of `all`.
  AdaptiveKOutcome adaptive;
  MOE_RETURN_IF_ERROR(shed_under_load(options.adaptive, comm, routing,
                                      {&all, W, num_experts, counts->global_tokens}, &adaptive));
  counts->adaptive_target = adaptive.target;
  counts->adaptive_tokens = adaptive.tokens;
  counts->adaptive_dropped = adaptive.assignments;
  counts->degraded_tokens = 0;
  counts->degraded_per_expert.assign(E, 0);
  for (int r = 0; r < R; ++r) {
    const int64_t* row = all.data() + static_cast<size_t>(r) * W;
    counts->degraded_tokens += row[W - 1];
    for (size_t e = 0; e < E; ++e) {
      total[e] += row[e];
      if (r < me) before[e] += row[e];
      counts->degraded_per_expert[e] += row[E + 1 + e];
    }
  }
  counts->tokens_per_expert = total;
  counts->capacity = -1;
  counts->dropped = counts->rerouted = counts->requeued = 0;
  if (options.policy == OverflowPolicy::kDropless) return ok_status();

  const int k_eff = options.adaptive.enabled ? adaptive_max_k(options.adaptive, top_k) : top_k;
  const int64_t cap = expert_capacity(counts->global_tokens, k_eff, num_experts, options.capacity_factor);
  counts->capacity = cap;
  // Phase 1: admit in global order; this rank's assignments start after `before`.
  std::vector<int64_t> seen = before;
  std::vector<int64_t> overflow;  // flat assignment indices t * top_k + j, in order
  for (int64_t i = 0; i < n_assign; ++i) {
    const int e = topk_idx[i];
    if (e < 0) continue;
    if (seen[static_cast<size_t>(e)]++ >= cap) overflow.push_back(i);
  }
  std::vector<int64_t> room(E);
  for (size_t e = 0; e < E; ++e) {
    counts->tokens_per_expert[e] = std::min(total[e], cap);
    room[e] = cap - counts->tokens_per_expert[e];
  }
  if (options.policy == OverflowPolicy::kDrop) {
    for (size_t e = 0; e < E; ++e) counts->dropped += total[e] - counts->tokens_per_expert[e];
    for (int64_t i : overflow) {
      topk_idx[i] = kDroppedExpert;
      topk_weights[i] = 0.0f;
    }
    return ok_status();
  }
  if (options.policy == OverflowPolicy::kAdaptiveRequeue) return requeue(comm, topk_idx, topk_weights, overflow, room, counts);

  // Phase 2 (reroute): every rank's overflowing assignments with their candidate
  // experts, gathered so that every rank replays the same placement in global order.
  // Entry: [token, slot, num_candidates, candidates...].
  std::vector<int> mine;
  for (int64_t i : overflow) {
    const int64_t t = i / top_k;
    const int* row = topk_idx + t * top_k;
    const int* order = ranked + t * num_experts;
    mine.push_back(static_cast<int>(t));
    mine.push_back(static_cast<int>(i % top_k));
    const size_t count_pos = mine.size();
    mine.push_back(0);
    for (int c = 0; c < num_experts && order[c] >= 0; ++c) {
      // Skip experts full after admission (they never regain room) and the token's
      // original top-k (held, or overflowing). This also keeps the exchange small.
      if (room[static_cast<size_t>(order[c])] == 0) continue;
      if (std::find(row, row + top_k, order[c]) != row + top_k) continue;
      mine.push_back(order[c]);
      ++mine[count_pos];
    }
  }
  // (topk_idx still holds the original rows: it is rewritten only during the replay.)
  std::vector<int> entries;
  std::vector<int64_t> sizes;
  MOE_RETURN_IF_ERROR(allgather_ints(comm, mine, &entries, &sizes));
  // The replay, in global order; a token's new experts are tracked while consecutive
  // entries belong to the same (rank, token).
  std::vector<int> taken;  // experts given to the current token by earlier reroutes
  int cur_rank = -1, cur_token = -1;
  size_t pos = 0;
  for (int r = 0; r < R; ++r) {
    const size_t end = pos + static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    while (pos < end) {
      const int t = entries[pos], j = entries[pos + 1], nc = entries[pos + 2];
      const int* cand = entries.data() + pos + 3;
      pos += 3 + static_cast<size_t>(nc);
      if (r != cur_rank || t != cur_token) {
        taken.clear();
        cur_rank = r;
        cur_token = t;
      }
      int chosen = kDroppedExpert;
      for (int c = 0; c < nc; ++c) {
        const int e = cand[c];
        if (room[static_cast<size_t>(e)] > 0 && std::find(taken.begin(), taken.end(), e) == taken.end()) {
          chosen = e;
          break;
        }
      }
      if (chosen >= 0) {
        --room[static_cast<size_t>(chosen)];
        ++counts->tokens_per_expert[static_cast<size_t>(chosen)];
        ++counts->rerouted;
        taken.push_back(chosen);
      } else {
        ++counts->dropped;
      }
      if (r == me) {
        const int64_t i = static_cast<int64_t>(t) * top_k + j;
        topk_idx[i] = chosen;
        if (chosen < 0) topk_weights[i] = 0.0f;
      }
    }
  }
  return ok_status();
}

}  // namespace moe
