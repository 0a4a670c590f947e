// moe info: what a model is, from its config.json alone (no weights are read): the family,
// the architecture fields that matter, parameters by component (total and active per
// token; moe/model/model_size.h) and the KV cache per token and per 4096-token sequence.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moe/model/config.h"
#include "moe/model/model_size.h"

namespace moe::cli {
namespace {

constexpr int64_t kSequence = 4096;  // tokens, for the per-sequence KV figure

struct InfoFlags {
  std::string model;
  bool json = false;
};

StatusOr<ModelConfig> load_config(const std::string& path) {
  if (path.empty()) return invalid_argument("--model is empty; give a model directory or a config.json file");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_model_config(path);
  if (!std::filesystem::exists(path, ec)) return not_found(path + ": no such file or directory");
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return not_found(path + ": cannot open");
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (64u << 20)) text.append(buf, n);
  std::fclose(f);
  return parse_model_config(text, path);
}

const char* family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::kMixtral:
      return "mixtral";
    case ModelFamily::kQwen2Moe:
      return "qwen2_moe";
    case ModelFamily::kQwen3Moe:
      return "qwen3_moe";
    case ModelFamily::kDeepseekV2:
      return "deepseek_v2";
    case ModelFamily::kDeepseekV3:
      return "deepseek_v3";
  }
  return "?";
}

const char* scaling_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::kNone:
      return "none";
    case RopeScaling::Type::kLinear:
      return "linear";
    case RopeScaling::Type::kYarn:
      return "yarn";
  }
  return "?";
}

const char* topk_name(RouterConfig::TopkMethod m) {
  switch (m) {
    case RouterConfig::TopkMethod::kGreedy:
      return "greedy";
    case RouterConfig::TopkMethod::kGroupLimited:
      return "group_limited_greedy";
    case RouterConfig::TopkMethod::kNoauxTc:
      return "noaux_tc";
  }
  return "?";
}

nlohmann::json breakdown_json(const ParamBreakdown& p) {
  return {{"embedding", p.embedding},         {"attention", p.attention},
          {"dense_mlp", p.dense_mlp},         {"router", p.router},
          {"routed_experts", p.routed_experts}, {"shared_experts", p.shared_experts},
          {"lm_head", p.lm_head},             {"norms", p.norms},
          {"sum", p.sum()},                   {"sum_excluding_embedding", p.sum_excluding_embedding()}};
}

nlohmann::json to_json(const std::string& path, const ModelConfig& c, const ModelSize& s) {
  nlohmann::json arch = {{"hidden_size", c.hidden_size},
                         {"num_hidden_layers", c.num_hidden_layers},
                         {"num_moe_layers", c.num_moe_layers()},
                         {"num_attention_heads", c.num_attention_heads},
                         {"num_key_value_heads", c.num_key_value_heads},
                         {"head_dim", c.head_dim},
                         {"vocab_size", c.vocab_size},
                         {"max_position_embeddings", c.max_position_embeddings},
                         {"intermediate_size", c.intermediate_size},
                         {"moe_intermediate_size", c.moe_intermediate_size},
                         {"shared_expert_intermediate_size", c.shared_expert_intermediate_size},
                         {"num_experts", c.router.num_experts},
                         {"top_k", c.router.top_k},
                         {"scoring", c.router.scoring == RouterConfig::Scoring::kSigmoid ? "sigmoid" : "softmax"},
                         {"topk_method", topk_name(c.router.topk_method)},
                         {"n_group", c.router.n_group},
                         {"topk_group", c.router.topk_group},
                         {"routed_scaling_factor", c.router.routed_scaling_factor},
                         {"rope_theta", c.rope_theta},
                         {"rope_scaling", scaling_name(c.rope_scaling.type)},
                         {"rope_factor", c.rope_scaling.factor},
                         {"rope_interleave", c.rope_interleave},
                         {"fp8", c.fp8.enabled},
                         {"num_nextn_predict_layers", c.num_nextn_predict_layers}};
  if (c.mla.enabled()) {
    arch["mla"] = {{"q_lora_rank", c.mla.q_lora_rank},
                   {"kv_lora_rank", c.mla.kv_lora_rank},
                   {"qk_nope_head_dim", c.mla.qk_nope_head_dim},
                   {"qk_rope_head_dim", c.mla.qk_rope_head_dim},
                   {"v_head_dim", c.mla.v_head_dim}};
  }
  const int64_t kv = s.kv_values_per_token(), naive = s.naive_kv_values_per_token();
  nlohmann::json kvj = {{"latent", s.latent_kv},
                        {"values_per_token_per_layer", s.kv_values_per_token_layer},
                        {"values_per_token", kv},
                        {"f32_bytes_per_token", kv * 4},
                        {"bf16_bytes_per_token", kv * 2},
                        {"f32_bytes_per_4096_tokens", kv * 4 * kSequence},
                        {"bf16_bytes_per_4096_tokens", kv * 2 * kSequence},
                        {"naive_values_per_token_per_layer", s.naive_kv_values_per_token_layer},
                        {"naive_f32_bytes_per_token", naive * 4},
                        {"naive_bf16_bytes_per_token", naive * 2}};
  return {{"model", path},
          {"model_type", c.model_type},
          {"family", family_name(c.family)},
          {"attention", c.mla.enabled() ? "mla" : "gqa"},
          {"architecture", arch},
          {"params",
           {{"total", breakdown_json(s.total)},
            {"active_per_token", breakdown_json(s.active)},
            {"mtp", s.mtp_params},
            {"fp8_scales", s.fp8_scale_params},
            {"checkpoint", s.checkpoint_params()}}},
          {"kv_cache", kvj}};
}

std::string human(double n) {  // 1234567 -> "1.23M"
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (n >= 1000 && u < 4) {
    n /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.2f%s", n, units[u]);
  return buf;
}

std::string bytes(double b) {  // binary units
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

void print_text(const std::string& path, const ModelConfig& c, const ModelSize& s) {
  std::printf("model: %s\n", path.c_str());
  std::printf("family: %s (model_type %s), %s attention\n", family_name(c.family), c.model_type.c_str(),
              c.mla.enabled() ? "MLA" : "GQA");
  std::printf("layers: %d (%d MoE, %d dense), hidden %d, vocab %d, context %d\n", c.num_hidden_layers,
              c.num_moe_layers(), c.num_hidden_layers - c.num_moe_layers(), c.hidden_size, c.vocab_size,
              c.max_position_embeddings);
  if (c.mla.enabled()) {
    std::printf("attention: %d heads, MLA q_lora_rank %d, kv_lora_rank %d, qk_nope %d, qk_rope %d, v %d\n",
                c.num_attention_heads, c.mla.q_lora_rank, c.mla.kv_lora_rank, c.mla.qk_nope_head_dim,
                c.mla.qk_rope_head_dim, c.mla.v_head_dim);
  } else {
    std::printf("attention: %d heads, %d KV heads, head_dim %d\n", c.num_attention_heads, c.num_key_value_heads,
                c.head_dim);
  }
  std::printf("experts: %d routed, top-%d, width %d; shared width %d; dense width %d\n", c.router.num_experts,
              c.router.top_k, c.moe_intermediate_size, c.shared_expert_intermediate_size, c.intermediate_size);
  std::printf("router: %s, %s, n_group %d, topk_group %d, norm_topk_prob %s, routed_scaling_factor %g\n",
              c.router.scoring == RouterConfig::Scoring::kSigmoid ? "sigmoid" : "softmax",
              topk_name(c.router.topk_method), c.router.n_group, c.router.topk_group,
              c.router.norm_topk_prob ? "true" : "false", c.router.routed_scaling_factor);
  std::printf("rope: theta %g, scaling %s (factor %g), %s\n", c.rope_theta, scaling_name(c.rope_scaling.type),
              c.rope_scaling.factor, c.rope_interleave ? "interleaved" : "rotate_half");
  if (c.fp8.enabled) std::printf("weights: fp8 e4m3, %dx%d blocks\n", c.fp8.block_rows, c.fp8.block_cols);
  std::printf("\n%-26s %16s %16s\n", "parameters", "total", "active/token");
  auto row = [](const char* name, int64_t t, int64_t a) {
    std::printf("%-26s %16lld %16lld  (%s / %s)\n", name, static_cast<long long>(t), static_cast<long long>(a),
                human(static_cast<double>(t)).c_str(), human(static_cast<double>(a)).c_str());
  };
  row("embedding", s.total.embedding, s.active.embedding);
  row("attention", s.total.attention, s.active.attention);
  row("dense MLP", s.total.dense_mlp, s.active.dense_mlp);
  row("router", s.total.router, s.active.router);
  row("routed experts", s.total.routed_experts, s.active.routed_experts);
  row("shared experts", s.total.shared_experts, s.active.shared_experts);
  row("lm_head", s.total.lm_head, s.active.lm_head);
  row("norms", s.total.norms, s.active.norms);
  row("sum", s.total.sum(), s.active.sum());
  row("sum excluding embedding", s.total.sum_excluding_embedding(), s.active.sum_excluding_embedding());
  if (s.mtp_params > 0 || s.fp8_scale_params > 0) {
    std::printf("checkpoint only: MTP modules %s (num_nextn_predict_layers %d, not run), fp8 scale_inv %s\n",
                human(static_cast<double>(s.mtp_params)).c_str(), c.num_nextn_predict_layers,
                human(static_cast<double>(s.fp8_scale_params)).c_str());
    std::printf("HF checkpoint total: %lld (%s)\n", static_cast<long long>(s.checkpoint_params()),
                human(static_cast<double>(s.checkpoint_params())).c_str());
  }
  const double kv = static_cast<double>(s.kv_values_per_token());
  std::printf("\nKV cache per token: %lld values per layer (%s) x %lld layers = %lld values: f32 %s, bf16 %s\n",
              static_cast<long long>(s.kv_values_per_token_layer),
              s.latent_kv ? "latent c_kv + k_rope" : "2 x kv_heads x head_dim", static_cast<long long>(s.num_layers),
              static_cast<long long>(s.kv_values_per_token()), bytes(kv * 4).c_str(), bytes(kv * 2).c_str());
  std::printf("KV cache per %lld-token sequence: f32 %s, bf16 %s\n", static_cast<long long>(kSequence),
              bytes(kv * 4 * kSequence).c_str(), bytes(kv * 2 * kSequence).c_str());
  if (s.latent_kv) {
    const double naive = static_cast<double>(s.naive_kv_values_per_token());
    std::printf("a per-head K/V cache would hold %lld values per layer: f32 %s per token, %s per sequence (%.1fx)\n",
                static_cast<long long>(s.naive_kv_values_per_token_layer), bytes(naive * 4).c_str(),
                bytes(naive * 4 * kSequence).c_str(), naive / kv);
  }
}

}  // namespace

RunFn add_info_command(CLI::App& app) {
  auto f = std::make_shared<InfoFlags>();
  app.add_option("--model", f->model, "Model directory (its config.json) or a config.json file")->required();
  app.add_flag("--json", f->json, "Print one JSON object instead of the table");
  return [f] {
    auto c = load_config(f->model);
    if (!c.ok()) return fail(c.status().message());
    const ModelSize s = compute_model_size(*c);
    if (f->json) {
      std::printf("%s\n", to_json(f->model, *c, s).dump(2).c_str());
    } else {
      print_text(f->model, *c, s);
    }
    return 0;
  };
}

}  // namespace moe::cli
