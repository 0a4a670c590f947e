#include "moe/serve_bench/chaos_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "moe/core/text_format.h"
#include "moe/serve_bench/serving_metrics.h"

namespace moe::serve_bench {

void ChaosCounts::add(const ChaosCounts& o) {
  requests += o.requests;
  completed += o.completed;
  errored += o.errored;
  lost += o.lost;
  refused += o.refused;
  greedy_completed += o.greedy_completed;
  greedy_equal += o.greedy_equal;
  seeded_completed += o.seeded_completed;
  seeded_equal += o.seeded_equal;
}

ChaosCounts count_results(const std::vector<ChaosRequest>& requests, const std::vector<ChaosResult>& results,
                          const std::vector<std::string>& reference) {
  ChaosCounts c;
  for (size_t i = 0; i < results.size(); ++i) {
    const ChaosResult& r = results[i];
    ++c.requests;
    switch (r.outcome) {
      case Outcome::kCompleted: ++c.completed; break;
      case Outcome::kErrored: ++c.errored; break;
      case Outcome::kLost:
        ++c.lost;
        if (r.refused) ++c.refused;
        break;
    }
    if (r.outcome != Outcome::kCompleted || i >= requests.size()) continue;
    const bool equal = i < reference.size() && r.text == reference[i];
    if (requests[i].greedy) {
      ++c.greedy_completed;
      if (equal) ++c.greedy_equal;
    } else {
      ++c.seeded_completed;
      if (equal) ++c.seeded_equal;
    }
  }
  return c;
}

std::optional<double> recovery_from_tokens(std::vector<double> token_times_s, double fault_at_s,
                                           double min_outage_s) {
  std::sort(token_times_s.begin(), token_times_s.end());
  double prev = fault_at_s, longest = 0, end_of_longest = fault_at_s;
  bool any = false;
  for (double t : token_times_s) {
    if (t <= fault_at_s) continue;
    any = true;
    if (t - prev > longest) {
      longest = t - prev;
      end_of_longest = t;
    }
    prev = t;
  }
  if (!any) return std::nullopt;
  return longest >= min_outage_s ? end_of_longest - fault_at_s : 0.0;
}

std::optional<double> recovery_from_results(const std::vector<ChaosResult>& results, double fault_at_s,
                                            double min_outage_s) {
  std::vector<double> tokens;
  const ChaosResult* last = nullptr;
  for (const ChaosResult& r : results) {
    if (r.outcome == Outcome::kCompleted) tokens.insert(tokens.end(), r.token_times_s.begin(), r.token_times_s.end());
    if (r.end_s > 0 && (last == nullptr || r.end_s > last->end_s)) last = &r;
  }
  if (last == nullptr || last->outcome != Outcome::kCompleted) return std::nullopt;
  return recovery_from_tokens(std::move(tokens), fault_at_s, min_outage_s);
}

std::map<std::string, double> parse_fault_metrics(const std::string& exposition) {
  std::map<std::string, double> out;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) continue;
    const std::string name = line.substr(0, name_end);
    if (name.size() > 7 && name.compare(name.size() - 7, 7, "_bucket") == 0) continue;  // a histogram's buckets
    if (name.find("failure") == std::string::npos && name.find("recover") == std::string::npos &&
        name.find("replay") == std::string::npos && name.find("degraded") == std::string::npos &&
        name.find("failover") == std::string::npos && name.find("lost_experts") == std::string::npos) {
      continue;
    }
    size_t value_at = line.find('}', name_end);
    value_at = value_at == std::string::npos ? name_end : value_at + 1;
    std::istringstream rest(line.substr(value_at));
    double v = 0;
    if (rest >> v) out[name] += v;
  }
  return out;
}

ChaosSummary summarize(const std::vector<ChaosTrial>& trials, const std::vector<ChaosRequest>& requests,
                       const std::vector<std::string>& reference) {
  ChaosSummary s;
  std::vector<double> recoveries;
  for (const ChaosTrial& t : trials) {
    ++s.trials;
    if (!t.setup_error.empty()) {
      ++s.setup_errors;
      continue;
    }
    const ChaosCounts c = count_results(requests, t.results, reference);
    if (t.front_end) {
      ++s.front_end_trials;
      s.front_end_kills.add(c);
    } else {
      s.rank_faults.add(c);
    }
    if (t.hang) ++s.hangs;
    if (t.stragglers > 0) ++s.trials_with_stragglers;
    if (t.leftover > 0) ++s.trials_with_leftovers;
    if (t.recovery_s) recoveries.push_back(*t.recovery_s);
    for (const auto& [name, v] : t.fault_metrics) s.fault_metrics[name] += v;
    if (t.fault == "corrupt") {
      ++s.corrupt_trials;
      if (t.corrupt_reported) ++s.corrupt_reported;
    }
  }
  s.recovered = static_cast<int>(recoveries.size());
  if (!recoveries.empty()) {
    s.recovery_p50_s = percentile(recoveries, 50);
    s.recovery_max_s = *std::max_element(recoveries.begin(), recoveries.end());
  }
  return s;
}

namespace {

std::string ratio(int a, int b) { return std::to_string(a) + "/" + std::to_string(b); }

std::string recovery_text(const ChaosTrial& t) {
  if (t.fault_at_s < 0) return "-";
  return t.recovery_s ? format_fixed(*t.recovery_s, 2) + " s" : "never";
}

double metric_of(const ChaosTrial& t, const std::string& name) {
  const auto it = t.fault_metrics.find(name);
  return it == t.fault_metrics.end() ? 0 : it->second;
}

// How the server came back, from its counters: "failover" (inside the worker group),
// "restart" (the supervisor relaunched it), both, or "-".
std::string recovered_by(const ChaosTrial& t) {
  const bool failover = metric_of(t, "moe:failovers_total") > 0, restart = metric_of(t, "moe:recoveries_total") > 0;
  return failover && restart ? "both" : failover ? "failover" : restart ? "restart" : "-";
}

std::string degraded_text(const ChaosTrial& t) {
  if (t.fault_metrics.count("moe:degraded_tokens_total") == 0) return "-";
  return std::to_string(static_cast<long long>(metric_of(t, "moe:degraded_tokens_total")));
}

}  // namespace

std::string render_chaos_table(const std::vector<ChaosTrial>& trials, const std::vector<ChaosRequest>& requests,
                               const std::vector<std::string>& reference) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-5s %-7s %-9s %7s %5s %5s %5s %7s %7s %-4s %9s %-8s %6s %-13s %5s %5s\n",
                "trial", "fault", "target", "at", "done", "lost", "err", "greedy=", "seeded=", "hang", "recovery", "by",
                "degr", "server", "strag", "left");
  out += line;
  for (const ChaosTrial& t : trials) {
    if (!t.setup_error.empty()) {
      std::snprintf(line, sizeof(line), "%-5d %-7s setup failed: %s\n", t.trial, t.fault.c_str(),
                    t.setup_error.substr(0, 200).c_str());
      out += line;
      continue;
    }
    const ChaosCounts c = count_results(requests, t.results, reference);
    const std::string at = t.fault_at_s < 0 ? "-" : format_fixed(t.fault_at_s, 2) + "s";
    std::snprintf(line, sizeof(line), "%-5d %-7s %-9s %7s %5d %5d %5d %7s %7s %-4s %9s %-8s %6s %-13s %5d %5d\n",
                  t.trial, t.fault.c_str(), t.target.empty() ? "-" : t.target.c_str(), at.c_str(), c.completed, c.lost,
                  c.errored, ratio(c.greedy_equal, c.greedy_completed).c_str(),
                  ratio(c.seeded_equal, c.seeded_completed).c_str(), t.hang ? "YES" : "no", recovery_text(t).c_str(),
                  recovered_by(t).c_str(), degraded_text(t).c_str(), t.server_end.substr(0, 13).c_str(), t.stragglers,
                  t.leftover);
    out += line;
  }
  const ChaosSummary s = summarize(trials, requests, reference);
  const ChaosCounts& r = s.rank_faults;
  out += "\n";
  out += "trials: " + std::to_string(s.trials) + " (" + std::to_string(s.front_end_trials) +
         " killed the front end, " + std::to_string(s.setup_errors) + " failed to start)\n";
  out += "requests (rank faults): " + std::to_string(r.requests) + ", completed " + std::to_string(r.completed) +
         ", lost " + std::to_string(r.lost) + " (refused " + std::to_string(r.refused) + "), errored " +
         std::to_string(r.errored) + "\n";
  out += "outputs equal to the fault-free run: greedy " + ratio(r.greedy_equal, r.greedy_completed) + ", seeded " +
         ratio(r.seeded_equal, r.seeded_completed) + " (of completed requests)\n";
  if (s.front_end_trials > 0) {
    const ChaosCounts& f = s.front_end_kills;
    out += "requests (front-end kills): " + std::to_string(f.requests) + ", completed " +
           std::to_string(f.completed) + ", lost " + std::to_string(f.lost) + ", errored " +
           std::to_string(f.errored) + "\n";
  }
  out += "hangs: " + std::to_string(s.hangs) + "\n";
  out += "recovery: " + std::to_string(s.recovered) + " of " + std::to_string(s.trials - s.setup_errors) +
         " trials recovered" +
         (s.recovered > 0 ? ", p50 " + format_fixed(s.recovery_p50_s, 2) + " s, max " +
                                format_fixed(s.recovery_max_s, 2) + " s"
                          : std::string()) +
         "\n";
  out += "processes: " + std::to_string(s.trials_with_stragglers) + " trials with stragglers, " +
         std::to_string(s.trials_with_leftovers) + " with leftovers after the kill\n";
  if (!s.fault_metrics.empty()) {
    out += "server fault counters (summed over trials):";
    for (const auto& [name, v] : s.fault_metrics) out += " " + name + " " + format_g(v);
    out += "\n";
  }
  if (s.corrupt_trials > 0) {
    out += "corrupt shards named in the server's output: " + ratio(s.corrupt_reported, s.corrupt_trials) + "\n";
  }
  return out;
}

namespace {

nlohmann::json counts_json(const ChaosCounts& c) {
  return {{"requests", c.requests},
          {"completed", c.completed},
          {"lost", c.lost},
          {"refused", c.refused},
          {"errored", c.errored},
          {"greedy_completed", c.greedy_completed},
          {"greedy_equal", c.greedy_equal},
          {"seeded_completed", c.seeded_completed},
          {"seeded_equal", c.seeded_equal}};
}

}  // namespace

nlohmann::json chaos_json(const std::vector<ChaosTrial>& trials, const std::vector<ChaosRequest>& requests,
                          const std::vector<std::string>& reference) {
  nlohmann::json out;
  out["trials"] = nlohmann::json::array();
  for (const ChaosTrial& t : trials) {
    nlohmann::json j = {{"trial", t.trial},
                        {"fault", t.fault},
                        {"target", t.target},
                        {"front_end", t.front_end},
                        {"fault_at_s", t.fault_at_s},
                        {"setup_error", t.setup_error},
                        {"hang", t.hang},
                        {"hang_at_s", t.hang_at_s},
                        {"recovery_s", t.recovery_s ? nlohmann::json(*t.recovery_s) : nlohmann::json(nullptr)},
                        {"server_end", t.server_end},
                        {"stragglers", t.stragglers},
                        {"leftover", t.leftover},
                        {"fault_metrics", t.fault_metrics}};
    if (t.fault == "corrupt") {
      j["corrupt_shard"] = t.corrupt_shard;
      j["corrupt_reported"] = t.corrupt_reported;
    }
    j["counts"] = counts_json(count_results(requests, t.results, reference));
    j["requests"] = nlohmann::json::array();
    for (size_t i = 0; i < t.results.size(); ++i) {
      const ChaosResult& r = t.results[i];
      nlohmann::json rj = {{"index", static_cast<int>(i)}, {"outcome", outcome_name(r.outcome)},
                           {"http_status", r.http_status}, {"start_s", r.start_s}, {"end_s", r.end_s}};
      if (r.outcome == Outcome::kCompleted) rj["equal"] = i < reference.size() && r.text == reference[i];
      if (!r.detail.empty()) rj["detail"] = r.detail;
      j["requests"].push_back(std::move(rj));
    }
    out["trials"].push_back(std::move(j));
  }
  const ChaosSummary s = summarize(trials, requests, reference);
  out["totals"] = {{"trials", s.trials},
                   {"setup_errors", s.setup_errors},
                   {"rank_faults", counts_json(s.rank_faults)},
                   {"front_end_trials", s.front_end_trials},
                   {"front_end_kills", counts_json(s.front_end_kills)},
                   {"hangs", s.hangs},
                   {"recovered", s.recovered},
                   {"recovery_p50_s", s.recovery_p50_s},
                   {"recovery_max_s", s.recovery_max_s},
                   {"trials_with_stragglers", s.trials_with_stragglers},
                   {"trials_with_leftovers", s.trials_with_leftovers},
                   {"corrupt_trials", s.corrupt_trials},
                   {"corrupt_reported", s.corrupt_reported},
                   {"fault_metrics", s.fault_metrics}};
  return out;
}

}  // namespace moe::serve_bench
