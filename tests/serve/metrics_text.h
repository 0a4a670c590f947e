// Parsing the Prometheus text exposition format (0.0.4) for tests: samples by name and
// labels, and each family's # TYPE.
#pragma once

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace moe::serve::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family -> counter / gauge / histogram

  // The value of the one sample `name` whose labels include `labels`; NaN if none.
  double value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == v;
      }
      if (match) return s.value;
    }
    return std::numeric_limits<double>::quiet_NaN();
  }
  bool has(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    return value(name, labels) == value(name, labels);  // not NaN
  }
};

// Lines "name{k="v",...} value" and "# TYPE name type"; label values unescaped.
inline Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      out.types[name] = type;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') s.name += line[i++];
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string key, value;
        while (i < line.size() && line[i] != '=') key += line[i++];
        i += 2;  // ="
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        ++i;  // closing quote
        if (i < line.size() && line[i] == ',') ++i;
        s.labels[key] = value;
      }
      ++i;  // }
    }
    const std::string v = line.substr(std::min(line.size(), i + 1));
    s.value = v == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(v);
    out.samples.push_back(std::move(s));
  }
  return out;
}

// The families vLLM's Grafana dashboard queries (vllm-project/vllm,
// examples/online_serving/prometheus_grafana/grafana.json and its current revision in
// examples/observability/prometheus_grafana/), with their Prometheus types; every
// query filters on model_name.
inline const std::vector<std::pair<std::string, std::string>>& grafana_families() {
  static const std::vector<std::pair<std::string, std::string>> k = {
      {"vllm:e2e_request_latency_seconds", "histogram"},
      {"vllm:prompt_tokens_total", "counter"},
      {"vllm:generation_tokens_total", "counter"},
      {"vllm:time_per_output_token_seconds", "histogram"},
      {"vllm:inter_token_latency_seconds", "histogram"},
      {"vllm:request_time_per_output_token_seconds", "histogram"},
      {"vllm:num_requests_running", "gauge"},
      {"vllm:num_requests_swapped", "gauge"},
      {"vllm:num_requests_waiting", "gauge"},
      {"vllm:time_to_first_token_seconds", "histogram"},
      {"vllm:gpu_cache_usage_perc", "gauge"},
      {"vllm:cpu_cache_usage_perc", "gauge"},
      {"vllm:kv_cache_usage_perc", "gauge"},
      {"vllm:request_prompt_tokens", "histogram"},
      {"vllm:request_generation_tokens", "histogram"},
      {"vllm:request_success_total", "counter"},
      {"vllm:request_queue_time_seconds", "histogram"},
      {"vllm:request_prefill_time_seconds", "histogram"},
      {"vllm:request_decode_time_seconds", "histogram"},
      {"vllm:request_max_num_generation_tokens", "histogram"},
  };
  return k;
}

}  // namespace moe::serve::testing
