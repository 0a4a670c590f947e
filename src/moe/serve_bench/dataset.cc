#include "moe/serve_bench/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

namespace moe::serve_bench {

int estimate_tokens(std::string_view text, double bytes_per_token) {
  return static_cast<int>(std::ceil(static_cast<double>(text.size()) / bytes_per_token)) + 1;
}

namespace {

// Each is a single piece of the shipped tokenizer (with its word-boundary marker).
constexpr const char* kWords[] = {
    "the", "and", "to",  "of",  "I",    "you",  "my",   "a",    "that", "in",   "is",    "not", "with",
    "it",  "me",  "be",  "your", "his", "this", "for",  "he",   "but",  "have", "as",    "thou", "so",
    "will", "what", "her", "thy", "we", "him",  "all",  "do",   "no",   "shall", "by",   "our", "are",
    "if",  "on",  "lord", "king", "good", "now", "come", "sir", "o",    "love", "they"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

// Fisher-Yates with a fixed engine: the same order for a seed on every platform
// (std::shuffle's algorithm is unspecified).
template <typename T>
void seeded_shuffle(std::vector<T>& v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng() % i);
    std::swap(v[i - 1], v[j]);
  }
}

TokenCounter counter_or_default(const DatasetOptions& o) {
  if (o.count_tokens) return o.count_tokens;
  return [](std::string_view t) { return estimate_tokens(t); };
}

Status check_common(const DatasetOptions& o) {
  if (o.num_prompts <= 0) return invalid_argument("--num-prompts must be >= 1, got " + std::to_string(o.num_prompts));
  if (o.max_model_len < 8) {
    return invalid_argument("--max-model-len must be >= 8, got " + std::to_string(o.max_model_len));
  }
  return ok_status();
}

bool is_role(const nlohmann::json& turn, std::initializer_list<const char*> roles) {
  if (!turn.is_object()) return false;
  for (const char* key : {"from", "role"}) {
    auto it = turn.find(key);
    if (it != turn.end() && it->is_string()) {
      for (const char* r : roles)
        if (*it == r) return true;
    }
  }
  return false;
}

const nlohmann::json* turn_text(const nlohmann::json& turn) {
  for (const char* key : {"value", "content"}) {
    auto it = turn.find(key);
    if (it != turn.end() && it->is_string()) return &*it;
  }
  return nullptr;
}

}  // namespace

std::string synthetic_prompt(int tokens, uint64_t variant) {
  std::string out;
  const int words = std::max(1, tokens - 1);
  out.reserve(static_cast<size_t>(words) * 4);
  for (int i = 0; i < words; ++i) {
    if (i) out.push_back(' ');
    out += kWords[(variant + static_cast<uint64_t>(i)) % kNumWords];
  }
  return out;
}

std::string synthetic_message(int words, uint64_t index) {
  std::string out;
  const int n = std::max(3, words);
  uint64_t digits = index;
  for (int i = 0; i < n; ++i) {
    if (i) out.push_back(' ');
    if (i < 3) {
      out += kWords[digits % kNumWords];
      digits /= kNumWords;
    } else {
      out += kWords[(index + static_cast<uint64_t>(i)) % kNumWords];
    }
  }
  return out;
}

StatusOr<DatasetFormat> parse_dataset_format(const std::string& name) {
  if (name == "auto") return DatasetFormat::kAuto;
  if (name == "sharegpt") return DatasetFormat::kShareGpt;
  if (name == "trace") return DatasetFormat::kTrace;
  return invalid_argument("--dataset-format: unknown format '" + name + "' (auto, sharegpt or trace)");
}

StatusOr<Dataset> parse_sharegpt(std::string_view json_text, const std::string& name, const DatasetOptions& o) {
  MOE_RETURN_IF_ERROR(check_common(o));
  if (o.fixed_output_len && (*o.fixed_output_len < 1 || *o.fixed_output_len >= o.max_model_len)) {
    return invalid_argument("--sharegpt-output-len must be in [1, max-model-len), got " +
                            std::to_string(*o.fixed_output_len));
  }
  if (o.default_output_len < 1 || o.default_output_len >= o.max_model_len) {
    return invalid_argument("default output length must be in [1, max-model-len), got " +
                            std::to_string(o.default_output_len));
  }
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return data_loss(name + ": not valid JSON");
  if (!j.is_array()) return data_loss(name + ": a ShareGPT file is a JSON array of conversations");
  TokenCounter count = counter_or_default(o);

  struct Pair {
    int index;
    const nlohmann::json* prompt;
    const nlohmann::json* completion;  // may be null
  };
  std::vector<Pair> pairs;
  int malformed = 0;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& conv = j[i];
    auto it = conv.is_object() ? conv.find("conversations") : conv.end();
    if (!conv.is_object() || it == conv.end() || !it->is_array()) {
      ++malformed;
      continue;
    }
    const nlohmann::json* prompt = nullptr;
    const nlohmann::json* completion = nullptr;
    for (const nlohmann::json& turn : *it) {
      if (!prompt) {
        if (is_role(turn, {"human", "user"})) prompt = turn_text(turn);
      } else if (is_role(turn, {"gpt", "assistant", "chatgpt", "bard", "bing"})) {
        completion = turn_text(turn);
        break;
      }
    }
    if (!prompt) {
      ++malformed;
      continue;
    }
    pairs.push_back({static_cast<int>(i), prompt, completion});
  }
  if (pairs.empty()) {
    return data_loss(name + ": no conversation with a human turn (expected [{\"conversations\": [{\"from\": "
                            "\"human\", \"value\": ...}, ...]}])");
  }
  seeded_shuffle(pairs, o.seed);

  Dataset ds;
  int too_short = 0, too_long = 0, without_answer = 0;
  for (const Pair& p : pairs) {
    if (static_cast<int>(ds.requests.size()) >= o.num_prompts) break;
    const std::string& prompt = p.prompt->get_ref<const std::string&>();
    const int prompt_len = count(prompt);
    int output_len;
    if (o.fixed_output_len) {
      output_len = *o.fixed_output_len;
    } else if (p.completion) {
      // Generated tokens carry no BOS: the count minus the one it includes.
      output_len = std::max(0, count(p.completion->get_ref<const std::string&>()) - 1);
    } else {
      output_len = o.default_output_len;
    }
    const bool check_output = !o.fixed_output_len && p.completion;
    if (prompt_len < 4 || (check_output && output_len < 4)) {
      ++too_short;
      continue;
    }
    if (prompt_len + output_len > o.max_model_len) {
      ++too_long;
      continue;
    }
    if (!p.completion && !o.fixed_output_len) ++without_answer;
    SampleRequest r;
    r.prompt = prompt;
    r.prompt_len = prompt_len;
    r.output_len = output_len;
    r.source_index = p.index;
    ds.requests.push_back(std::move(r));
  }
  if (ds.requests.empty()) {
    return failed_precondition(name + ": no usable conversation (" + std::to_string(too_short) + " too short, " +
                               std::to_string(too_long) + " longer than --max-model-len " +
                               std::to_string(o.max_model_len) + ")");
  }
  const size_t usable = ds.requests.size();
  for (size_t k = 0; static_cast<int>(ds.requests.size()) < o.num_prompts; ++k) {
    ds.requests.push_back(ds.requests[k % usable]);
  }
  std::ostringstream s;
  s << name << ": ShareGPT, " << j.size() << " conversations";
  if (malformed) s << " (" << malformed << " without a human turn)";
  s << "; " << usable << " sampled with seed " << o.seed;
  if (too_short || too_long) {
    s << " after dropping " << too_short << " too short and " << too_long << " longer than " << o.max_model_len
      << " tokens (prompt + output)";
  }
  if (o.fixed_output_len) {
    s << "; output length " << *o.fixed_output_len << " (fixed)";
  } else if (without_answer) {
    s << "; " << without_answer << " of them without a gpt turn: output length " << o.default_output_len;
  }
  if (ds.requests.size() > usable) s << "; repeated to " << ds.requests.size() << " requests";
  ds.summary = s.str();
  return ds;
}

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  // Plain comma-separated values (the traces have no quoted fields).
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  for (std::string& f : out) {
    size_t b = f.find_first_not_of(" \t\"");
    size_t e = f.find_last_not_of(" \t\"");
    f = (b == std::string::npos) ? "" : f.substr(b, e - b + 1);
  }
  return out;
}

bool to_double(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno == 0 && std::isfinite(*v);
}

}  // namespace

StatusOr<Dataset> parse_trace_csv(std::string_view csv_text, const std::string& name, const DatasetOptions& o) {
  MOE_RETURN_IF_ERROR(check_common(o));
  if (!(o.trace_time_scale > 0) || !std::isfinite(o.trace_time_scale)) {
    return invalid_argument("--trace-time-scale must be > 0");
  }
  if (!(o.trace_token_scale > 0) || !std::isfinite(o.trace_token_scale)) {
    return invalid_argument("--trace-token-scale must be > 0");
  }
  std::istringstream in{std::string(csv_text)};
  std::string line;
  if (!std::getline(in, line)) return data_loss(name + ": empty file");
  std::vector<std::string> header = split_csv_line(line);
  int col_t = -1, col_p = -1, col_d = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == "arrived_at") col_t = static_cast<int>(i);
    if (header[i] == "num_prefill_tokens") col_p = static_cast<int>(i);
    if (header[i] == "num_decode_tokens") col_d = static_cast<int>(i);
  }
  if (col_t < 0 || col_p < 0 || col_d < 0) {
    return data_loss(name + ": a trace needs the columns arrived_at, num_prefill_tokens, num_decode_tokens; header is '" +
                     line.substr(0, 200) + "'");
  }
  const int ncol = std::max({col_t, col_p, col_d}) + 1;
  const int half = o.max_model_len / 2;
  Dataset ds;
  ds.has_arrivals = true;
  double t0 = 0;
  int line_no = 1, rows = 0, clamped = 0;
  double last_t = -1e300;
  while (static_cast<int>(ds.requests.size()) < o.num_prompts && std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    std::vector<std::string> f = split_csv_line(line);
    double t = 0, p = 0, d = 0;
    if (static_cast<int>(f.size()) < ncol || !to_double(f[col_t], &t) || !to_double(f[col_p], &p) ||
        !to_double(f[col_d], &d)) {
      return data_loss(name + ":" + std::to_string(line_no) + ": expected numbers in arrived_at, num_prefill_tokens, "
                       "num_decode_tokens, got '" + line.substr(0, 200) + "'");
    }
    if (p < 1 || d < 1 || t < 0) {
      return data_loss(name + ":" + std::to_string(line_no) + ": token counts must be >= 1 and times >= 0");
    }
    if (t < last_t) return data_loss(name + ":" + std::to_string(line_no) + ": arrived_at is not sorted");
    last_t = t;
    if (rows == 0) t0 = t;
    ++rows;
    int out = std::max(1, static_cast<int>(std::lround(d * o.trace_token_scale)));
    int prompt = std::max(2, static_cast<int>(std::lround(p * o.trace_token_scale)));
    SampleRequest r;
    if (out > half) {
      out = half;
      r.clamped = true;
    }
    if (prompt > o.max_model_len - out) {
      prompt = o.max_model_len - out;
      r.clamped = true;
    }
    if (r.clamped) ++clamped;
    r.prompt = synthetic_prompt(prompt, static_cast<uint64_t>(rows - 1));
    r.prompt_len = o.count_tokens ? o.count_tokens(r.prompt) : prompt;
    r.output_len = out;
    r.arrival_s = (t - t0) / o.trace_time_scale;
    r.source_index = rows - 1;
    ds.requests.push_back(std::move(r));
  }
  if (static_cast<int>(ds.requests.size()) < o.num_prompts) {
    return failed_precondition(name + ": the trace has " + std::to_string(ds.requests.size()) +
                               " requests, fewer than --num-prompts " + std::to_string(o.num_prompts));
  }
  std::ostringstream s;
  s.precision(4);
  s << name << ": trace, first " << ds.requests.size() << " requests over " << ds.requests.back().arrival_s
    << " s (time scale " << o.trace_time_scale << ", token scale " << o.trace_token_scale << "); " << clamped
    << " clamped to fit " << o.max_model_len << " tokens (output <= " << half << ", prompt <= "
    << o.max_model_len << " - output)";
  ds.summary = s.str();
  return ds;
}

StatusOr<DatasetFormat> resolve_dataset_format(const std::string& path, DatasetFormat format) {
  if (format != DatasetFormat::kAuto) return format;
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    if (path.size() < n) return false;
    std::string tail = path.substr(path.size() - n);
    std::transform(tail.begin(), tail.end(), tail.begin(), [](unsigned char c) { return std::tolower(c); });
    return tail == suffix;
  };
  if (ends_with(".json")) return DatasetFormat::kShareGpt;
  if (ends_with(".csv")) return DatasetFormat::kTrace;
  return invalid_argument("--dataset: cannot tell the format of '" + path +
                          "' from its extension (.json: ShareGPT, .csv: trace); pass --dataset-format");
}

StatusOr<Dataset> load_dataset(const std::string& path, DatasetFormat format, const DatasetOptions& options) {
  MOE_ASSIGN_OR_RETURN(format, resolve_dataset_format(path, format));
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("--dataset: cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream buf;
  buf << f.rdbuf();
  if (f.bad()) return data_loss("--dataset: cannot read '" + path + "'");
  const std::string text = buf.str();
  if (format == DatasetFormat::kShareGpt) return parse_sharegpt(text, path, options);
  return parse_trace_csv(text, path, options);
}

}  // namespace moe::serve_bench
