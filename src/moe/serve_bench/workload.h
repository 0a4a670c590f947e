// The workloads of `moe bench serve`, and the prompts of the two that a server's
// prefix cache can serve from earlier requests (single-turn ShareGPT prompts share
// nothing, so they measure no reuse):
//
//   single         one request per dataset row (dataset.h); today's default.
//   multi-turn     conversations of T turns. Turn 1's prompt is the first user
//                  message; turn k's is turn k-1's prompt + the answer the server
//                  streamed for it + kTurnSeparator + the next user message. On a chat
//                  endpoint the same conversation is sent as `messages` (user,
//                  assistant, user, ...); the plain chat template joins their contents
//                  with "\n\n", the same text. Turns of one conversation are sequential.
//   shared-prefix  every request is one system prompt of N tokens + kTurnSeparator + a
//                  different question (chat: a system message and a user message).
//
// User messages and questions are the first human turns of a ShareGPT file (sampled as
// the single workload samples them: shuffled with the seed, too long ones dropped),
// else synthetic_message() text of kSyntheticMessageWords words.
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moe/serve_bench/dataset.h"
#include "moe/serve_bench/request_output.h"
#include "moe/status.h"

namespace moe::serve_bench {

enum class Workload { kSingle, kMultiTurn, kSharedPrefix };
// "single", "multi-turn" or "shared-prefix"; InvalidArgument naming the three otherwise.
StatusOr<Workload> parse_workload(const std::string& name);
const char* workload_name(Workload workload);

// Between an answer and the next user message, and between the shared prefix and a
// question.
inline constexpr const char* kTurnSeparator = "\n\n";
// Length of a synthetic user message or question (words = tokens of the shipped tokenizer).
inline constexpr int kSyntheticMessageWords = 32;
// Chat template tokens allowed per message (role markers) when the server's own count is
// not known yet: the context check of a chat turn adds it for each message added.
inline constexpr int kChatTokensPerMessage = 4;

// One turn's request: the conversation so far as one text (completions) and as chat
// messages.
struct TurnPrompt {
  std::string prompt;
  std::vector<ChatMessage> messages;
};
// Turn 1: prompt = user_message, messages = [user].
TurnPrompt first_turn(const std::string& user_message);
// Turn k from turn k-1: prompt = previous.prompt + answer + kTurnSeparator + user_message;
// messages = previous.messages + [assistant answer, user user_message].
TurnPrompt next_turn(const TurnPrompt& previous, const std::string& answer, const std::string& user_message);

// The prompt tokens the server will count for `turn`, to check it against the context
// before sending. When `previous` (the turn before, or null) succeeded with usage
// reported: its prompt + completion tokens (the server's counts) + count(kTurnSeparator
// + user_message) - 1 (no second BOS), + 2 * kChatTokensPerMessage on a chat endpoint.
// Otherwise count(turn.prompt). The server's figures are preferred to the client's
// count of the whole text, which is only an estimate without a tokenizer (and the
// byte estimate counts synthetic words ~1.7x). Re-tokenising an answer can merge a
// token or two at its edges: the figure is an upper bound more often than not.
int estimate_turn_tokens(const TurnPrompt& turn, const std::string& user_message, bool chat,
                         const TokenCounter& count, const RequestOutput* previous);

// One conversation to run: its user messages in order (prompt = the message,
// prompt_len = its token count, output_len = max_tokens of that turn).
struct Conversation {
  int index = 0;
  std::vector<SampleRequest> turns;
};
// Deals `messages` out in order: conversation c gets messages[c * turns ... c * turns +
// turns - 1] (wrapping around when there are fewer). Precondition: messages not empty,
// num_conversations >= 1, turns >= 1.
std::vector<Conversation> deal_conversations(const std::vector<SampleRequest>& messages, int num_conversations,
                                             int turns);
// `count` synthetic_message()s of kSyntheticMessageWords words, indices first_index ..
// first_index + count - 1, each with max_tokens `output_len`; prompt_len from
// `count_tokens` (empty: one token per word + BOS, the shipped tokenizer's count).
std::vector<SampleRequest> synthetic_messages(int count, int output_len, const TokenCounter& count_tokens,
                                              uint64_t first_index = 0);

// The shared system prompt: `tokens` tokens counting BOS (tokens - 1 synthetic words,
// exact for the shipped tokenizer). With `exact` (a real tokenizer's count), words are
// added or removed until exact(text) is `tokens`, or the closest below it.
// Precondition: tokens >= 1.
std::string shared_prefix_text(int tokens, const TokenCounter& exact);
// One request per question: prompt = prefix + kTurnSeparator + question, messages =
// [system prefix, user question], output_len kept, prompt_len = prefix_tokens +
// count_tokens(kTurnSeparator + question) - 1 (one BOS).
std::vector<SampleRequest> shared_prefix_requests(const std::string& prefix, int prefix_tokens,
                                                  const std::vector<SampleRequest>& questions,
                                                  const TokenCounter& count_tokens);

}  // namespace moe::serve_bench
