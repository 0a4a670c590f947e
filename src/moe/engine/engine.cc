#include "moe/engine.h"

#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "moe/core/clock.h"
#include "moe/core/logging.h"
#include "moe/core/mapped_file.h"
#include "moe/transformer/decoder.h"
#include "moe/engine/engine_impl.h"
#include "moe/engine/rebalancer.h"
#include "moe/transformer/kv_cache.h"
#include "moe/engine/sampler.h"
#include "moe/model/hf_checkpoint.h"
#include "moe/model/config.h"
#include "moe/model/tokenizer.h"
#include "moe/model/weights.h"
#include "moe/comm/communicator.h"
#include "moe/model/fingerprint.h"
#include "moe/moe/capacity.h"
#include "moe/runtime/expert_migration.h"
#include "moe/placement/placement_plan.h"
#include "moe/placement/replica_planner.h"
#include "moe/stats/expert_load_stats.h"

namespace moe {

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Adds generation_config.json's eos_token_id(s), as transformers does for generate().
void merge_generation_config(const std::string& dir, ModelConfig* config) {
  auto text = read_text_file(dir + "/generation_config.json");
  if (!text.ok()) return;
  auto j = nlohmann::json::parse(text.value(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) return;
  auto add = [&](const nlohmann::json& v) {
    if (v.is_number_integer()) {
      int id = v.get<int>();
      if (id >= 0 && id < config->vocab_size && !config->is_eos(id)) config->eos_token_ids.push_back(id);
    }
  };
  if (j["eos_token_id"].is_array()) {
    for (const auto& v : j["eos_token_id"]) add(v);
  } else {
    add(j["eos_token_id"]);
  }
}

ModelInfo make_info(const std::string& dir, const ModelConfig& c, const ModelWeights& w, const HfCheckpoint& ckpt) {
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
  info.weight_bytes = ckpt.total_bytes();
  int64_t total = 0;
  for (const auto& shard : ckpt.shards()) {
    for (const auto& [name, view] : shard->tensors()) total += view.numel();
  }
  info.num_parameters = total;
  // Parameters of the routed experts not used by a token: (num_experts - top_k) per
  // MoE layer. Non-expert matrices are all read per decode token.
  int64_t inactive = 0;
  size_t bytes = w.lm_head.bytes() + static_cast<size_t>(c.hidden_size) * dtype_size(w.embed_tokens.dtype);
  const int64_t expert_params = static_cast<int64_t>(c.moe_intermediate_size) * c.hidden_size * 3;
  const size_t expert_bytes = static_cast<size_t>(expert_params) * dtype_size(w.embed_tokens.dtype);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l)];
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


}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

namespace {

// Per-layer placements from a plan file (`moe placement plan`): one plan layer per MoE
// layer, for this many ranks and experts.
Status apply_placement_file(const std::string& path, Engine::Impl* impl) {
  MOE_ASSIGN_OR_RETURN(PlacementPlan plan, load_plan_file(path));
  const ModelConfig& c = impl->config;
  const int R = impl->comm->size();
  if (plan.num_ranks != R) {
    return invalid_argument(path + ": the plan is for " + std::to_string(plan.num_ranks) + " ranks, but " +
                            std::to_string(R) + " are running");
  }
  if (plan.num_experts != c.router.num_experts) {
    return invalid_argument(path + ": the plan places " + std::to_string(plan.num_experts) + " experts, the model has " +
                            std::to_string(c.router.num_experts));
  }
  std::vector<bool> covered(static_cast<size_t>(c.num_hidden_layers), false);
  for (const LayerPlan& lp : plan.layers) {
    if (lp.layer >= c.num_hidden_layers || !c.is_moe_layer(lp.layer)) {
      return invalid_argument(path + ": plan layer " + std::to_string(lp.layer) + " is not an MoE layer of the model");
    }
    MOE_ASSIGN_OR_RETURN(impl->ep[static_cast<size_t>(lp.layer)].placement,
                         ExpertPlacement::from_rank_slots(lp.rank_slots, c.router.num_experts));
    covered[static_cast<size_t>(lp.layer)] = true;
  }
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer(l) && !covered[static_cast<size_t>(l)]) {
      return invalid_argument(path + ": the plan has no entry for MoE layer " + std::to_string(l));
    }
  }
  return ok_status();
}

// Loads everything this rank needs; no communication.
Status open_local(const EngineOptions& options, Engine::Impl* impl) {
  const std::string& dir = options.model_dir;
  if (!is_directory(dir)) return not_found("model directory not found: " + dir);
  MOE_ASSIGN_OR_RETURN(impl->config, load_model_config(dir));
  merge_generation_config(dir, &impl->config);
  if (impl->config.family == ModelFamily::kDeepseekV3) {
    return unimplemented(dir + "/config.json: model_type 'deepseek_v3' is parsed (its router is supported) but "
                         "Multi-head Latent Attention is not implemented yet, so the model cannot run");
  }
  MOE_ASSIGN_OR_RETURN(impl->capacity.policy, parse_overflow_policy(options.overflow_policy));
  impl->capacity.capacity_factor = options.capacity_factor;
  MOE_RETURN_IF_ERROR(validate_capacity_options(impl->capacity));
  std::vector<int> moe_layers;
  for (int l = 0; l < impl->config.num_hidden_layers; ++l) {
    if (impl->config.is_moe_layer(l)) moe_layers.push_back(l);
  }
  MOE_ASSIGN_OR_RETURN(ExpertLoadStats stats,
                       ExpertLoadStats::create(moe_layers, impl->config.router.num_experts, options.stats_ema_decay));
  impl->load_stats = std::make_unique<ExpertLoadStats>(std::move(stats));
  MOE_ASSIGN_OR_RETURN(impl->checkpoint, HfCheckpoint::open(dir));
  ExpertFilter filter;
  if (impl->comm != nullptr) {
    if (impl->config.router.num_experts < 1) return invalid_argument("model has no experts to shard");
    EpContext ctx;
    ctx.comm = impl->comm;
    ctx.placement = ExpertPlacement::contiguous(impl->config.router.num_experts, impl->comm->size());
    ctx.options.overlap = options.ep_overlap;
    ctx.options.a2a_bf16 = options.a2a_bf16;
    ctx.options.hierarchical =
        options.a2a_hierarchical == 1 || (options.a2a_hierarchical < 0 && impl->comm->num_nodes() > 1);
    ctx.options.max_nodes_per_token = options.max_nodes_per_token;
    ctx.options.capacity = impl->capacity;
    impl->ep.assign(static_cast<size_t>(impl->config.num_hidden_layers), ctx);
    if (!options.placement_file.empty()) MOE_RETURN_IF_ERROR(apply_placement_file(options.placement_file, impl));
    const int me = impl->comm->rank();
    const std::vector<EpContext>* layers = &impl->ep;
    filter = [layers, me](int layer, int expert) {
      return (*layers)[static_cast<size_t>(layer)].placement.holds(me, expert);
    };
  }
  MOE_ASSIGN_OR_RETURN(impl->weights, bind_weights(impl->config, impl->checkpoint, filter));
  MOE_ASSIGN_OR_RETURN(impl->tokenizer, Tokenizer::load(dir));
  if (impl->tokenizer->vocab_size() > impl->config.vocab_size) {
    return invalid_argument(dir + "/tokenizer.model has " + std::to_string(impl->tokenizer->vocab_size()) +
                            " pieces, more than config.json vocab_size " +
                            std::to_string(impl->config.vocab_size));
  }
  return ok_status();
}

// All ranks agree that every rank loaded, and loaded the same model. Collective.
Status agree_on_startup(Communicator& comm, const Status& local, uint64_t fingerprint) {
  const int n = comm.size();
  int64_t mine[2] = {local.ok() ? 1 : 0, static_cast<int64_t>(fingerprint)};
  std::vector<int64_t> all(static_cast<size_t>(2 * n));
  MOE_RETURN_IF_ERROR(comm.allgather(mine, sizeof(mine), all.data()).with_context("start-up check"));
  if (!local.ok()) return local;
  std::string failed;
  for (int r = 0; r < n; ++r) {
    if (all[static_cast<size_t>(2 * r)] == 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!failed.empty()) return failed_precondition("rank(s) " + failed + " failed to load the model (see their errors)");
  for (int r = 1; r < n; ++r) {
    if (all[static_cast<size_t>(2 * r + 1)] != all[1]) {
      return failed_precondition("rank " + std::to_string(r) + " loaded a different model than rank 0 (config/weights "
                                 "fingerprint " + std::to_string(static_cast<uint64_t>(all[static_cast<size_t>(2 * r + 1)])) +
                                 " vs " + std::to_string(static_cast<uint64_t>(all[1])) +
                                 "): start every rank with the same model files");
    }
  }
  return ok_status();
}

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options) {
  if (options.num_threads > 0) omp_set_num_threads(options.num_threads);
  auto impl = std::make_unique<Impl>();
  impl->comm = options.comm;
  Status local = open_local(options, impl.get());
  if (impl->comm != nullptr) {
    const uint64_t fp = local.ok() ? model_fingerprint(options.model_dir, impl->weights, impl->checkpoint) : 0;
    Status agreed = agree_on_startup(*impl->comm, local, fp);
    if (!agreed.ok()) {
      impl->workers_stopped = true;  // nobody will run the step loop
      return agreed;
    }
  } else if (!local.ok()) {
    return local;
  }
  const std::string& dir = options.model_dir;
  impl->decoder = std::make_unique<Decoder>(
      impl->config, impl->weights,
      DecoderOptions{impl->comm ? &impl->ep : nullptr, KernelOptions{options.batch_invariant}});
  impl->decoder->set_capacity(impl->capacity);
  impl->rebalance_every = options.rebalance_every;
  impl->slots_per_rank = options.slots_per_rank;
  impl->replica_cap = options.replica_cap;
  impl->rebalance_min_gain = options.rebalance_min_gain;
  impl->faults.corrupt_on_rank = options.test_corrupt_migration_rank;
  ExpertLoadStats* stats = impl->load_stats.get();
  impl->decoder->set_routing_hook([stats](int layer, const StepRoutingCounts& counts) {
    stats->record_step(layer, counts.tokens_per_expert.data(), counts.dropped, counts.rerouted);
  });
  if (impl->comm != nullptr && impl->comm->rank() == 0) {
    Communicator* comm = impl->comm;
    impl->decoder->set_chunk_hook([comm](int64_t m) {
      int64_t header[2] = {kEpHeaderStep, m};
      return comm->broadcast(header, sizeof(header), 0);
    });
  }
  impl->info = make_info(dir, impl->config, impl->weights, impl->checkpoint);
  MOE_LOG_INFO("loaded {} ({}): {} layers, {} experts (top-{}), {:.2f}M parameters ({:.2f}M active), {:.1f} MB",
               dir, impl->config.model_type, impl->config.num_hidden_layers, impl->config.router.num_experts,
               impl->config.router.top_k, impl->info.num_parameters / 1e6, impl->info.num_active_parameters / 1e6,
               impl->info.weight_bytes / 1e6);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Status Engine::run_worker() {
  Communicator* comm = impl_->comm;
  if (comm == nullptr || comm->rank() == 0) return failed_precondition("run_worker() is for ranks other than 0 under EP");
  for (;;) {
    int64_t header[2] = {0, 0};
    MOE_RETURN_IF_ERROR(comm->broadcast(header, sizeof(header), 0));
    if (header[0] == kEpHeaderStop) return ok_status();
    if (header[0] == kEpHeaderIdle) continue;
    if (header[0] == kEpHeaderRebalance) {
      // A failed migration leaves the old plan in force on every rank; only a broken
      // communicator ends the loop.
      Status st = rebalance(impl_.get());
      if (!st.ok() && (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded)) return st;
      continue;
    }
    MOE_RETURN_IF_ERROR(impl_->decoder->forward_chunk(nullptr, 0, 0, nullptr, nullptr));
  }
}

Status Engine::stop_workers() {
  Communicator* comm = impl_->comm;
  if (comm == nullptr || comm->rank() != 0 || impl_->workers_stopped) return ok_status();
  impl_->workers_stopped = true;
  int64_t header[2] = {0, 0};
  return comm->broadcast(header, sizeof(header), 0);
}

Engine::EpStats Engine::ep_stats() const {
  const EpTimings& t = impl_->decoder->ep_timings();
  Engine::EpStats s = impl_->rebalance_stats;
  s.comm_wait_seconds = t.comm_wait_seconds;
  s.compute_seconds = t.compute_seconds;
  s.exchange_seconds = t.exchange_seconds;
  s.calls = t.calls;
  s.bytes_sent = t.bytes_sent;
  return s;
}

const ExpertLoadStats& Engine::expert_load_stats() const { return *impl_->load_stats; }
void Engine::clear_expert_load_stats() { impl_->load_stats->clear(); }

const ModelInfo& Engine::info() const { return impl_->info; }
void Engine::set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }
std::vector<int> Engine::tokenize(const std::string& text) const { return impl_->tokenizer->encode(text); }
std::string Engine::detokenize(const std::vector<int>& ids) const { return impl_->tokenizer->decode(ids); }

Status validate_sampling(const SamplingParams& sp) {
  if (!(sp.temperature >= 0.0f) || !std::isfinite(sp.temperature)) {
    return invalid_argument("temperature must be a finite number >= 0 (got " + std::to_string(sp.temperature) + ")");
  }
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f)) {
    return invalid_argument("top_p must be in (0, 1] (got " + std::to_string(sp.top_p) + ")");
  }
  if (sp.top_k < 0) return invalid_argument("top_k must be >= 0 (got " + std::to_string(sp.top_k) + ")");
  return ok_status();
}

StatusOr<std::vector<int>> prompt_tokens(const Engine::Impl& impl, const std::string& prompt,
                                         const std::vector<int>& ids) {
  std::vector<int> tokens;
  if (!ids.empty()) {
    tokens = ids;
  } else {
    if (prompt.empty()) return invalid_argument("prompt is empty");
    tokens = impl.tokenizer->encode(prompt);
  }
  const int vocab = impl.config.vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return invalid_argument("prompt token id " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return tokens;
}

size_t unstable_suffix(const std::string& s) {
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0) return 3;
  return 0;
}

StatusOr<GenerateResult> Engine::generate(const GenerateRequest& req, const TokenCallback& on_token) {
  const ModelConfig& c = impl_->config;
  const SamplingParams& sp = req.sampling;
  MOE_RETURN_IF_ERROR(validate_sampling(sp));
  if (req.max_tokens < 0) {
    return invalid_argument("max_tokens must be >= 0 (got " + std::to_string(req.max_tokens) + ")");
  }
  GenerateResult result;
  MOE_ASSIGN_OR_RETURN(result.prompt_token_ids, prompt_tokens(*impl_, req.prompt, req.prompt_token_ids));
  const auto& prompt = result.prompt_token_ids;
  const int64_t context = c.max_position_embeddings;
  const int64_t needed = static_cast<int64_t>(prompt.size()) + req.max_tokens;
  if (needed > context) {
    return failed_precondition("prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                               std::to_string(req.max_tokens) + ") = " + std::to_string(needed) +
                               " exceeds the model's context of " + std::to_string(context) + " tokens");
  }

  const uint64_t seed = sp.seed ? *sp.seed : std::random_device{}();
  Sampler sampler(sp.temperature, sp.top_k, sp.top_p, seed);
  KVCache cache(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, std::max<int64_t>(needed, 1));
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));

  const double t0 = now_seconds();
  if (impl_->comm != nullptr && impl_->comm->rank() != 0) {
    return failed_precondition("under expert parallelism only rank 0 generates; other ranks call run_worker()");
  }
  MOE_RETURN_IF_ERROR(
      impl_->decoder->forward(prompt.data(), static_cast<int64_t>(prompt.size()), 0, &cache, logits.data()));
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
    const int token = sampler.sample(logits.data(), c.vocab_size);
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
    MOE_RETURN_IF_ERROR(impl_->decoder->forward(&token, 1, pos, &cache, logits.data()));
    ++pos;
    if (impl_->rebalance_every > 0 && impl_->comm != nullptr && ++impl_->decode_steps % impl_->rebalance_every == 0) {
      int64_t header[2] = {kEpHeaderRebalance, 0};
      MOE_RETURN_IF_ERROR(impl_->comm->broadcast(header, sizeof(header), 0));
      Status st = rebalance(impl_.get());
      if (!st.ok() && (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded)) return st;
    }
  }
  result.decode_seconds = now_seconds() - t1;
  const std::string full = impl_->tokenizer->decode(all);
  result.text = full.compare(0, prompt_text.size(), prompt_text) == 0 ? full.substr(prompt_text.size())
                                                                       : impl_->tokenizer->decode(result.output_token_ids);
  return result;
}

}  // namespace moe
