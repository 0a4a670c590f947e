#include "moe/serve_bench/workload.h"

#include <algorithm>

namespace moe::serve_bench {

StatusOr<Workload> parse_workload(const std::string& name) {
  if (name == "single") return Workload::kSingle;
  if (name == "multi-turn") return Workload::kMultiTurn;
  if (name == "shared-prefix") return Workload::kSharedPrefix;
  return invalid_argument("--workload: unknown workload '" + name + "' (single, multi-turn or shared-prefix)");
}

const char* workload_name(Workload workload) {
  switch (workload) {
    case Workload::kSingle:
      return "single";
    case Workload::kMultiTurn:
      return "multi-turn";
    case Workload::kSharedPrefix:
      return "shared-prefix";
  }
  return "single";
}

TurnPrompt first_turn(const std::string& user_message) {
  TurnPrompt t;
  t.prompt = user_message;
  t.messages.push_back({"user", user_message});
  return t;
}

TurnPrompt next_turn(const TurnPrompt& previous, const std::string& answer, const std::string& user_message) {
  TurnPrompt t;
  t.prompt.reserve(previous.prompt.size() + answer.size() + user_message.size() + 2);
  t.prompt = previous.prompt;
  t.prompt += answer;
  t.prompt += kTurnSeparator;
  t.prompt += user_message;
  t.messages = previous.messages;
  t.messages.push_back({"assistant", answer});
  t.messages.push_back({"user", user_message});
  return t;
}

int estimate_turn_tokens(const TurnPrompt& turn, const std::string& user_message, bool chat,
                         const TokenCounter& count, const RequestOutput* previous) {
  if (previous != nullptr && previous->success && previous->usage_reported && previous->output_tokens >= 0) {
    const int added = count(std::string(kTurnSeparator) + user_message) - 1;  // no second BOS
    return previous->prompt_len + previous->output_tokens + added + (chat ? 2 * kChatTokensPerMessage : 0);
  }
  return count(turn.prompt);
}

std::vector<Conversation> deal_conversations(const std::vector<SampleRequest>& messages, int num_conversations,
                                             int turns) {
  std::vector<Conversation> out(static_cast<size_t>(num_conversations));
  size_t next = 0;
  for (int c = 0; c < num_conversations; ++c) {
    Conversation& conv = out[static_cast<size_t>(c)];
    conv.index = c;
    for (int t = 0; t < turns; ++t) {
      conv.turns.push_back(messages[next % messages.size()]);
      ++next;
    }
  }
  return out;
}

std::vector<SampleRequest> synthetic_messages(int count, int output_len, const TokenCounter& count_tokens,
                                              uint64_t first_index) {
  std::vector<SampleRequest> out;
  out.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    SampleRequest r;
    r.prompt = synthetic_message(kSyntheticMessageWords, first_index + static_cast<uint64_t>(i));
    r.prompt_len = count_tokens ? count_tokens(r.prompt) : kSyntheticMessageWords + 1;
    r.output_len = output_len;
    r.source_index = i;
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

std::string prefix_words(int words) { return words <= 0 ? std::string() : synthetic_prompt(words + 1, 0); }

}  // namespace

std::string shared_prefix_text(int tokens, const TokenCounter& exact) {
  if (!exact) return prefix_words(tokens - 1);
  // The most words whose count is <= tokens: each word is at least one token, so at
  // most tokens - 1 of them; the count grows with the words (binary search).
  int lo = 0, hi = std::max(0, tokens - 1);
  if (exact(prefix_words(hi)) <= tokens) return prefix_words(hi);
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (exact(prefix_words(mid)) <= tokens) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return prefix_words(lo);
}

std::vector<SampleRequest> shared_prefix_requests(const std::string& prefix, int prefix_tokens,
                                                  const std::vector<SampleRequest>& questions,
                                                  const TokenCounter& count_tokens) {
  std::vector<SampleRequest> out;
  out.reserve(questions.size());
  for (const SampleRequest& q : questions) {
    SampleRequest r = q;
    r.prompt = prefix + kTurnSeparator + q.prompt;
    r.messages = {{"system", prefix}, {"user", q.prompt}};
    std::string tail = kTurnSeparator;
    tail += q.prompt;
    r.prompt_len = prefix_tokens + (count_tokens ? count_tokens(tail) : estimate_tokens(tail)) - 1;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace moe::serve_bench
