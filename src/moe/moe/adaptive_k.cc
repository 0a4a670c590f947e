#include "moe/moe/adaptive_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moe/moe/capacity.h"
#include "moe/moe/dispatch_layout.h"

namespace moe {

Status validate_adaptive_k(const AdaptiveKOptions& options, int top_k) {
  if (!options.enabled) return ok_status();
  const int max_k = adaptive_max_k(options, top_k);
  if (options.min_k < 1) {
    return invalid_argument("adaptive k: min_k must be >= 1 (got " + std::to_string(options.min_k) + ")");
  }
  if (max_k > top_k) {
    return invalid_argument("adaptive k: max_k " + std::to_string(max_k) + " exceeds the model's experts per token (" +
                            std::to_string(top_k) + ")");
  }
  if (options.min_k > max_k) {
    return invalid_argument("adaptive k: min_k " + std::to_string(options.min_k) + " exceeds max_k " +
                            std::to_string(max_k));
  }
  if (!std::isfinite(options.target_factor) || options.target_factor <= 0) {
    return invalid_argument("adaptive k: the load target factor must be a positive number (got " +
                            std::to_string(options.target_factor) + ")");
  }
  return ok_status();
}

Status allgather_ints(Communicator* comm, const std::vector<int>& mine, std::vector<int>* all,
                      std::vector<int64_t>* counts_out) {
  if (comm == nullptr) {
    *all = mine;
    counts_out->assign(1, static_cast<int64_t>(mine.size()));
    return ok_status();
  }
  const int R = comm->size();
  const int64_t my_count = static_cast<int64_t>(mine.size());
  std::vector<int64_t>& counts = *counts_out;
  counts.assign(static_cast<size_t>(R), 0);
  MOE_RETURN_IF_ERROR(comm->allgather(&my_count, sizeof(int64_t), counts.data()));
  std::vector<size_t> send_bytes(static_cast<size_t>(R), mine.size() * sizeof(int)), recv_bytes(static_cast<size_t>(R));
  int64_t total = 0;
  for (int r = 0; r < R; ++r) {
    recv_bytes[static_cast<size_t>(r)] = static_cast<size_t>(counts[static_cast<size_t>(r)]) * sizeof(int);
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<int> send;
  send.reserve(mine.size() * static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) send.insert(send.end(), mine.begin(), mine.end());
  all->assign(static_cast<size_t>(total), 0);
  return comm->alltoallv(send.data(), send_bytes, all->data(), recv_bytes);
}

namespace {

// Sum of token t's live weights.
float weight_sum(const TopkRouting& routing, int64_t t) {
  float s = 0.0f;
  for (int j = 0; j < routing.num_topk; ++j) {
    if (routing.topk_idx[t * routing.num_topk + j] >= 0) s += routing.topk_weights[t * routing.num_topk + j];
  }
  return s;
}

// Scales token t's live weights by before / (their sum now), when that sum is > 0.
void rescale(const TopkRouting& routing, int64_t t, float before) {
  const float kept = weight_sum(routing, t);
  if (!(kept > 0.0f)) return;
  const float scale = before / kept;
  for (int j = 0; j < routing.num_topk; ++j) {
    if (routing.topk_idx[t * routing.num_topk + j] >= 0) routing.topk_weights[t * routing.num_topk + j] *= scale;
  }
}

// One candidate of step 3, as exchanged: [expert, share bits, token, slot].
constexpr size_t kEntry = 4;

struct Candidate {
  int rank, token, slot;
  float share;
};

}  // namespace

void cap_to_max_k(const AdaptiveKOptions& options, const TopkRouting& routing) {
  const int K = adaptive_max_k(options, routing.num_topk);
  if (!options.enabled || K >= routing.num_topk) return;
  for (int64_t t = 0; t < routing.num_tokens; ++t) {
    const float before = weight_sum(routing, t);
    for (int j = K; j < routing.num_topk; ++j) {
      routing.topk_idx[t * routing.num_topk + j] = kDroppedExpert;
      routing.topk_weights[t * routing.num_topk + j] = 0.0f;
    }
    if (options.renormalize) rescale(routing, t, before);
  }
}

Status shed_under_load(const AdaptiveKOptions& options, Communicator* comm, const TopkRouting& routing,
                       const RankExpertCounts& counts, AdaptiveKOutcome* out) {
  *out = {};
  if (!options.enabled) return ok_status();
  const int k = routing.num_topk, K = adaptive_max_k(options, k);
  const int R = comm ? comm->size() : 1, me = comm ? comm->rank() : 0;
  const size_t E = static_cast<size_t>(counts.num_experts);
  std::vector<int64_t>& rows = *counts.rows;
  std::vector<int64_t> load(E, 0);
  for (int r = 0; r < R; ++r) {
    for (size_t e = 0; e < E; ++e) load[e] += rows[static_cast<size_t>(r) * counts.width + e];
  }
  const int64_t L = expert_capacity(counts.global_tokens, K, counts.num_experts, options.target_factor);
  out->target = L;
  // Every rank sees the same loads, so all skip the exchange together.
  if (std::none_of(load.begin(), load.end(), [L](int64_t n) { return n > L; })) return ok_status();

  std::vector<int> mine;
  for (int64_t t = 0; t < routing.num_tokens; ++t) {
    const float sum = weight_sum(routing, t);
    for (int j = options.min_k; j < K; ++j) {
      const int e = routing.topk_idx[t * k + j];
      if (e < 0 || load[static_cast<size_t>(e)] <= L) continue;
      const float share = sum > 0.0f ? routing.topk_weights[t * k + j] / sum : 0.0f;
      int bits = 0;
      std::memcpy(&bits, &share, sizeof(bits));
      mine.insert(mine.end(), {e, bits, static_cast<int>(t), j});
    }
  }
  std::vector<int> entries;
  std::vector<int64_t> sizes;
  MOE_RETURN_IF_ERROR(allgather_ints(comm, mine, &entries, &sizes));

  // Per expert, its candidates in global order.
  std::vector<std::vector<Candidate>> by_expert(E);
  size_t pos = 0;
  for (int r = 0; r < R; ++r) {
    const size_t end = pos + static_cast<size_t>(sizes[static_cast<size_t>(r)]);
    for (; pos < end; pos += kEntry) {
      float share = 0.0f;
      std::memcpy(&share, &entries[pos + 1], sizeof(share));
      by_expert[static_cast<size_t>(entries[pos])].push_back({r, entries[pos + 2], entries[pos + 3], share});
    }
  }
  std::vector<int64_t> my_shed;                  // this rank's shed slots t * k + j
  std::vector<std::pair<int, int>> shed_tokens;  // (rank, token) of every shed assignment
  for (size_t e = 0; e < E; ++e) {
    std::vector<Candidate>& c = by_expert[e];
    if (c.empty()) continue;
    // Smallest share first; equal shares: the later one in global order first.
    std::sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) {
      if (a.share != b.share) return a.share < b.share;
      if (a.rank != b.rank) return a.rank > b.rank;
      if (a.token != b.token) return a.token > b.token;
      return a.slot > b.slot;
    });
    const int64_t n_shed = std::min<int64_t>(load[e] - L, static_cast<int64_t>(c.size()));
    for (int64_t i = 0; i < n_shed; ++i) {
      const Candidate& x = c[static_cast<size_t>(i)];
      --rows[static_cast<size_t>(x.rank) * counts.width + e];
      ++out->assignments;
      shed_tokens.emplace_back(x.rank, x.token);
      if (x.rank == me) my_shed.push_back(static_cast<int64_t>(x.token) * k + x.slot);
    }
  }
  std::sort(shed_tokens.begin(), shed_tokens.end());
  out->tokens = std::unique(shed_tokens.begin(), shed_tokens.end()) - shed_tokens.begin();
  // Slot order groups each token's shed slots; S is taken before the token changes.
  std::sort(my_shed.begin(), my_shed.end());
  for (size_t i = 0; i < my_shed.size();) {
    const int64_t t = my_shed[i] / k;
    const float before = weight_sum(routing, t);
    for (; i < my_shed.size() && my_shed[i] / k == t; ++i) {
      routing.topk_idx[my_shed[i]] = kDroppedExpert;
      routing.topk_weights[my_shed[i]] = 0.0f;
    }
    if (options.renormalize) rescale(routing, t, before);
  }
  return ok_status();
}

}  // namespace moe
