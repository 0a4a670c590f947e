// Engine: generation on one sequence (generate), the EP worker API and accessors.
// Loading is in engine_open.cc, request checks in request_validation.cc.
#include "moe/engine.h"

#include <omp.h>

#include <algorithm>
#include <random>

#include "moe/core/clock.h"
#include "moe/core/logging.h"
#include "moe/engine/detokenizer.h"
#include "moe/engine/engine_impl.h"
#include "moe/engine/request_validation.h"
#include "moe/engine/logits_processor.h"
#include "moe/trace/trace_gather.h"
#include "moe/transformer/kv_cache.h"

namespace moe {

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  // Shutdown is explicit (stop_workers()); a destructor does not talk on the communicator.
  if (impl_->comm != nullptr && impl_->comm->rank() == 0 && !impl_->session->workers_stopped()) {
    MOE_LOG_WARN("engine closed on rank 0 without stop_workers(): the other ranks wait until their "
                 "communicator times out");
  }
}

Status Engine::run_worker() { return impl_->session->run_worker(); }
Status Engine::stop_workers() { return impl_->session->stop_workers(); }

Status Engine::write_trace() {
  if (impl_->trace == nullptr) return ok_status();
  return write_trace_file(impl_->comm, *impl_->trace, impl_->trace_path);
}

EngineCore& Engine::core() { return impl_->core; }

Engine::EpStats Engine::ep_stats() const {
  const EpTimings& t = impl_->decoder->ep_timings();
  Engine::EpStats s;
  s.comm_wait_seconds = t.comm_wait_seconds;
  s.compute_seconds = t.compute_seconds;
  s.exchange_seconds = t.exchange_seconds;
  s.comm_overlap_ratio = t.comm_overlap_ratio();
  s.calls = t.calls;
  s.bytes_sent = t.bytes_sent;
  s.bytes_to_rank = t.bytes_to_rank;
  s.bytes_from_rank = t.bytes_from_rank;
  s.rank = impl_->ep_comm != nullptr ? impl_->ep_comm->rank() : 0;
  if (impl_->rebalancer != nullptr) {
    const RebalanceStats& r = impl_->rebalancer->stats();
    s.rebalances = r.rebalances;
    s.rebalance_failures = r.rebalance_failures;
    s.experts_moved = r.experts_moved;
    s.rebalances_skipped = r.rebalances_skipped;
    s.rebalance_seconds = r.rebalance_seconds;
  }
  return s;
}

const ExpertLoadStats& Engine::expert_load_stats() const { return *impl_->load_stats; }
void Engine::clear_expert_load_stats() { impl_->load_stats->clear(); }

const ModelInfo& Engine::info() const { return impl_->info; }

ModelInfo make_info(const std::string& dir, const ModelConfig& c, const ModelWeights& w, const ModelSource& source) {
  ModelInfo info;
  info.model_dir = dir;
  info.model_type = c.model_type;
  info.vocab_size = c.vocab_size;
  info.hidden_size = c.hidden_size;
  info.num_layers = c.num_hidden_layers;
  info.num_experts = c.router.num_experts;
  info.top_k = c.router.top_k;
  info.num_moe_layers = c.num_moe_layers();
  info.max_context = c.max_position_embeddings;
  info.weight_bytes = source.total_bytes();
  int64_t total = 0;
  for (const TensorInfo& t : source.tensor_infos()) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    total += n;
  }
  info.num_parameters = total;
  // Parameters of the routed experts not used by a token: (num_experts - top_k) per
  // MoE layer. Non-expert matrices are all read per decode token.
  int64_t inactive = 0;
  size_t bytes = w.lm_head.bytes() + static_cast<size_t>(c.hidden_size) * dtype_size(w.embed_tokens.dtype);
  const int64_t expert_params = static_cast<int64_t>(c.moe_intermediate_size) * c.hidden_size * 3;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
    // An expert's bytes as held (FP8 with its scales, or dequantised); the embedding's
    // dtype if this rank holds none of the layer's.
    size_t expert_bytes = static_cast<size_t>(expert_params) * dtype_size(w.embed_tokens.dtype);
    for (const ExpertWeights& e : L.experts) {
      if (e.loaded) {
        expert_bytes = e.bytes();
        break;
      }
    }
    bytes += L.q_proj.bytes() + L.k_proj.bytes() + L.v_proj.bytes() + L.o_proj.bytes();
    if (!c.is_moe_layer(l)) {
      bytes += L.dense_mlp.bytes();
      continue;
    }
    inactive += static_cast<int64_t>(c.router.num_experts - c.router.top_k) * expert_params;
    bytes += L.router.bytes() + L.shared_expert.bytes() + L.shared_expert_gate.bytes() +
             static_cast<size_t>(c.router.top_k) * expert_bytes;
  }
  info.num_active_parameters = total - inactive;
  // Bytes streamed per decode token: every non-expert matrix, top_k experts per MoE
  // layer, the lm_head, one embedding row. (Norm vectors and biases are negligible.)
  info.decode_bytes_per_token = bytes;
  return info;
}
void Engine::set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }
std::vector<int> Engine::tokenize(const std::string& text) const { return impl_->tokenizer->encode(text); }
std::string Engine::detokenize(const std::vector<int>& ids) const { return impl_->tokenizer->decode(ids); }

StatusOr<GenerateResult> Engine::generate(const GenerateRequest& req, const TokenCallback& on_token) {
  const ModelConfig& c = impl_->config;
  const SamplingParams& sp = req.sampling;
  static const std::vector<std::string> kNoStop;
  static const std::vector<int> kNoStopTokens;
  const RequestFields fields{.prompt = req.prompt,
                             .prompt_token_ids = req.prompt_token_ids,
                             .max_tokens = req.max_tokens,
                             .sampling = sp,
                             .stop = kNoStop,
                             .stop_token_ids = kNoStopTokens,
                             .logprobs = -1,
                             .prompt_logprobs = -1};
  const RequestLimits limits{.tokenizer = impl_->tokenizer.get(),
                             .vocab_size = c.vocab_size,
                             .max_context = c.max_position_embeddings,
                             .min_max_tokens = 0};
  GenerateResult result;
  MOE_ASSIGN_OR_RETURN(result.prompt_token_ids, validate_request(fields, limits));
  const auto& prompt = result.prompt_token_ids;
  const int64_t needed = static_cast<int64_t>(prompt.size()) + req.max_tokens;

  const uint64_t seed = sp.seed ? *sp.seed : std::random_device{}();
  RequestSampler sampler(sp, seed, prompt);
  // Under TP: this rank's heads.
  const KvCacheShape kv = kv_cache_shape(impl_->run_config(), impl_->kv_dtype);
  KVCache cache(c.num_hidden_layers, kv, std::max<int64_t>(needed, 1));
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));

  const double t0 = now_seconds();
  if (!impl_->session->is_leader()) {
    return failed_precondition("under expert parallelism only rank 0 generates; other ranks call run_worker()");
  }
  EpSession& session = *impl_->session;
  MOE_RETURN_IF_ERROR(session.run_with_failover([&] {
    return impl_->decoder->forward(prompt.data(), static_cast<int64_t>(prompt.size()), 0, &cache, logits.data());
  }));
  const double t1 = now_seconds();
  result.prefill_seconds = t1 - t0;
  if (req.return_prompt_logits) result.prompt_logits = logits;

  // The prompt as decoded text: continuations are cut from decode(prompt + output), so
  // the first word keeps its leading space (as vLLM's incremental detokenizer does).
  const std::string prompt_text = impl_->tokenizer->decode(prompt);
  size_t emitted = 0;  // bytes of the continuation already streamed
  std::vector<int> all = prompt;
  result.finish_reason = "length";
  int64_t pos = static_cast<int64_t>(prompt.size());
  for (int i = 0; i < req.max_tokens; ++i) {
    const int token = sampler.sample(logits.data(), c.vocab_size);  // processes `logits` in place
    result.output_token_ids.push_back(token);
    all.push_back(token);
    const bool eos = !req.ignore_eos && c.is_eos(token);
    bool keep_going = true;
    if (on_token) {
      std::string full = impl_->tokenizer->decode(all);
      std::string cont = full.size() >= prompt_text.size() ? full.substr(prompt_text.size()) : std::string();
      const size_t stable = (eos || i + 1 == req.max_tokens) ? cont.size() : cont.size() - unstable_suffix(cont);
      std::string delta = stable > emitted ? cont.substr(emitted, stable - emitted) : std::string();
      emitted = std::max(emitted, stable);
      keep_going = on_token(token, delta);
    }
    if (eos) {
      result.finish_reason = "stop";
      break;
    }
    if (!keep_going || i + 1 == req.max_tokens) break;
    MOE_RETURN_IF_ERROR(
        session.run_with_failover([&] { return impl_->decoder->forward(&token, 1, pos, &cache, logits.data()); }));
    ++pos;
    // Live rebalancing every N decode steps; re-replication after a failover.
    MOE_RETURN_IF_ERROR(session.run_with_failover([&] { return session.after_step(); }));
  }
  result.decode_seconds = now_seconds() - t1;
  const std::string full = impl_->tokenizer->decode(all);
  result.text = full.compare(0, prompt_text.size(), prompt_text) == 0 ? full.substr(prompt_text.size())
                                                                       : impl_->tokenizer->decode(result.output_token_ids);
  return result;
}

}  // namespace moe
