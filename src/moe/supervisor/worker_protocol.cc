#include "moe/supervisor/worker_protocol.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "moe/core/atomic_file.h"

namespace moe::supervisor {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

StatusOr<json> parse_object(const std::string& text, const char* what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(std::string("malformed ") + what + ": not a JSON object");
  return j;
}

// Reads j[key] into *out when present; InvalidArgument naming `what.key` on a type error.
template <typename T>
Status get(const json& j, const char* key, T* out, const char* what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  try {
    *out = it->get<T>();
  } catch (const json::exception& e) {
    return invalid_argument(std::string("malformed ") + what + ": field '" + key + "': " + e.what());
  }
  return ok_status();
}

// A logprob as JSON: a number, or null for -inf (a token the logits rule out), which
// JSON cannot write.
json logprob_json(float lp) { return std::isfinite(lp) ? json(lp) : json(nullptr); }

StatusOr<float> logprob_of(const json& j, const char* what) {
  if (j.is_null()) return -std::numeric_limits<float>::infinity();
  if (!j.is_number()) return invalid_argument(std::string("malformed ") + what + ": a logprob is not a number");
  return j.get<float>();
}

// TokenLogprobs as [{"id":ID,"logprob":LP,"top":[[ID,LP],...]},...].
json logprobs_json(const std::vector<TokenLogprob>& lps) {
  json out = json::array();
  for (const TokenLogprob& lp : lps) {
    json top = json::array();
    for (const auto& [id, v] : lp.top) top.push_back(json::array({id, logprob_json(v)}));
    out.push_back({{"id", lp.token_id}, {"logprob", logprob_json(lp.logprob)}, {"top", std::move(top)}});
  }
  return out;
}

Status get_logprobs(const json& j, const char* key, std::vector<TokenLogprob>* out, const char* what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ok_status();
  const std::string field = std::string(what) + " field '" + key + "'";
  if (!it->is_array()) return invalid_argument("malformed " + field + ": not an array");
  for (const json& e : *it) {
    if (!e.is_object() || !e.contains("id") || !e["id"].is_number_integer() || !e.contains("logprob")) {
      return invalid_argument("malformed " + field + ": an entry is not {\"id\",\"logprob\",\"top\"}");
    }
    TokenLogprob lp;
    lp.token_id = e["id"].get<int>();
    MOE_ASSIGN_OR_RETURN(lp.logprob, logprob_of(e["logprob"], field.c_str()));
    if (e.contains("top")) {
      if (!e["top"].is_array()) return invalid_argument("malformed " + field + ": 'top' is not an array");
      for (const json& t : e["top"]) {
        if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer()) {
          return invalid_argument("malformed " + field + ": a 'top' entry is not [id, logprob]");
        }
        MOE_ASSIGN_OR_RETURN(float v, logprob_of(t[1], field.c_str()));
        lp.top.emplace_back(t[0].get<int>(), v);
      }
    }
    out->push_back(std::move(lp));
  }
  return ok_status();
}

json status_json(const Status& st) {
  return {{"code", static_cast<int>(st.code())}, {"message", st.message()}};
}

// {"ok": ...} -> the value; {"error": {code, message}} -> that Status.
template <typename T>
StatusOr<StatusOr<T>> decode_reply(const std::string& text, const char* what) {
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, what));
  if (j.contains("ok")) {
    T value{};
    MOE_RETURN_IF_ERROR(get(j, "ok", &value, what));
    return StatusOr<T>(std::move(value));
  }
  if (j.contains("error") && j["error"].is_object()) {
    int code = 0;
    std::string message;
    MOE_RETURN_IF_ERROR(get(j["error"], "code", &code, what));
    MOE_RETURN_IF_ERROR(get(j["error"], "message", &message, what));
    if (code <= 0 || code > static_cast<int>(StatusCode::kDeadlineExceeded)) {
      return invalid_argument(std::string("malformed ") + what + ": unknown status code " + std::to_string(code));
    }
    return StatusOr<T>(Status(static_cast<StatusCode>(code), message));
  }
  return invalid_argument(std::string("malformed ") + what + ": neither 'ok' nor 'error'");
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string encode_ids_reply(const StatusOr<std::vector<int>>& reply) {
  if (reply.ok()) return dump({{"ok", reply.value()}});
  return dump({{"error", status_json(reply.status())}});
}

StatusOr<StatusOr<std::vector<int>>> decode_ids_reply(const std::string& text) {
  return decode_reply<std::vector<int>>(text, "ids reply");
}

std::string encode_text_reply(const StatusOr<std::string>& reply) {
  if (reply.ok()) return dump({{"ok", reply.value()}});
  return dump({{"error", status_json(reply.status())}});
}

StatusOr<StatusOr<std::string>> decode_text_reply(const std::string& text) {
  return decode_reply<std::string>(text, "text reply");
}

std::string encode_vocab_bytes(const std::vector<std::string>& tokens) {
  static constexpr char kHex[] = "0123456789abcdef";
  json arr = json::array();
  for (const std::string& t : tokens) {
    std::string h;
    h.reserve(2 * t.size());
    for (unsigned char c : t) {
      h.push_back(kHex[c >> 4]);
      h.push_back(kHex[c & 15]);
    }
    arr.push_back(std::move(h));
  }
  return dump({{"tokens", std::move(arr)}});
}

StatusOr<std::vector<std::string>> decode_vocab_bytes(const std::string& text) {
  constexpr const char* kWhat = "vocab bytes";
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, kWhat));
  std::vector<std::string> hex;
  MOE_RETURN_IF_ERROR(get(j, "tokens", &hex, kWhat));
  std::vector<std::string> out;
  out.reserve(hex.size());
  for (size_t i = 0; i < hex.size(); ++i) {
    const std::string& h = hex[i];
    std::string bytes;
    bool bad = h.size() % 2 != 0;
    for (size_t k = 0; !bad && k < h.size(); k += 2) {
      const int hi = hex_value(h[k]), lo = hex_value(h[k + 1]);
      bad = hi < 0 || lo < 0;
      if (!bad) bytes.push_back(static_cast<char>(hi * 16 + lo));
    }
    if (bad) return invalid_argument("malformed vocab bytes: tokens[" + std::to_string(i) + "] is not hex: " + h);
    out.push_back(std::move(bytes));
  }
  return out;
}

std::string encode_request(const SeqRequest& r) {
  json j = {{"prompt", r.prompt},
            {"prompt_token_ids", r.prompt_token_ids},
            {"max_tokens", r.max_tokens},
            {"temperature", r.sampling.temperature},
            {"top_k", r.sampling.top_k},
            {"top_p", r.sampling.top_p},
            {"min_p", r.sampling.min_p},
            {"presence_penalty", r.sampling.presence_penalty},
            {"frequency_penalty", r.sampling.frequency_penalty},
            {"repetition_penalty", r.sampling.repetition_penalty},
            {"logit_bias", r.sampling.logit_bias},
            {"stop", r.stop},
            {"ignore_eos", r.ignore_eos},
            {"stop_token_ids", r.stop_token_ids},
            {"logprobs", r.logprobs},
            {"prompt_logprobs", r.prompt_logprobs},
            {"response_format", r.response_format},
            {"json_schema", r.json_schema},
            {"resume_token_ids", r.resume_token_ids},
            {"cache_salt", r.cache_salt}};
  if (r.sampling.seed) j["seed"] = *r.sampling.seed;
  return dump(j);
}

StatusOr<SeqRequest> decode_request(const std::string& text) {
  constexpr const char* kWhat = "request";
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, kWhat));
  SeqRequest r;
  MOE_RETURN_IF_ERROR(get(j, "prompt", &r.prompt, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "prompt_token_ids", &r.prompt_token_ids, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "max_tokens", &r.max_tokens, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "temperature", &r.sampling.temperature, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "top_k", &r.sampling.top_k, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "top_p", &r.sampling.top_p, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "min_p", &r.sampling.min_p, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "presence_penalty", &r.sampling.presence_penalty, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "frequency_penalty", &r.sampling.frequency_penalty, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "repetition_penalty", &r.sampling.repetition_penalty, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "logit_bias", &r.sampling.logit_bias, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "stop", &r.stop, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "ignore_eos", &r.ignore_eos, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "stop_token_ids", &r.stop_token_ids, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "logprobs", &r.logprobs, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "prompt_logprobs", &r.prompt_logprobs, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "response_format", &r.response_format, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "json_schema", &r.json_schema, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "resume_token_ids", &r.resume_token_ids, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "cache_salt", &r.cache_salt, kWhat));
  if (j.contains("seed") && !j["seed"].is_null()) {
    uint64_t seed = 0;
    MOE_RETURN_IF_ERROR(get(j, "seed", &seed, kWhat));
    r.sampling.seed = seed;
  }
  return r;
}

std::string encode_event(const SeqEvent& e) {
  json j = {{"text", e.text},
            {"token_ids", e.token_ids},
            {"finished", e.finished},
            {"prompt_tokens", e.prompt_tokens},
            {"completion_tokens", e.completion_tokens},
            {"cached_tokens", e.cached_tokens}};
  if (e.finished) {
    j["finish_reason"] = e.finish_reason;
    j["queue_seconds"] = e.queue_seconds;
    j["prefill_seconds"] = e.prefill_seconds;
    j["decode_seconds"] = e.decode_seconds;
  }
  if (!e.error.empty()) j["error"] = e.error;
  if (!e.logprobs.empty()) j["logprobs"] = logprobs_json(e.logprobs);
  if (!e.prompt_logprobs.empty()) j["prompt_logprobs"] = logprobs_json(e.prompt_logprobs);
  return dump(j);
}

StatusOr<SeqEvent> decode_event(const std::string& text) {
  constexpr const char* kWhat = "event";
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, kWhat));
  SeqEvent e;
  MOE_RETURN_IF_ERROR(get(j, "text", &e.text, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "token_ids", &e.token_ids, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "finished", &e.finished, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "finish_reason", &e.finish_reason, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "error", &e.error, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "prompt_tokens", &e.prompt_tokens, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "completion_tokens", &e.completion_tokens, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "cached_tokens", &e.cached_tokens, kWhat));
  MOE_RETURN_IF_ERROR(get_logprobs(j, "logprobs", &e.logprobs, kWhat));
  MOE_RETURN_IF_ERROR(get_logprobs(j, "prompt_logprobs", &e.prompt_logprobs, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "queue_seconds", &e.queue_seconds, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "prefill_seconds", &e.prefill_seconds, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "decode_seconds", &e.decode_seconds, kWhat));
  if (e.finished && e.finish_reason.empty()) return invalid_argument("malformed event: finished without finish_reason");
  return e;
}

std::string encode_model_info(const ModelInfo& m) {
  return dump({{"model_dir", m.model_dir},
               {"model_type", m.model_type},
               {"vocab_size", m.vocab_size},
               {"hidden_size", m.hidden_size},
               {"num_layers", m.num_layers},
               {"num_experts", m.num_experts},
               {"top_k", m.top_k},
               {"num_moe_layers", m.num_moe_layers},
               {"max_context", m.max_context},
               {"num_parameters", m.num_parameters},
               {"num_active_parameters", m.num_active_parameters},
               {"weight_bytes", m.weight_bytes},
               {"decode_bytes_per_token", m.decode_bytes_per_token}});
}

StatusOr<ModelInfo> decode_model_info(const std::string& text) {
  constexpr const char* kWhat = "model info";
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, kWhat));
  ModelInfo m;
  MOE_RETURN_IF_ERROR(get(j, "model_dir", &m.model_dir, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "model_type", &m.model_type, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "vocab_size", &m.vocab_size, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "hidden_size", &m.hidden_size, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "num_layers", &m.num_layers, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "num_experts", &m.num_experts, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "top_k", &m.top_k, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "num_moe_layers", &m.num_moe_layers, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "max_context", &m.max_context, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "num_parameters", &m.num_parameters, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "num_active_parameters", &m.num_active_parameters, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "weight_bytes", &m.weight_bytes, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "decode_bytes_per_token", &m.decode_bytes_per_token, kWhat));
  if (m.max_context <= 0) return invalid_argument("malformed model info: max_context must be > 0");
  return m;
}

std::string encode_snapshot(const ServiceSnapshot& s) {
  return dump({{"running", s.running},
               {"waiting", s.waiting},
               {"kv_blocks_total", s.kv_blocks_total},
               {"kv_blocks_used", s.kv_blocks_used},
               {"kv_block_size", s.kv_block_size},
               {"steps", s.steps},
               {"prompt_tokens_total", s.prompt_tokens_total},
               {"generation_tokens_total", s.generation_tokens_total},
               {"requests_finished", s.requests_finished},
               {"iteration_tokens", s.iteration_tokens},
               {"iteration_tokens_sum", s.iteration_tokens_sum},
               {"preemptions", s.preemptions},
               {"prefix_cache_queries", s.prefix_cache_queries},
               {"prefix_cache_hits", s.prefix_cache_hits},
               {"kv_disk_hits", s.kv_disk_hits},
               {"kv_disk_hit_bytes", s.kv_disk_hit_bytes},
               {"kv_disk_writes", s.kv_disk_writes},
               {"kv_disk_write_bytes", s.kv_disk_write_bytes},
               {"kv_disk_rejects", s.kv_disk_rejects},
               {"kv_disk_write_failures", s.kv_disk_write_failures},
               {"moe_layers", s.moe_layers},
               {"expert_tokens", s.expert_tokens},
               {"worker_failures", s.worker_failures},
               {"recoveries", s.recoveries},
               {"replayed_requests", s.replayed_requests},
               {"recovery_seconds", s.recovery_seconds},
               {"failovers", s.failovers},
               {"ranks_lost", s.ranks_lost},
               {"lost_experts", s.lost_experts},
               {"degraded_tokens", s.degraded_tokens},
               {"failover_seconds", s.failover_seconds}});
}

StatusOr<ServiceSnapshot> decode_snapshot(const std::string& text) {
  constexpr const char* kWhat = "snapshot";
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, kWhat));
  ServiceSnapshot s;
  MOE_RETURN_IF_ERROR(get(j, "running", &s.running, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "waiting", &s.waiting, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_blocks_total", &s.kv_blocks_total, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_blocks_used", &s.kv_blocks_used, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_block_size", &s.kv_block_size, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "steps", &s.steps, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "prompt_tokens_total", &s.prompt_tokens_total, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "generation_tokens_total", &s.generation_tokens_total, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "requests_finished", &s.requests_finished, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "iteration_tokens", &s.iteration_tokens, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "iteration_tokens_sum", &s.iteration_tokens_sum, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "preemptions", &s.preemptions, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "prefix_cache_queries", &s.prefix_cache_queries, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "prefix_cache_hits", &s.prefix_cache_hits, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_disk_hits", &s.kv_disk_hits, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_disk_hit_bytes", &s.kv_disk_hit_bytes, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_disk_writes", &s.kv_disk_writes, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_disk_write_bytes", &s.kv_disk_write_bytes, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_disk_rejects", &s.kv_disk_rejects, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "kv_disk_write_failures", &s.kv_disk_write_failures, kWhat));
  if (!s.iteration_tokens.empty() && s.iteration_tokens.size() != std::size(kIterationTokenBounds) + 1) {
    return invalid_argument("malformed snapshot: iteration_tokens has " + std::to_string(s.iteration_tokens.size()) +
                            " buckets, expected " + std::to_string(std::size(kIterationTokenBounds) + 1));
  }
  MOE_RETURN_IF_ERROR(get(j, "moe_layers", &s.moe_layers, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "expert_tokens", &s.expert_tokens, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "worker_failures", &s.worker_failures, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "recoveries", &s.recoveries, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "replayed_requests", &s.replayed_requests, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "recovery_seconds", &s.recovery_seconds, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "failovers", &s.failovers, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "ranks_lost", &s.ranks_lost, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "lost_experts", &s.lost_experts, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "degraded_tokens", &s.degraded_tokens, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "failover_seconds", &s.failover_seconds, kWhat));
  return s;
}

std::string encode_health(const ServiceHealth& h) {
  json j = {{"state", h.state}, {"detail", h.detail}};
  if (!h.worker_pids.empty()) j["worker_pids"] = h.worker_pids;
  return dump(j);
}

StatusOr<ServiceHealth> decode_health(const std::string& text) {
  constexpr const char* kWhat = "health";
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, kWhat));
  ServiceHealth h;
  h.state.clear();
  MOE_RETURN_IF_ERROR(get(j, "state", &h.state, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "detail", &h.detail, kWhat));
  MOE_RETURN_IF_ERROR(get(j, "worker_pids", &h.worker_pids, kWhat));
  if (h.state.empty()) return invalid_argument("malformed health: no 'state'");
  return h;
}

std::string encode_submit_reply(const StatusOr<uint64_t>& reply) {
  if (reply.ok()) return dump({{"accepted", reply.value()}});
  return dump({{"rejected",
                {{"code", static_cast<int>(reply.status().code())}, {"message", reply.status().message()}}}});
}

StatusOr<StatusOr<uint64_t>> decode_submit_reply(const std::string& text) {
  constexpr const char* kWhat = "submit reply";
  MOE_ASSIGN_OR_RETURN(json j, parse_object(text, kWhat));
  if (j.contains("accepted")) {
    uint64_t id = 0;
    MOE_RETURN_IF_ERROR(get(j, "accepted", &id, kWhat));
    return StatusOr<uint64_t>(id);
  }
  if (j.contains("rejected") && j["rejected"].is_object()) {
    int code = 0;
    std::string message;
    MOE_RETURN_IF_ERROR(get(j["rejected"], "code", &code, kWhat));
    MOE_RETURN_IF_ERROR(get(j["rejected"], "message", &message, kWhat));
    if (code <= 0 || code > static_cast<int>(StatusCode::kDeadlineExceeded)) {
      return invalid_argument("malformed submit reply: unknown status code " + std::to_string(code));
    }
    return StatusOr<uint64_t>(Status(static_cast<StatusCode>(code), message));
  }
  return invalid_argument("malformed submit reply: neither 'accepted' nor 'rejected'");
}

Status publish_endpoint(const std::string& dir, int port, int64_t pid) {
  return write_file_atomically(dir + "/endpoint.json", dump({{"port", port}, {"pid", pid}}));
}

Status publish_rank_pid(const std::string& dir, int rank, int64_t pid) {
  return write_file_atomically(dir + "/rank-" + std::to_string(rank) + ".pid", std::to_string(pid) + "\n");
}

StatusOr<int> read_endpoint_port(const std::string& dir) {
  const std::string path = dir + "/endpoint.json";
  std::ifstream in(path);
  if (!in) return not_found(path + " does not exist (yet)");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("port") || !j["port"].is_number_integer()) {
    return data_loss(path + ": malformed (expected {\"port\":P,...})");
  }
  const int port = j["port"].get<int>();
  if (port <= 0 || port > 65535) return data_loss(path + ": port " + std::to_string(port) + " out of range");
  return port;
}

std::vector<int64_t> read_rank_pids(const std::string& dir, int num_ranks) {
  std::vector<int64_t> pids(static_cast<size_t>(std::max(0, num_ranks)), -1);
  for (int r = 0; r < num_ranks; ++r) {
    std::ifstream in(dir + "/rank-" + std::to_string(r) + ".pid");
    int64_t pid = -1;
    if (in >> pid && pid > 0) pids[static_cast<size_t>(r)] = pid;
  }
  return pids;
}

}  // namespace moe::supervisor
