#include "moe/serve_bench/reuse_metrics.h"

#include <cstdio>
#include <sstream>

namespace moe::serve_bench {

namespace {

double ratio(long long num, long long den) { return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0; }

bool is_later(const std::vector<bool>& later, size_t i) { return i < later.size() && later[i]; }

std::string f2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

double p99(const MetricStats& s) { return s.percentiles_ms.empty() ? 0.0 : s.percentiles_ms.back().second; }

}  // namespace

double PrefixReuse::hit_rate() const { return ratio(cached_tokens, prompt_tokens); }
double PrefixReuse::hit_rate_later() const { return ratio(cached_tokens_later, prompt_tokens_later); }

PrefixReuse prefix_reuse(const std::vector<RequestOutput>& outputs, const std::vector<bool>& later) {
  PrefixReuse r;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput& o = outputs[i];
    if (!o.success) continue;
    const long long cached = o.cached_tokens >= 0 ? o.cached_tokens : 0;
    if (o.cached_tokens >= 0) ++r.cached_reported;
    ++r.responses;
    r.cached_tokens += cached;
    r.prompt_tokens += o.prompt_len;
    if (is_later(later, i)) {
      ++r.responses_later;
      r.cached_tokens_later += cached;
      r.prompt_tokens_later += o.prompt_len;
    }
  }
  return r;
}

TurnTtft turn_ttft(const std::vector<RequestOutput>& outputs, const std::vector<bool>& later) {
  std::vector<double> first, rest;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].success) continue;
    (is_later(later, i) ? rest : first).push_back(outputs[i].ttft_s);
  }
  TurnTtft t;
  t.turn1 = summarize_seconds(first, {99.0});
  t.later = summarize_seconds(rest, {99.0});
  return t;
}

std::string format_reuse_report(const ReuseReport& r) {
  std::ostringstream os;
  const bool multi = r.workload == Workload::kMultiTurn;
  const char* later = multi ? "turns 2+" : "requests 2+";
  os << report_title(" Prefix Reuse ", '-');
  os << report_line("Workload:", workload_name(r.workload));
  if (multi) {
    os << report_line("Conversations:", std::to_string(r.num_conversations));
    os << report_line("Turns per conversation:", std::to_string(r.turns));
    os << report_line("Think time (s):", f2(r.think_time_s));
    os << report_line("Stopped early (context full):", std::to_string(r.conversations_stopped_early));
    os << report_line("Ended by a failed request:", std::to_string(r.conversations_ended_by_failure));
    os << report_line("Successful turn-1 / later requests:",
                      std::to_string(r.reuse.responses - r.reuse.responses_later) + " / " +
                          std::to_string(r.reuse.responses_later));
    os << report_line("Median TTFT turn 1 (ms):", f2(r.ttft.turn1.median_ms));
    os << report_line("P99 TTFT turn 1 (ms):", f2(p99(r.ttft.turn1)));
    os << report_line("Median TTFT turns 2+ (ms):", f2(r.ttft.later.median_ms));
    os << report_line("P99 TTFT turns 2+ (ms):", f2(p99(r.ttft.later)));
  } else if (r.workload == Workload::kSharedPrefix) {
    os << report_line("Shared prefix tokens:", std::to_string(r.shared_prefix_tokens));
  }
  os << report_line(std::string("Cached / prompt tokens, ") + later + ":",
                    std::to_string(r.reuse.cached_tokens_later) + " / " + std::to_string(r.reuse.prompt_tokens_later));
  os << report_line(std::string("Prefix hit rate, ") + later + " (%):", f2(100.0 * r.reuse.hit_rate_later()));
  os << report_line("Cached / prompt tokens, all:",
                    std::to_string(r.reuse.cached_tokens) + " / " + std::to_string(r.reuse.prompt_tokens));
  os << report_line("Prefix hit rate, all (%):", f2(100.0 * r.reuse.hit_rate()));
  os << std::string(50, '=') << "\n";
  if (r.reuse.responses > 0 && r.reuse.cached_reported == 0) {
    os << "note: cached_tokens not reported by the server (usage.prompt_tokens_details.cached_tokens): counted as 0\n";
  } else if (r.reuse.cached_reported < r.reuse.responses) {
    os << "note: cached_tokens reported by " << r.reuse.cached_reported << " of " << r.reuse.responses
       << " responses; the others counted as 0\n";
  }
  return os.str();
}

nlohmann::json reuse_json(const ReuseReport& r) {
  nlohmann::json j;
  const bool multi = r.workload == Workload::kMultiTurn;
  const nlohmann::json null = nullptr;
  j["workload"] = workload_name(r.workload);
  j["cached_tokens"] = r.reuse.cached_tokens;
  j["prompt_tokens"] = r.reuse.prompt_tokens;
  j["prefix_hit_rate"] = r.reuse.hit_rate();
  j["cached_tokens_reported"] = r.reuse.cached_reported;
  if (r.workload == Workload::kSingle) return j;
  j["cached_tokens_later"] = r.reuse.cached_tokens_later;
  j["prompt_tokens_later"] = r.reuse.prompt_tokens_later;
  j["prefix_hit_rate_later"] = r.reuse.hit_rate_later();
  j["num_conversations"] = multi ? nlohmann::json(r.num_conversations) : null;
  j["turns"] = multi ? nlohmann::json(r.turns) : null;
  j["think_time_s"] = multi ? nlohmann::json(r.think_time_s) : null;
  j["conversations_stopped_early"] = multi ? nlohmann::json(r.conversations_stopped_early) : null;
  j["conversations_ended_by_failure"] = multi ? nlohmann::json(r.conversations_ended_by_failure) : null;
  j["ttft_turn1_ms_median"] = multi ? nlohmann::json(r.ttft.turn1.median_ms) : null;
  j["ttft_turn1_ms_p99"] = multi ? nlohmann::json(p99(r.ttft.turn1)) : null;
  j["ttft_later_ms_median"] = multi ? nlohmann::json(r.ttft.later.median_ms) : null;
  j["ttft_later_ms_p99"] = multi ? nlohmann::json(p99(r.ttft.later)) : null;
  j["shared_prefix_tokens"] = r.workload == Workload::kSharedPrefix ? nlohmann::json(r.shared_prefix_tokens) : null;
  return j;
}

}  // namespace moe::serve_bench
