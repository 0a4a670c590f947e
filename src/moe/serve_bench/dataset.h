// Benchmark datasets: what to send (prompt), how long the answer may be (max_tokens)
// and, for traces, when.
//
// ShareGPT JSON ([{"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
// ...}]}]), as vLLM's ShareGPTDataset: shuffled with the seed, prompt = the first
// human turn, output length = the token count of the first gpt turn after it (or
// --sharegpt-output-len; files with prompts only, like the shared ones, use
// `default_output_len`). Like vLLM, pairs are dropped, not cut: prompt < 4 tokens,
// output < 4 tokens (unless fixed), prompt + output > max_model_len. Fewer usable
// pairs than requested: the usable ones are repeated (vLLM oversamples).
//
// Trace CSV (Vidur's processed Azure/Splitwise traces: arrived_at, num_prefill_tokens,
// num_decode_tokens; other columns ignored): the first N rows in file order, arrival
// = (arrived_at - first arrived_at) / time_scale, synthetic prompts of the given token
// count. Token counts are multiplied by token_scale, then clamped to fit the model:
// output = min(output, max_model_len / 2), prompt = min(prompt, max_model_len - output)
// (most Azure prompts exceed a 512-token context; dropping them would leave few).
//
// Token counts here are the client's: the TokenCounter (a real tokenizer, or
// estimate_tokens) counts what the server would, BOS included. The server's usage
// figures replace them in the results.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moe/status.h"

namespace moe::serve_bench {

using TokenCounter = std::function<int(std::string_view text)>;

// Bytes per token of the shipped Shakespeare tokenizer (sentencepiece, vocab 2048) on
// ShareGPT prompts: 175,749 bytes -> 78,154 tokens over sharegpt_v3_filtered_500.json
// (2.21 on the 1000-prompt file). Per prompt the estimate is within -43%..+52% (p1..p99).
constexpr double kDefaultBytesPerToken = 2.25;
// ceil(bytes / bytes_per_token) + 1 (BOS).
int estimate_tokens(std::string_view text, double bytes_per_token = kDefaultBytesPerToken);

// A prompt of `tokens` tokens (BOS included) for the shipped tokenizer: tokens - 1
// common English words, each one token of its vocabulary (checked in the tests),
// separated by spaces; `variant` rotates the words so that prompts differ.
std::string synthetic_prompt(int tokens, uint64_t variant);
// A user message of `words` (>= 3) of the same words, no BOS: `words` tokens of the
// shipped tokenizer. Its first three words spell `index` in base 50, so messages of
// different indices (< 125,000) differ from the first word on: no two share a prefix.
std::string synthetic_message(int words, uint64_t index);

// One message of an OpenAI chat (`messages` of /v1/chat/completions).
struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct SampleRequest {
  std::string prompt;
  // Sent as `messages` on a chat endpoint when not empty (multi-turn, shared-prefix
  // workloads); else the chat is one user message of `prompt`. `prompt` is then the
  // same conversation as one text, what a completions endpoint gets.
  std::vector<ChatMessage> messages;
  int prompt_len = 0;       // client-side token count (BOS included)
  int output_len = 0;       // max_tokens
  double arrival_s = -1.0;  // trace arrival offset; < 0: none
  int source_index = -1;    // row / conversation index in the file
  bool clamped = false;     // trace lengths cut to fit max_model_len
};

enum class DatasetFormat { kAuto, kShareGpt, kTrace };
StatusOr<DatasetFormat> parse_dataset_format(const std::string& name);  // auto|sharegpt|trace

struct DatasetOptions {
  int num_prompts = 1000;
  uint64_t seed = 0;
  int max_model_len = 512;
  std::optional<int> fixed_output_len;  // ShareGPT: --sharegpt-output-len
  int default_output_len = 128;         // ShareGPT conversations without a gpt turn
  TokenCounter count_tokens;            // default: estimate_tokens
  double trace_time_scale = 1.0;        // > 1: replay faster
  double trace_token_scale = 1.0;
};

struct Dataset {
  std::vector<SampleRequest> requests;
  bool has_arrivals = false;
  // One line for the user: what was read, kept, dropped, clamped, repeated.
  std::string summary;
};

StatusOr<Dataset> parse_sharegpt(std::string_view json_text, const std::string& name, const DatasetOptions& options);
StatusOr<Dataset> parse_trace_csv(std::string_view csv_text, const std::string& name, const DatasetOptions& options);
// kAuto -> the format by extension (.json: ShareGPT, .csv: trace); InvalidArgument
// for another extension. Other formats are returned as they are.
StatusOr<DatasetFormat> resolve_dataset_format(const std::string& path, DatasetFormat format);
// Reads `path`; kAuto picks by extension (.json: ShareGPT, .csv: trace).
StatusOr<Dataset> load_dataset(const std::string& path, DatasetFormat format, const DatasetOptions& options);

}  // namespace moe::serve_bench
