#include "moe/serve/openai_params.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "moe/core/text_format.h"
#include "moe/serve/json_fields.h"

namespace moe::serve {
namespace {

using namespace detail;  // NOLINT: the parser's field helpers (json_fields.h)

// A number field in [lo, hi] (both inclusive).
std::optional<ApiError> read_in_range(const json& body, const char* name, double lo, double hi,
                                      std::optional<double>* out) {
  if (auto e = read_number(body, name, out)) return e;
  if (*out && !(**out >= lo && **out <= hi)) {
    return bad(name, "'" + std::string(name) + "' must be in [" + format_g(lo) + ", " + format_g(hi) + "] (got " +
                         format_g(**out) + ")");
  }
  return std::nullopt;
}

// A token id in a JSON string key ("1234"): decimal digits only, in the vocabulary.
std::optional<int> parse_token_key(const std::string& key, int vocab_size) {
  if (key.empty() || key.size() > 10) return std::nullopt;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const long long id = std::strtoll(key.c_str(), nullptr, 10);
  if (id > std::numeric_limits<int>::max() || (vocab_size > 0 && id >= vocab_size)) return std::nullopt;
  return static_cast<int>(id);
}

std::string vocab_range(int vocab_size) {
  return vocab_size > 0 ? "[0, " + std::to_string(vocab_size) + ")" : "[0, 2^31)";
}

std::optional<ApiError> parse_logit_bias(const json& body, const ProtocolLimits& limits, SamplingParams* s) {
  const json* lb = field(body, "logit_bias");
  if (!lb) return std::nullopt;
  if (!lb->is_object()) return wrong_type("logit_bias", *lb, "an object mapping token ids to biases");
  for (const auto& [key, value] : lb->items()) {
    const std::optional<int> id = parse_token_key(key, limits.vocab_size);
    if (!id) {
      return bad("logit_bias", "'logit_bias' key \"" + key + "\" is not a token id in " +
                                   vocab_range(limits.vocab_size));
    }
    if (!value.is_number()) {
      return bad("logit_bias", "'logit_bias' value for token " + key + " must be a number, not " + type_name(value));
    }
    const double bias = value.get<double>();
    if (!(bias >= -100.0 && bias <= 100.0)) {
      return bad("logit_bias", "'logit_bias' value for token " + key + " must be in [-100, 100] (got " +
                                   format_g(bias) + ")");
    }
    s->logit_bias.emplace_back(*id, static_cast<float>(bias));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_stop_token_ids(const json& body, const ProtocolLimits& limits, SeqRequest* seq) {
  const json* v = field(body, "stop_token_ids");
  if (!v) return std::nullopt;
  if (!v->is_array()) return wrong_type("stop_token_ids", *v, "an array of token ids");
  for (const json& t : *v) {
    const bool ok = t.is_number_integer() && !(t.is_number_integer() && !t.is_number_unsigned() && t.get<int64_t>() < 0) &&
                    t.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max()) &&
                    (limits.vocab_size <= 0 || t.get<uint64_t>() < static_cast<uint64_t>(limits.vocab_size));
    if (!ok) {
      return bad("stop_token_ids", "'stop_token_ids' entry " + t.dump() + " is not a token id in " +
                                       vocab_range(limits.vocab_size));
    }
    seq->stop_token_ids.push_back(static_cast<int>(t.get<uint64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_response_format(const json& body, SeqRequest* seq) {
  const json* rf = field(body, "response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) return wrong_type("response_format", *rf, "an object {\"type\": ...}");
  const json* type = field(*rf, "type");
  if (!type || !type->is_string()) {
    return bad("response_format.type", "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    seq->response_format = "json_object";
    return std::nullopt;
  }
  if (t != "json_schema") {
    return bad("response_format.type", "'response_format.type' must be 'text', 'json_object' or 'json_schema' (got '" +
                                           t + "')");
  }
  const json* js = field(*rf, "json_schema");
  if (!js || !js->is_object()) {
    return bad("response_format.json_schema",
               "'response_format.json_schema' must be an object {\"name\": ..., \"schema\": {...}}");
  }
  if (const json* name = field(*js, "name"); name && !name->is_string()) {
    return wrong_type("response_format.json_schema.name", *name, "a string");
  }
  if (const json* strict = field(*js, "strict"); strict && !strict->is_boolean()) {
    return wrong_type("response_format.json_schema.strict", *strict, "a boolean");
  }
  const json* schema = field(*js, "schema");
  if (!schema) {  // OpenAI: the schema is optional; without one, any JSON object
    seq->response_format = "json_object";
    return std::nullopt;
  }
  if (!schema->is_object()) return wrong_type("response_format.json_schema.schema", *schema, "an object");
  seq->response_format = "json_schema";
  seq->json_schema = dump(*schema);
  return std::nullopt;
}

std::optional<ApiError> parse_logprobs(Endpoint endpoint, const json& body, OpenAiRequest* out) {
  if (endpoint == Endpoint::kCompletions) {
    std::optional<int64_t> k;
    if (auto e = read_int(body, "logprobs", 0, kMaxLogprobs, &k)) return e;
    if (k) out->logprobs = static_cast<int>(*k);
    std::optional<bool> echo;
    if (auto e = read_bool(body, "echo", &echo)) return e;
    out->echo = echo.value_or(false);
  } else {
    std::optional<bool> logprobs;
    if (auto e = read_bool(body, "logprobs", &logprobs)) return e;
    std::optional<int64_t> top;
    if (auto e = read_int(body, "top_logprobs", 0, kMaxLogprobs, &top)) return e;
    if (top && !logprobs.value_or(false)) {
      return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    if (logprobs.value_or(false)) out->logprobs = static_cast<int>(top.value_or(0));
  }
  out->seq.logprobs = out->logprobs;
  out->seq.prompt_logprobs = out->echo ? out->logprobs : -1;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_generation_params(Endpoint endpoint, const json& body, const ProtocolLimits& limits,
                                                OpenAiRequest* out) {
  std::optional<int64_t> n;
  if (auto e = read_int(body, "n", 1, std::numeric_limits<int64_t>::max(), &n)) return e;
  if (n && *n > limits.max_n) {
    return bad("n", "'n' must be at most " + std::to_string(limits.max_n) + " on this server (got " +
                        std::to_string(*n) + ")");
  }
  out->n = static_cast<int>(n.value_or(1));
  if (endpoint == Endpoint::kCompletions &&
      out->prompts.size() * static_cast<size_t>(out->n) > static_cast<size_t>(kMaxPromptsPerRequest)) {
    return bad("n", "'n' (" + std::to_string(out->n) + ") times the " + std::to_string(out->prompts.size()) +
                        " prompts exceeds " + std::to_string(kMaxPromptsPerRequest) + " sequences per request");
  }
  if (auto e = parse_logprobs(endpoint, body, out)) return e;
  SamplingParams& s = out->seq.sampling;
  std::optional<double> presence, frequency, repetition, min_p;
  if (auto e = read_in_range(body, "presence_penalty", -2.0, 2.0, &presence)) return e;
  if (auto e = read_in_range(body, "frequency_penalty", -2.0, 2.0, &frequency)) return e;
  if (auto e = read_number(body, "repetition_penalty", &repetition)) return e;
  if (repetition && !(*repetition > 0.0 && *repetition <= 1e6)) {
    return bad("repetition_penalty", "'repetition_penalty' must be > 0 (got " + format_g(*repetition) + ")");
  }
  if (auto e = read_in_range(body, "min_p", 0.0, 1.0, &min_p)) return e;
  s.presence_penalty = static_cast<float>(presence.value_or(0.0));
  s.frequency_penalty = static_cast<float>(frequency.value_or(0.0));
  s.repetition_penalty = static_cast<float>(repetition.value_or(1.0));
  s.min_p = static_cast<float>(min_p.value_or(0.0));
  if (auto e = parse_logit_bias(body, limits, &s)) return e;
  if (auto e = parse_stop_token_ids(body, limits, &out->seq)) return e;
  std::optional<bool> ignore_eos;  // vLLM's extension (benchmarks)
  if (auto e = read_bool(body, "ignore_eos", &ignore_eos)) return e;
  out->seq.ignore_eos = ignore_eos.value_or(false);
  if (const json* v = field(body, "cache_salt")) {  // vLLM's prefix-cache isolation
    if (!v->is_string()) return wrong_type("cache_salt", *v, "a string");
    const std::string& salt = v->get_ref<const std::string&>();
    if (salt.empty() || salt.size() > kMaxCacheSaltBytes) {
      return bad("cache_salt", "'cache_salt' must be a non-empty string of at most " +
                                   std::to_string(kMaxCacheSaltBytes) + " bytes (got " + std::to_string(salt.size()) +
                                   ")");
    }
    out->seq.cache_salt = salt;
  }
  return parse_response_format(body, &out->seq);
}

std::optional<ApiError> check_unsupported(Endpoint endpoint, const json& body, const OpenAiRequest& parsed) {
  auto refuse = [](const std::string& name, const std::string& why) {
    return bad(name, "'" + name + "' is not supported by this server" + (why.empty() ? "" : ": " + why));
  };
  // A field is neutral when absent or null, or equal to one of its neutral values.
  auto set_to_other_than = [&](const char* name, std::initializer_list<json> neutral) {
    const json* v = field(body, name);
    if (!v) return false;
    for (const json& x : neutral) {
      if (*v == x) return false;
    }
    return true;
  };
  if (const json* b = field(body, "best_of"); b && !(b->is_number_integer() && *b == json(parsed.n))) {
    return refuse("best_of", "only 'best_of' equal to 'n' (no beam or best-of search)");
  }
  if (set_to_other_than("use_beam_search", {false})) return refuse("use_beam_search", "");
  for (const char* g : {"guided_json", "guided_regex", "guided_choice", "guided_grammar"}) {
    if (field(body, g)) return refuse(g, "use 'response_format' for JSON output");
  }
  if (set_to_other_than("min_tokens", {0})) return refuse("min_tokens", "");
  if (set_to_other_than("prompt_logprobs", {})) return refuse("prompt_logprobs", "use 'echo' with 'logprobs'");
  if (set_to_other_than("include_stop_str_in_output", {false})) return refuse("include_stop_str_in_output", "");
  if (set_to_other_than("skip_special_tokens", {true})) return refuse("skip_special_tokens", "");
  if (set_to_other_than("length_penalty", {1, 1.0})) return refuse("length_penalty", "");
  if (set_to_other_than("truncate_prompt_tokens", {})) return refuse("truncate_prompt_tokens", "");
  if (endpoint == Endpoint::kCompletions) {
    if (set_to_other_than("suffix", {""})) return refuse("suffix", "");
    return std::nullopt;
  }
  if (set_to_other_than("echo", {false})) return refuse("echo", "'echo' is supported on /v1/completions only");
  if (set_to_other_than("tools", {json::array()})) return refuse("tools", "function calling");
  if (set_to_other_than("functions", {json::array()})) return refuse("functions", "function calling");
  if (set_to_other_than("function_call", {"none"})) return refuse("function_call", "function calling");
  if (set_to_other_than("tool_choice", {"none", "auto"})) return refuse("tool_choice", "function calling");
  if (set_to_other_than("audio", {})) return refuse("audio", "");
  if (set_to_other_than("modalities", {json::array({"text"})})) return refuse("modalities", "text output only");
  if (set_to_other_than("prediction", {})) return refuse("prediction", "");
  if (set_to_other_than("continue_final_message", {false})) return refuse("continue_final_message", "");
  if (set_to_other_than("add_generation_prompt", {true})) return refuse("add_generation_prompt", "");
  if (set_to_other_than("chat_template", {})) return refuse("chat_template", "the server's template is used");
  return std::nullopt;
}

std::vector<SeqRequest> sequence_requests(const OpenAiRequest& request) {
  std::vector<PromptInput> prompts = request.prompts;
  if (prompts.empty()) prompts.push_back({request.seq.prompt, request.seq.prompt_token_ids});
  std::vector<SeqRequest> out;
  out.reserve(prompts.size() * static_cast<size_t>(request.n));
  for (const PromptInput& p : prompts) {
    for (int j = 0; j < request.n; ++j) {
      SeqRequest s = request.seq;
      s.prompt = p.text;
      s.prompt_token_ids = p.token_ids;
      if (s.sampling.seed) s.sampling.seed = *s.sampling.seed + static_cast<uint64_t>(j);
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace moe::serve
