#include "moe/model/config.h"

#include <algorithm>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "moe/core/mapped_file.h"

namespace moe {
namespace {

using nlohmann::json;

// Small helpers that read one field and produce messages naming it.
class FieldReader {
 public:
  FieldReader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  Status get_int(const char* field, int* out, bool required, int min_value = 1) const {
    if (!j_.contains(field) || j_[field].is_null()) {
      if (required) return invalid_argument(source_ + ": required field '" + field + "' is missing");
      return ok_status();
    }
    const json& v = j_[field];
    if (!v.is_number_integer() || v.get<int64_t>() < min_value || v.get<int64_t>() > (1ll << 30)) {
      return invalid_argument(source_ + ": field '" + field + "' must be an integer >= " +
                              std::to_string(min_value) + " (got " + v.dump() + ")");
    }
    *out = static_cast<int>(v.get<int64_t>());
    return ok_status();
  }

  Status get_double(const char* field, double* out, bool positive) const {
    if (!j_.contains(field) || j_[field].is_null()) return ok_status();
    const json& v = j_[field];
    if (!v.is_number() || (positive && !(v.get<double>() > 0))) {
      return invalid_argument(source_ + ": field '" + field + "' must be a " +
                              (positive ? "positive " : "") + "number (got " + v.dump() + ")");
    }
    *out = v.get<double>();
    return ok_status();
  }

  Status get_bool(const char* field, bool* out) const {
    if (!j_.contains(field) || j_[field].is_null()) return ok_status();
    if (!j_[field].is_boolean()) {
      return invalid_argument(source_ + ": field '" + field + "' must be true or false (got " +
                              j_[field].dump() + ")");
    }
    *out = j_[field].get<bool>();
    return ok_status();
  }

  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_;
};

Status parse_common(const json& j, const FieldReader& r, ModelConfig* c) {
  MOE_RETURN_IF_ERROR(r.get_int("vocab_size", &c->vocab_size, true));
  MOE_RETURN_IF_ERROR(r.get_int("hidden_size", &c->hidden_size, true));
  MOE_RETURN_IF_ERROR(r.get_int("intermediate_size", &c->intermediate_size, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_hidden_layers", &c->num_hidden_layers, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_attention_heads", &c->num_attention_heads, true));
  c->num_key_value_heads = c->num_attention_heads;
  MOE_RETURN_IF_ERROR(r.get_int("num_key_value_heads", &c->num_key_value_heads, false));
  MOE_RETURN_IF_ERROR(r.get_int("head_dim", &c->head_dim, false));
  MOE_RETURN_IF_ERROR(r.get_double("rms_norm_eps", &c->rms_norm_eps, true));
  MOE_RETURN_IF_ERROR(r.get_double("rope_theta", &c->rope_theta, true));
  MOE_RETURN_IF_ERROR(r.get_int("max_position_embeddings", &c->max_position_embeddings, true));
  MOE_RETURN_IF_ERROR(r.get_bool("tie_word_embeddings", &c->tie_word_embeddings));
  MOE_RETURN_IF_ERROR(r.get_int("bos_token_id", &c->bos_token_id, false, 0));

  const std::string& src = r.source();
  if (j.contains("hidden_act") && !j["hidden_act"].is_null() && j["hidden_act"] != "silu") {
    return unimplemented(src + ": field 'hidden_act' is " + j["hidden_act"].dump() +
                         ", only \"silu\" is supported");
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    return unimplemented(src + ": field 'rope_scaling' is set; RoPE scaling is not supported yet");
  }
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
    // Without a sliding-window kernel the window bounds the usable context, which
    // keeps results exact.
    int window = 0;
    MOE_RETURN_IF_ERROR(r.get_int("sliding_window", &window, false));
    if (window > 0) c->max_position_embeddings = std::min(c->max_position_embeddings, window);
  }
  // eos_token_id: an integer or a list of integers.
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const json& e = j["eos_token_id"];
    auto bad = [&] {
      return invalid_argument(src + ": field 'eos_token_id' must be a token id or a list of ids (got " +
                              e.dump() + ")");
    };
    // Range-checked before narrowing to int, so 2^32 + 2 is not silently read as 2.
    auto add = [&](const json& x) {
      if (!x.is_number_integer()) return false;
      const int64_t id = x.get<int64_t>();
      if (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) return false;
      if (id < INT32_MIN || id > INT32_MAX) return false;
      c->eos_token_ids.push_back(static_cast<int>(id));
      return true;
    };
    if (e.is_number_integer()) {
      if (!add(e)) return bad();
    } else if (e.is_array()) {
      for (const auto& x : e) {
        if (!add(x)) return bad();
      }
    } else {
      return bad();
    }
  }

  // Consistency of sizes.
  if (c->head_dim == 0) {
    if (c->hidden_size % c->num_attention_heads != 0) {
      return invalid_argument(src + ": hidden_size " + std::to_string(c->hidden_size) +
                              " is not divisible by num_attention_heads " +
                              std::to_string(c->num_attention_heads) + " (and no head_dim is given)");
    }
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }
  if (c->head_dim % 2 != 0) {
    return invalid_argument(src + ": head_dim " + std::to_string(c->head_dim) +
                            " must be even for rotary embeddings");
  }
  if (c->num_attention_heads % c->num_key_value_heads != 0) {
    return invalid_argument(src + ": num_attention_heads " + std::to_string(c->num_attention_heads) +
                            " is not divisible by num_key_value_heads " +
                            std::to_string(c->num_key_value_heads));
  }
  if (c->bos_token_id >= c->vocab_size) {
    return invalid_argument(src + ": bos_token_id " + std::to_string(c->bos_token_id) +
                            " is outside vocab_size " + std::to_string(c->vocab_size));
  }
  for (int e : c->eos_token_ids) {
    if (e < 0 || e >= c->vocab_size) {
      return invalid_argument(src + ": eos_token_id " + std::to_string(e) + " is outside vocab_size " +
                              std::to_string(c->vocab_size));
    }
  }
  return ok_status();
}

Status parse_mixtral(const json& j, const FieldReader& r, ModelConfig* c) {
  MOE_RETURN_IF_ERROR(parse_common(j, r, c));
  MOE_RETURN_IF_ERROR(r.get_int("num_local_experts", &c->router.num_experts, true));
  MOE_RETURN_IF_ERROR(r.get_int("num_experts_per_tok", &c->router.top_k, true));
  c->router.scoring = RouterConfig::Scoring::kSoftmax;
  c->router.norm_topk_prob = true;  // Mixtral always renormalises
  if (c->router.top_k > c->router.num_experts) {
    return invalid_argument(r.source() + ": num_experts_per_tok " + std::to_string(c->router.top_k) +
                            " exceeds num_local_experts " + std::to_string(c->router.num_experts));
  }
  return ok_status();
}

}  // namespace

bool ModelConfig::is_eos(int token) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

StatusOr<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(source + ": not a valid JSON object");
  if (!j.contains("model_type") || !j["model_type"].is_string()) {
    return invalid_argument(source + ": required field 'model_type' is missing or not a string");
  }
  ModelConfig c;
  c.model_type = j["model_type"].get<std::string>();
  FieldReader r(j, source);
  if (c.model_type == "mixtral") {
    c.family = ModelFamily::kMixtral;
    MOE_RETURN_IF_ERROR(parse_mixtral(j, r, &c));
  } else if (c.model_type == "qwen2_moe" || c.model_type == "qwen3_moe" ||
             c.model_type == "deepseek_v3") {
    return unimplemented(source + ": model_type '" + c.model_type +
                         "' is recognised but not supported yet (supported: mixtral)");
  } else {
    return invalid_argument(source + ": unknown model_type '" + c.model_type +
                            "' (supported: mixtral)");
  }
  return c;
}

StatusOr<ModelConfig> load_model_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  auto text = read_text_file(path);
  if (!text.ok()) return text.status();
  return parse_model_config(text.value(), path);
}

}  // namespace moe
