// moe generate --prompts-file: several prompts generated together by the
// continuous-batching Scheduler on rank 0 (under --dp-attention spread over the
// attention groups), one JSON line per prompt or their texts.
#pragma once

#include <string>
#include <vector>

#include "moe/engine.h"

namespace moe::cli {

struct GenerateBatchInput {
  std::vector<std::string> prompts;  // non-empty texts, in output order
  int max_tokens = 128;              // >= 1
  SamplingParams sampling;           // per prompt; prompt i's seed is seed + i when set
  bool json = false;                 // one JSON object per line, else "--- i ---" + text
  double idle_heartbeat_seconds = 5;  // SchedulerOptions' (EngineFlags::idle_heartbeat_seconds)
};

// Reads FILE: one prompt per non-empty line ("\n" inside a prompt written as the two
// characters backslash n). Errors name the file: unreadable, no prompt.
StatusOr<std::vector<std::string>> read_prompts_file(const std::string& path);

// Runs the prompts on `engine` (rank 0) and prints them; a summary line to stderr
// ("[batch N prompts, P prompt tokens, G tokens in S s, R tok/s]"). Exit status.
int run_generate_batch(Engine& engine, const GenerateBatchInput& in);

}  // namespace moe::cli
