// The Scheduler's KV policy (include/moe/scheduler.h): the pool's size, admission (first
// come, first served, after the longest cached prefix), growth and preemption by
// recompute, and the disk tier's hooks into the block manager.
#include <algorithm>
#include <string>

#include "moe/core/logging.h"
#include "moe/core/memory_limit.h"
#include "moe/core/text_format.h"
#include "moe/engine/scheduler_state.h"

namespace moe {
namespace scheduler_detail {

StatusOr<int64_t> kv_pool_blocks(const SchedulerOptions& o, const EngineCore& core, size_t bytes_per_token) {
  const ModelConfig& c = *core.config;
  // The memory the weights and the pool may use together; under EP or TP the weights are
  // split over the ranks (an estimate: weights / world size).
  const MemoryLimit limit = memory_limit();
  const int world = std::max(1, core.world_ranks);
  const double weights = static_cast<double>(core.info->weight_bytes) / world;
  const double room = o.memory_utilization * static_cast<double>(limit.bytes) - weights;
  auto gb = [](double b) { return format_fixed(b / 1e9, 2) + " GB"; };
  int64_t tokens = o.kv_cache_tokens;
  if (o.kv_cache_memory_bytes > 0) tokens = static_cast<int64_t>(o.kv_cache_memory_bytes / bytes_per_token);
  const bool derived = tokens == 0;
  if (derived) {
    tokens = static_cast<int64_t>(o.max_num_seqs) * c.max_position_embeddings;
    if (limit.bytes > 0) tokens = std::min<int64_t>(tokens, static_cast<int64_t>(std::max(0.0, room) / bytes_per_token));
  }
  const int64_t num_blocks = tokens / o.kv_block_size;
  if (num_blocks < 1) {
    if (derived) {
      return failed_precondition("no room for a KV cache: the weights (" + gb(weights) + ") leave " + gb(room) + " of " +
                                gb(o.memory_utilization * static_cast<double>(limit.bytes)) + " (memory_utilization " +
                                format_g(o.memory_utilization) + " of " + gb(static_cast<double>(limit.bytes)) +
                                ", " + limit.source + "), less than one block of " +
                                std::to_string(o.kv_block_size) + " tokens (" + gb(o.kv_block_size * bytes_per_token) +
                                ")");
    }
    return invalid_argument("kv_cache_tokens (" + std::to_string(tokens) + ") is smaller than one block of " +
                            std::to_string(o.kv_block_size) + " tokens");
  }
  const double pool_bytes = static_cast<double>(num_blocks) * o.kv_block_size * bytes_per_token;
  if (limit.bytes > 0 && pool_bytes > room) {
    return failed_precondition("the KV cache (" + std::to_string(num_blocks * o.kv_block_size) + " tokens, " +
                              gb(pool_bytes) + ") and the weights (" + gb(weights) + ") need " +
                              gb(pool_bytes + weights) + ", more than the " +
                              gb(o.memory_utilization * static_cast<double>(limit.bytes)) +
                              " this process may use (memory_utilization " + format_g(o.memory_utilization) +
                              " of " + gb(static_cast<double>(limit.bytes)) + ", " + limit.source +
                              "): give a smaller kv_cache_tokens or kv_cache_memory_bytes");
  }
  return num_blocks;
}

}  // namespace scheduler_detail

bool Scheduler::State::admit(Seq& s) {
  const int group = least_loaded_dp_group();
  KvBlockManager& m = *kvm[static_cast<size_t>(group)];
  const bool first = s.scheduled_at == 0;
  // Prompt logprobs need every prompt row's logits: such a request reads no cached
  // prefix (its blocks are still cached for others), as vLLM does.
  const bool lookup = s.prompt_logprobs_sent;
  const std::span<const int32_t> tokens(s.tokens.data(), s.tokens.size());
  // At least the last token is computed: its logits give the next token.
  const int64_t hit = m.begin(s.id, tokens, static_cast<int64_t>(s.tokens.size()) - 1, prefix_root(s, group), lookup);
  const int64_t hold = options.reserve_max_tokens ? s.prompt_len + s.req.max_tokens : s.prefill_len;
  if (!m.ensure(s.id, hold)) {
    m.free(s.id);
    return false;
  }
  if (first && lookup) m.record_lookup(s.prompt_len, std::min<int64_t>(hit, s.prompt_len));
  s.cached = hit;
  if (first) s.cached_prompt = static_cast<int>(std::min<int64_t>(hit, s.prompt_len));
  s.dp_group = group;
  s.admitted = ++admissions;
  if (first) s.scheduled_at = now_seconds();
  return true;
}

void Scheduler::State::preempt(Seq& s) {
  manager(s).free(s.id);  // its full blocks stay cached: the recompute may hit them
  s.preempt = true;
  s.cached = 0;
  s.prefill_len = static_cast<int64_t>(s.tokens.size());  // prompt + every token so far, then decodes
  if (!s.prompt_logprobs_sent) {                          // built again from the first row
    s.prompt_logprobs.clear();
    s.chunk_logits = {};
  }
  ++preemptions;
}

void Scheduler::State::grow_or_preempt() {
  for (auto& sp : running) {
    Seq& s = *sp;
    if (s.preempt || s.cached < s.prefill_len) continue;  // prefills hold their blocks from admission
    while (!manager(s).ensure(s.id, s.cached + 1)) {
      Seq* victim = nullptr;
      for (auto& o : running) {
        if (!o->preempt && o->dp_group == s.dp_group && (victim == nullptr || o->admitted > victim->admitted)) {
          victim = o.get();
        }
      }
      MOE_LOG_DEBUG("scheduler: no free KV block for request {}: preempting request {} ({} tokens, recomputed later)",
                    s.id, victim->id, victim->tokens.size());
      preempt(*victim);
      if (victim == &s) break;
    }
  }
  // The preempted wait at the head of the queue, oldest first, and resume before newer requests.
  for (auto it = running.rbegin(); it != running.rend(); ++it) {
    if ((*it)->preempt) {
      (*it)->preempt = false;
      waiting.push_front(std::move(*it));
    }
  }
  std::erase_if(running, [](const std::unique_ptr<Seq>& s) { return s == nullptr; });
}

void Scheduler::State::open_disk_tier(const KvCacheShape& shape) {
  const KvBlockLayout layout{.model_fingerprint = core->model_fingerprint,
                             .num_layers = core->config->num_hidden_layers,
                             .num_kv_heads = shape.heads,
                             .head_dim = shape.k_dim,
                             .v_head_dim = shape.v_dim,
                             .block_size = options.kv_block_size,
                             .dtype = static_cast<int32_t>(shape.dtype)};
  auto tier = KvDiskTier::open({.dir = options.kv_offload_dir, .max_bytes = options.kv_offload_bytes, .sync = false},
                               layout);
  if (!tier.ok()) {
    MOE_LOG_WARN("scheduler: serving without the KV disk tier: {}", tier.status().message());
    return;
  }
  disk = std::move(tier).value();
  block_buf.resize(kv->block_bytes());
  KvBlockManager& m = *kvm[0];
  m.on_cached = [this](const KvBlockHash& key, int32_t block, std::span<const int32_t> tokens) {
    if (disk->contains(key)) return;
    kv->read_block(block, block_buf);
    disk->put(key, tokens, block_buf);
  };
  m.load_missing = [this](const KvBlockHash& key, std::span<const int32_t> tokens, int32_t block) {
    if (!disk->contains(key) || !disk->get(key, tokens, block_buf)) return false;
    kv->write_block(block, block_buf);
    return true;
  };
  const KvDiskTierCounters c = disk->counters();
  MOE_LOG_INFO("scheduler: KV disk tier {}: {} blocks ({:.1f} MB) found, up to {:.1f} MB", options.kv_offload_dir,
               c.resident_blocks, c.resident_bytes / 1e6, options.kv_offload_bytes / 1e6);
}

}  // namespace moe
