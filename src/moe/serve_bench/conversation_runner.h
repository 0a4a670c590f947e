// The multi-turn workload against a server (workload.h): each conversation's turns are
// sent one after another, each turn's prompt built from the answer the server streamed
// for the one before; up to `max_concurrency` conversations run at once (a
// conversation holds its slot through its think times, as a user does).
#pragma once

#include <functional>
#include <vector>

#include "moe/serve_bench/client.h"
#include "moe/serve_bench/workload.h"

namespace moe::serve_bench {

struct ConversationRunOptions {
  int max_concurrency = 0;   // conversations in flight; <= 0: all of them
  double think_time_s = 0;   // after an answer, before the next turn is sent
  int max_model_len = 512;   // a turn with estimated prompt + max_tokens above it is not sent
  TokenCounter count_tokens;  // default: estimate_tokens
  ProgressFn progress;       // requests done / failed of the turns planned
  double progress_interval_s = 1.0;
};

struct ConversationRunResult {
  std::vector<RequestOutput> outputs;  // conversation by conversation, turn by turn
  std::vector<int> conversation_of;    // per output: Conversation::index
  std::vector<int> turn_of;            // per output: 1-based turn
  int stopped_early = 0;               // conversations whose next turn would not fit max_model_len
  int ended_by_failure = 0;            // conversations cut by a failed request (no answer to build on)
  double duration_s = 0;               // first send -> last response, think times included
};

// Starts conversations[i] no earlier than arrivals[i] seconds (non-decreasing; missing:
// 0), in order, each when a slot is free. Turn 1 is checked with its message's
// prompt_len, turn k > 1 with estimate_turn_tokens():
// if it + that turn's max_tokens exceeds max_model_len, the conversation stops there
// (stopped_early) instead of sending a request the server would refuse. A failed turn
// ends its conversation. Never throws; request failures are in the records.
ConversationRunResult run_conversations(const ClientOptions& options, const std::vector<Conversation>& conversations,
                                        const std::vector<double>& arrivals, const ConversationRunOptions& run);

}  // namespace moe::serve_bench
