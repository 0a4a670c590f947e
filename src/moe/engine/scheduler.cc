// Over 600 lines: the Scheduler is one state machine (State, scheduler_state.h: the step,
// detokenization, stop handling, timings and its GenerationService methods) whose parts share its
// private state; the KV policy (admission, preemption, pool size, disk tier) is in scheduler_kv.cc.
#include "moe/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iterator>
#include <mutex>
#include <random>
#include <span>
#include <unordered_set>
#include <utility>

#include "moe/core/clock.h"
#include "moe/core/logging.h"
#include "moe/core/phase_timer.h"
#include "moe/engine/detokenizer.h"
#include "moe/engine/engine_core.h"
#include "moe/engine/logits_processor.h"
#include "moe/engine/json_decoding.h"
#include "moe/engine/request_validation.h"
#include "moe/engine/scheduler_state.h"
#include "moe/runtime/ep_session.h"
#include "moe/transformer/paged_kv_cache.h"

namespace moe {
namespace {



// The final event's engine timings (SeqEvent::queue_seconds ...).
void set_timings(const Seq& s, SeqEvent& ev) {
  if (s.scheduled_at > 0) ev.queue_seconds = s.scheduled_at - s.submitted_at;
  if (s.first_token_at > 0) {
    ev.prefill_seconds = s.first_token_at - s.scheduled_at;
    ev.decode_seconds = s.last_token_at - s.first_token_at;
  }
}

// The bucket of kIterationTokenBounds a step of `tokens` tokens falls in (the last one: above all).
size_t iteration_bucket(int64_t tokens) {
  size_t b = 0;
  while (b < std::size(kIterationTokenBounds) && tokens > kIterationTokenBounds[b]) ++b;
  return b;
}

int64_t blocks_for(int64_t tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

bool is_stop_token(const SeqRequest& req, int token) {
  return std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), token) != req.stop_token_ids.end();
}

}  // namespace


Scheduler::Scheduler(std::unique_ptr<State> state) : state_(std::move(state)) {}
Scheduler::~Scheduler() = default;

StatusOr<std::unique_ptr<Scheduler>> Scheduler::create(Engine* engine, const SchedulerOptions& o) {
  if (engine == nullptr) return invalid_argument("scheduler: no engine");
  MOE_RETURN_IF_ERROR(validate_scheduler_options(o));
  EngineCore& core = engine->core();
  if (!core.session->is_leader()) {
    return failed_precondition("under expert parallelism the scheduler runs on rank 0; other ranks call run_worker()");
  }
  const ModelConfig& c = *core.config;
  const KvCacheShape kv = kv_cache_shape(c, core.kv_dtype);
  const size_t bytes_per_token = static_cast<size_t>(c.num_hidden_layers) * kv.bytes_per_token_per_layer();
  MOE_ASSIGN_OR_RETURN(const int64_t num_blocks, scheduler_detail::kv_pool_blocks(o, core, bytes_per_token));
  auto st = std::make_unique<State>();
  st->core = &core;
  st->options = o;
  if (!o.kv_offload_dir.empty() && (core.tp_size > 1 || core.dp_groups > 1)) {
    return invalid_argument("kv_offload_dir is not supported with tensor parallelism or DP-attention: a block's KV is "
                            "split over ranks there");
  }
  PhaseTimer phases;
  st->kv = std::make_unique<PagedKVCache>(c.num_hidden_layers, kv, o.kv_block_size, num_blocks);
  for (int g = 0; g < std::max(core.dp_groups, 1); ++g) {
    st->kvm.push_back(std::make_unique<KvBlockManager>(
        KvBlockManagerOptions{.num_blocks = num_blocks,
                              .block_size = o.kv_block_size,
                              .enable_prefix_caching = o.enable_prefix_caching,
                              .hash_for_test = scheduler_detail::truncated_hash(o.prefix_hash_bits_for_test)}));
  }
  phases.mark("KV pool");
  if (!o.kv_offload_dir.empty()) st->open_disk_tier(kv);
  core.decoder->reserve(o.max_num_batched_tokens, o.max_num_seqs);  // forward_batch's workspaces
  phases.mark("workspaces");
  st->snap.kv_blocks_total = num_blocks * static_cast<int64_t>(st->kvm.size());
  st->snap.kv_block_size = o.kv_block_size;
  st->snap.moe_layers = core.load_stats->layer_ids();
  st->snap.expert_tokens.assign(st->snap.moe_layers.size(),
                                std::vector<int64_t>(static_cast<size_t>(c.router.num_experts), 0));
  MOE_LOG_INFO("scheduler: KV cache {} blocks x {} tokens ({:.1f} MB, {}; touched as used), up to {} sequences, {} "
               "tokens per step, prefix caching {}, {}",
               num_blocks, o.kv_block_size, st->kv->bytes() / 1e6, kv_dtype_name(kv.dtype), o.max_num_seqs,
               o.max_num_batched_tokens, o.enable_prefix_caching ? "on" : "off",
               o.reserve_max_tokens ? "prompt + max_tokens reserved at admission" : "blocks on demand");
  MOE_LOG_INFO("start-up: {} (allocation and first touch)", phases.summary());
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(st)));
}

StatusOr<uint64_t> Scheduler::submit(SeqRequest req, SeqSink sink) {
  State& st = *state_;
  const EngineCore& core = *st.core;
  const RequestFields fields{.prompt = req.prompt,
                             .prompt_token_ids = req.prompt_token_ids,
                             .max_tokens = req.max_tokens,
                             .sampling = req.sampling,
                             .stop = req.stop,
                             .stop_token_ids = req.stop_token_ids,
                             .logprobs = req.logprobs,
                             .prompt_logprobs = req.prompt_logprobs};
  const RequestLimits limits{.tokenizer = core.tokenizer,
                             .vocab_size = core.config->vocab_size,
                             .max_context = core.config->max_position_embeddings,
                             .min_max_tokens = 1};
  auto seq = std::make_unique<Seq>();
  MOE_ASSIGN_OR_RETURN(seq->tokens, validate_request(fields, limits));
  seq->prompt_len = static_cast<int64_t>(seq->tokens.size());
  seq->submitted_at = now_seconds();
  const int64_t needed = seq->prompt_len + req.max_tokens;
  const int64_t blocks = blocks_for(needed, st.options.kv_block_size);
  if (blocks > st.kvm[0]->total_blocks()) {
    return invalid_argument("the request needs " + std::to_string(needed) + " tokens of KV cache, more than the " +
                            std::to_string(st.kvm[0]->total_blocks() * st.options.kv_block_size) +
                            " the server has in all: it can never fit");
  }
  seq->read_offset = seq->tokens.size();
  seq->prefix_offset = seq->read_offset - std::min<size_t>(seq->read_offset, 5);
  const uint64_t seed = req.sampling.seed ? *req.sampling.seed : std::random_device{}();
  seq->sampler = std::make_unique<RequestSampler>(req.sampling, seed, seq->tokens, req.logprobs);
  // A replay's first event (with the prompt logprobs) was delivered before.
  seq->prompt_logprobs_sent = req.prompt_logprobs < 0 || !req.resume_token_ids.empty();
  MOE_ASSIGN_OR_RETURN(seq->json, make_json_constraint(req.response_format, req.json_schema, st.constraint_vocab,
                                                        *core.tokenizer, *core.config));
  seq->req = std::move(req);
  MOE_RETURN_IF_ERROR(st.prime_resumed(*seq));
  seq->prefill_len = static_cast<int64_t>(seq->tokens.size());
  seq->sink = std::move(sink);
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.shutting_down)
      return Status(StatusCode::kUnavailable, st.refusal.empty() ? "the server is shutting down" : st.refusal);
    id = st.next_id++;
    seq->id = id;
    st.incoming.push_back(std::move(seq));
  }
  st.cv.notify_one();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancelled.insert(id);
  }
  state_->cv.notify_one();
}

void Scheduler::shutdown(double grace_seconds) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->shutting_down) {
      state_->shutting_down = true;
      state_->shutdown_deadline = now_seconds() + std::max(0.0, grace_seconds);
    }
  }
  state_->cv.notify_one();
}

ServiceSnapshot Scheduler::snapshot() const {
  std::lock_guard<std::mutex> lock(state_->snap_mu);
  return state_->snap;
}

ServiceHealth Scheduler::health() const {
  const State& st = *state_;
  ServiceHealth h;
  {
    std::lock_guard<std::mutex> lock(st.snap_mu);
    if (!st.failure.empty()) {
      h.state = "failed";
      h.detail = st.failure;
      return h;
    }
  }
  {
    std::lock_guard<std::mutex> lock(st.snap_mu);
    if (st.snap.lost_experts > 0) {
      h.state = "degraded";
      h.detail = std::to_string(st.snap.lost_experts) +
                 " (layer, expert) pair(s) lost with a failed rank have no live replica yet: their tokens go to the "
                 "next-best live expert until re-replicated";
    }
  }
  const double started = st.step_started.load();
  if (started > 0) {
    const double running = now_seconds() - started;
    if (running > st.options.liveness_timeout_seconds) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "an engine step has been running for %.1f s (liveness timeout %g s)", running,
                    st.options.liveness_timeout_seconds);
      h.state = "stalled";
      h.detail = buf;
    }
  }
  return h;
}

const ModelInfo& Scheduler::model_info() const { return *state_->core->info; }

int Scheduler::count_tokens(const std::string& text) const {
  return static_cast<int>(state_->core->tokenizer->encode(text).size());
}

StatusOr<std::vector<int>> Scheduler::tokenize(const std::string& text, bool add_special_tokens) const {
  return state_->core->tokenizer->encode(text, add_special_tokens);
}

StatusOr<std::string> Scheduler::detokenize(const std::vector<int>& ids) const {
  const Tokenizer& tok = *state_->core->tokenizer;
  const int vocab = tok.vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return invalid_argument("token id " + std::to_string(ids[i]) + " (at index " + std::to_string(i) +
                              ") is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return tok.decode(ids);
}

std::string Scheduler::token_bytes(int id) const { return state_->core->tokenizer->token_bytes(id); }

Status Scheduler::reset_prefix_cache() {
  state_->reset_requested = true;
  state_->cv.notify_one();
  return ok_status();
}

// Appends the text of newly generated tokens to s.text. While a character is still
// incomplete (the decode ends in U+FFFD from a partial byte-fallback sequence) the
// tokens wait, unless `flush` (the sequence ends).
void Scheduler::State::detokenize(Seq& s, bool flush) {
  if (s.read_offset >= s.tokens.size()) return;
  auto window = [&](size_t end) {
    return core->tokenizer->decode(std::vector<int>(s.tokens.begin() + static_cast<long>(s.prefix_offset),
                                                    s.tokens.begin() + static_cast<long>(end)));
  };
  const std::string prefix_text = window(s.read_offset);
  const std::string new_text = window(s.tokens.size());
  if (new_text.size() > prefix_text.size() && (flush || unstable_suffix(new_text) == 0)) {
    s.text += new_text.substr(prefix_text.size());
    s.prefix_offset = s.read_offset;
    s.read_offset = s.tokens.size();
  } else if (flush) {
    s.read_offset = s.tokens.size();
  }
}

size_t Scheduler::State::sendable(const Seq& s, bool finished, size_t cut) const {
  const std::string& cont = s.text;
  size_t stable = std::min(cont.size(), cut);
  if (!finished) stable -= std::min(stable, stop_prefix_holdback(cont.substr(0, stable), s.emitted, s.req.stop));
  return stable;
}

Status Scheduler::State::prime_resumed(Seq& s) {
  const std::vector<int>& resumed = s.req.resume_token_ids;
  if (resumed.empty()) return ok_status();
  const int n = static_cast<int>(resumed.size());
  if (n >= s.req.max_tokens) {
    return invalid_argument("resume_token_ids has " + std::to_string(n) + " tokens, not fewer than max_tokens (" +
                            std::to_string(s.req.max_tokens) + "): the request had already finished");
  }
  const int vocab = core->config->vocab_size;
  for (int i = 0; i < n; ++i) {
    const int t = resumed[static_cast<size_t>(i)];
    const std::string where = "resume_token_ids[" + std::to_string(i) + "] = " + std::to_string(t);
    if (t < 0 || t >= vocab) {
      return invalid_argument(where + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    if (!s.req.ignore_eos && core->config->is_eos(t)) {
      return invalid_argument(where + " is an EOS token, which would have ended the request");
    }
    if (is_stop_token(s.req, t)) return invalid_argument(where + " is in stop_token_ids: it would have ended the request");
    s.sampler->replay(t);  // penalties count it; the random stream advances past it
    if (s.json && (!s.json->accept(t) || s.json->closed())) {
      return invalid_argument(where + (s.json->closed() ? " ends" : " does not continue") +
                              " the response_format's JSON value, which would have ended the request");
    }
    // The uninterrupted run: this token's step detokenized it and its event carried
    // what was sendable then.
    s.tokens.push_back(t);
    detokenize(s, /*flush=*/false);
    s.emitted = std::max(s.emitted, sendable(s, false, std::string::npos));
    for (const std::string& stop : s.req.stop) {
      if (s.text.find(stop) != std::string::npos) {
        return invalid_argument(where + " completes the stop string \"" + stop +
                                "\", which would have ended the request");
      }
    }
  }
  s.tokens_sent = resumed.size();
  return ok_status();
}

// Sends what the sequence has produced since the last event; while running, a possible
// start of a stop string is held back.
void Scheduler::State::emit(Seq& s, bool finished, const std::string& reason, size_t cut) {
  if (finished) detokenize(s, /*flush=*/true);
  const std::string& cont = s.text;
  const size_t stable = sendable(s, finished, cut);
  SeqEvent ev;
  if (stable > s.emitted) ev.text = cont.substr(s.emitted, stable - s.emitted);
  s.emitted = std::max(s.emitted, stable);
  const size_t out = s.tokens.size() - static_cast<size_t>(s.prompt_len);
  for (size_t i = s.tokens_sent; i < out; ++i) ev.token_ids.push_back(s.tokens[static_cast<size_t>(s.prompt_len) + i]);
  s.tokens_sent = out;
  ev.finished = finished;
  ev.finish_reason = reason;
  ev.prompt_tokens = static_cast<int>(s.prompt_len);
  ev.completion_tokens = static_cast<int>(out);
  ev.cached_tokens = s.cached_prompt;
  if (finished) set_timings(s, ev);
  if (!finished && ev.text.empty() && ev.token_ids.empty()) return;
  ev.logprobs = std::exchange(s.logprobs, {});
  if (!std::exchange(s.prompt_logprobs_sent, true)) ev.prompt_logprobs = std::move(s.prompt_logprobs);
  s.sink(std::move(ev));
}

void Scheduler::State::finish(Seq& s, const std::string& reason, const std::string& error, size_t cut) {
  if (!error.empty()) {
    SeqEvent ev;
    ev.finished = true;
    ev.finish_reason = reason;
    ev.error = error;
    ev.prompt_tokens = static_cast<int>(s.prompt_len);
    ev.completion_tokens = static_cast<int>(s.tokens.size()) - static_cast<int>(s.prompt_len);
    ev.cached_tokens = s.cached_prompt;
    set_timings(s, ev);
    s.sink(std::move(ev));
  } else {
    emit(s, true, reason, cut);
  }
  manager(s).free(s.id);
  s.done = true;
  std::lock_guard<std::mutex> lock(snap_mu);
  ++snap.requests_finished;
}

int Scheduler::State::least_loaded_dp_group() const {
  std::vector<int> load(static_cast<size_t>(std::max(core->dp_groups, 1)), 0);
  for (const auto& s : running) ++load[static_cast<size_t>(s->dp_group)];
  return static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
}

// One engine step: every running sequence past its prompt decodes one token, then
// prompt chunks (admission order) fill the rest of the token budget.
Status Scheduler::State::step() {
  if (!options.reserve_max_tokens) grow_or_preempt();
  if (running.empty()) return ok_status();  // every sequence was preempted: admission runs next
  const int64_t budget = options.max_num_batched_tokens;
  std::vector<Decoder::BatchSegment> segs;
  std::vector<Seq*> seg_seq;
  int64_t used = 0;
  for (auto& s : running) {  // decodes
    if (s->cached < s->prefill_len) continue;
    segs.push_back({s->tokens.data() + s->cached, 1, s->cached, table(*s).data(), nullptr, nullptr, s->dp_group});
    seg_seq.push_back(s.get());
    ++used;
  }
  int64_t prompt_tokens = 0;
  for (auto& s : running) {  // prompt chunks
    if (s->cached >= s->prefill_len || used >= budget) continue;
    const int64_t n = std::min(s->prefill_len - s->cached, budget - used);
    segs.push_back({s->tokens.data() + s->cached, n, s->cached, table(*s).data(), nullptr, nullptr, s->dp_group});
    if (!s->prompt_logprobs_sent && s->cached < s->prompt_len) {  // every row's logits, for prompt_logprobs
      s->chunk_logits.resize(static_cast<size_t>(n * core->config->vocab_size));
      segs.back().all_logits = s->chunk_logits.data();
    }
    seg_seq.push_back(s.get());
    used += n;
    prompt_tokens += n;
  }
  for (size_t i = 0; i < segs.size(); ++i) {
    Seq& s = *seg_seq[i];
    if (s.cached + segs[i].n == static_cast<int64_t>(s.tokens.size())) {
      s.logits.resize(static_cast<size_t>(core->config->vocab_size));
      segs[i].logits = s.logits.data();
    }
  }
  MOE_RETURN_IF_ERROR(core->decoder->forward_batch(segs, kv.get()));
  core->session->mark_active();
  int64_t generated = 0;
  const double sampled_at = now_seconds();
  for (size_t i = 0; i < segs.size(); ++i) {
    Seq& s = *seg_seq[i];
    const int vocab = core->config->vocab_size;
    if (segs[i].all_logits != nullptr) {  // this prompt chunk's logprobs
      const std::span<const int> prompt(s.tokens.data(), static_cast<size_t>(s.prompt_len));
      add_prompt_logprobs(segs[i].all_logits, vocab, prompt, s.cached, segs[i].n, s.req.prompt_logprobs,
                          &s.prompt_logprobs);
      if (s.cached + segs[i].n >= s.prompt_len) s.chunk_logits = {};  // prompt done: free the rows
    }
    s.cached += segs[i].n;
    manager(s).commit(s.id, s.tokens, s.cached);  // full blocks join the prefix cache
    if (segs[i].logits == nullptr) continue;
    if (s.first_token_at == 0) s.first_token_at = sampled_at;
    s.last_token_at = sampled_at;
    // Logprobs are of the raw logits: the grammar's mask (like the penalties) is not in them.
    if (s.json && s.req.logprobs >= 0) s.raw_logits.assign(s.logits.begin(), s.logits.end());
    if (s.json && s.json->mask_logits(s.logits.data(), vocab) == 0) {
      finish(s, "error", "response_format: no token of the vocabulary continues the JSON value");
      continue;
    }
    TokenLogprob lp;
    const int token = s.sampler->sample(s.logits.data(), vocab, &lp);
    if (s.json) s.json->accept(token);
    if (s.req.logprobs >= 0) {
      if (s.json) lp = token_logprob(s.raw_logits.data(), vocab, token, s.req.logprobs);
      s.logprobs.push_back(std::move(lp));
    }
    const bool stop_token = is_stop_token(s.req, token);
    if (stop_token) detokenize(s, /*flush=*/true);  // its own text is not output: the text ends before it
    s.tokens.push_back(token);
    if (!stop_token) detokenize(s, /*flush=*/false);
    ++generated;
  }
  // Finished sequences leave the batch now (their blocks are free for the next step).
  for (auto& sp : running) {
    Seq& s = *sp;
    const int64_t out = static_cast<int64_t>(s.tokens.size()) - s.prompt_len;
    if (static_cast<int64_t>(s.tokens.size()) <= s.prefill_len || s.done) continue;  // prefilling; finished
    const bool stop_token = is_stop_token(s.req, s.tokens.back());
    if (stop_token || (!s.req.ignore_eos && core->config->is_eos(s.tokens.back())) || (s.json && s.json->closed())) {
      finish(s, "stop", {}, stop_token ? s.text.size() : std::string::npos);
      continue;
    }
    bool stopped = false;
    if (!s.req.stop.empty()) {
      const std::string& cont = s.text;
      size_t cut = std::string::npos;
      for (const std::string& stop : s.req.stop) {
        const size_t from = s.emitted >= stop.size() ? s.emitted - stop.size() + 1 : 0;
        const size_t at = cont.find(stop, from);
        if (at != std::string::npos) cut = std::min(cut, at);
      }
      if (cut != std::string::npos) {
        finish(s, "stop", {}, cut);
        stopped = true;
      }
    }
    if (stopped) continue;
    if (out >= s.req.max_tokens) {
      finish(s, "length");
      continue;
    }
    emit(s, false, "");
  }
  std::erase_if(running, [](const std::unique_ptr<Seq>& s) { return s->done; });
  std::lock_guard<std::mutex> lock(snap_mu);
  ++snap.steps;
  if (snap.iteration_tokens.empty()) snap.iteration_tokens.assign(std::size(kIterationTokenBounds) + 1, 0);
  ++snap.iteration_tokens[iteration_bucket(used)];
  snap.iteration_tokens_sum += used;
  snap.prompt_tokens_total += prompt_tokens;
  snap.generation_tokens_total += generated;
  publish_locked();
  return ok_status();
}

void Scheduler::State::record_failover() {
  const EpSessionCounters& c = core->session->counters();
  const int64_t lost = core->failover ? core->failover->lost_now() : 0;
  std::lock_guard<std::mutex> lock(snap_mu);
  if (c.recoveries > snap.failovers) snap.failover_seconds.push_back(c.last_recovery_seconds);
  snap.failovers = c.recoveries;
  snap.ranks_lost = c.ranks_lost;
  snap.lost_experts = lost;
  snap.degraded_tokens = 0;
  for (int l : core->load_stats->layer_ids()) snap.degraded_tokens += core->load_stats->degraded_tokens(l);
}

void Scheduler::State::publish() {
  std::lock_guard<std::mutex> lock(snap_mu);
  publish_locked();
}

void Scheduler::State::publish_locked() {
  snap.running = static_cast<int>(running.size());
  snap.waiting = static_cast<int>(waiting.size());
  snap.kv_blocks_used = 0;
  snap.prefix_cache_queries = snap.prefix_cache_hits = 0;
  for (const auto& m : kvm) {
    snap.kv_blocks_used += m->used_blocks();
    snap.prefix_cache_queries += m->counters().queried_tokens;
    snap.prefix_cache_hits += m->counters().hit_tokens;
  }
  snap.preemptions = preemptions;
  if (disk) {
    const KvDiskTierCounters c = disk->counters();
    snap.kv_disk_hits = c.hits;
    snap.kv_disk_hit_bytes = c.hit_bytes;
    snap.kv_disk_writes = c.writes;
    snap.kv_disk_write_bytes = c.write_bytes;
    snap.kv_disk_rejects = c.rejects;
    snap.kv_disk_write_failures = c.write_failures + c.dropped;
  }
  const EpTimings& ep = core->decoder->ep_timings();
  snap.ep_comm_wait_seconds = ep.comm_wait_seconds;
  snap.ep_exchange_seconds = ep.exchange_seconds;
  snap.comm_overlap_ratio = ep.comm_overlap_ratio();
  const ExpertLoadStats& stats = *core->load_stats;
  for (size_t i = 0; i < snap.moe_layers.size(); ++i) {
    const auto& t = stats.tokens_per_expert(snap.moe_layers[i]);
    snap.expert_tokens[i].assign(t.begin(), t.end());
  }
  snap.adaptive_k_tokens = snap.adaptive_k_shed = snap.requeued = 0;  // adaptive top-k
  for (int l : snap.moe_layers) {
    snap.adaptive_k_tokens += stats.adaptive_tokens(l);
    snap.adaptive_k_shed += stats.adaptive_dropped(l);
    snap.requeued += stats.requeued(l);
  }
  snap.link_bytes_sent.assign(ep.bytes_to_rank.begin(), ep.bytes_to_rank.end());
  snap.link_bytes_received.assign(ep.bytes_from_rank.begin(), ep.bytes_from_rank.end());
}

Status Scheduler::run() {
  State& st = *state_;
  EpSession& session = *st.core->session;
  session.mark_active();
  Status result = ok_status();
  for (;;) {
    std::unordered_set<uint64_t> cancelled;
    bool shutting_down, past_deadline;
    {
      std::unique_lock<std::mutex> lock(st.mu);
      if (st.running.empty() && st.waiting.empty() && st.incoming.empty() && st.cancelled.empty() &&
          !st.shutting_down) {
        // Idle: sleep until a request, a cancel or shutdown arrives.
        st.cv.wait_for(lock, std::chrono::duration<double>(std::min(0.5, st.options.idle_heartbeat_seconds / 2)));
      }
      while (!st.incoming.empty()) {
        st.waiting.push_back(std::move(st.incoming.front()));
        st.incoming.pop_front();
      }
      cancelled.swap(st.cancelled);
      shutting_down = st.shutting_down;
      past_deadline = shutting_down && now_seconds() >= st.shutdown_deadline;
    }
    // Cancelled (client gone) or past the shutdown grace period: abort.
    auto abort_if = [&](std::unique_ptr<Seq>& s) {
      if (past_deadline || cancelled.count(s->id) > 0) {
        st.finish(*s, "abort");
        return true;
      }
      return false;
    };
    std::erase_if(st.running, abort_if);
    std::erase_if(st.waiting, abort_if);
    // Admission, first come first served: the head of the queue waits for KV blocks
    // rather than being overtaken (no starvation of long requests).
    if (st.reset_requested.exchange(false)) {
      for (auto& m : st.kvm) m->reset_prefix_cache();
    }
    while (!st.waiting.empty() && static_cast<int>(st.running.size()) < st.options.max_num_seqs) {
      if (!st.admit(*st.waiting.front())) break;
      st.running.push_back(std::move(st.waiting.front()));
      st.waiting.pop_front();
    }
    st.publish();
    if (st.running.empty()) {
      if (shutting_down && st.waiting.empty()) {
        std::lock_guard<std::mutex> lock(st.mu);
        if (st.incoming.empty()) break;
        continue;
      }
      // Under EP the idle workers hear from rank 0 within the heartbeat period.
      result = session
                   .run_with_failover([&] { return session.heartbeat_if_idle(st.options.idle_heartbeat_seconds); })
                   .with_context("idle heartbeat to the EP workers");
      st.record_failover();
      if (!result.ok()) {
        MOE_LOG_ERROR("scheduler: {}", result.message());
        break;
      }
      continue;
    }
    st.step_started = now_seconds();
    result = session.run_with_failover([&] { return st.step(); }).with_context("engine step");
    st.publish();
    // Live rebalancing every N steps; re-replication after a failover.
    if (result.ok()) result = session.run_with_failover([&] { return session.after_step(); }).with_context("live rebalancing");
    st.record_failover();
    st.step_started = 0;
    if (!result.ok()) {
      MOE_LOG_ERROR("scheduler: engine step failed, failing {} requests: {}", st.running.size() + st.waiting.size(),
                    result.message());
      break;
    }
  }
  if (!result.ok()) {
    const std::string failure = result.message().empty() ? "engine failure" : result.message();
    {
      // Refuse new requests before health() says "failed": a client that sees the
      // failure must not get a request accepted after it.
      std::lock_guard<std::mutex> lock(st.mu);
      st.shutting_down = true;
      st.refusal = "the engine failed: " + failure;
    }
    {
      std::lock_guard<std::mutex> lock(st.snap_mu);
      st.failure = failure;
    }
    for (auto& s : st.running) st.finish(*s, "error", result.message());
    for (auto& s : st.waiting) st.finish(*s, "error", result.message());
    st.running.clear();
    st.waiting.clear();
    std::lock_guard<std::mutex> lock(st.mu);
    for (auto& s : st.incoming) {
      SeqEvent ev;
      ev.finished = true;
      ev.finish_reason = "error";
      ev.error = result.message();
      s->sink(std::move(ev));
    }
    st.incoming.clear();
  }
  st.publish();
  return result;
}

}  // namespace moe
