// The prompts of the multi-turn and shared-prefix workloads: each turn extends the one
// before by exactly its answer and the next message, shared-prefix prompts share exactly
// the prefix, synthetic messages share no prefix, the context estimate of a turn.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "contains_util.h"
#include "moe/serve_bench/workload.h"

namespace sb = moe::serve_bench;

namespace {

// One token per word + BOS, as the shipped tokenizer counts synthetic words.
int words_plus_bos(std::string_view t) {
  int words = 0;
  bool in_word = false;
  for (char c : t) {
    const bool space = c == ' ' || c == '\n';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words + 1;
}

}  // namespace

TEST(ServeBenchWorkload, ParsesTheWorkloadNames) {
  EXPECT_EQ(sb::parse_workload("single").value(), sb::Workload::kSingle);
  EXPECT_EQ(sb::parse_workload("multi-turn").value(), sb::Workload::kMultiTurn);
  EXPECT_EQ(sb::parse_workload("shared-prefix").value(), sb::Workload::kSharedPrefix);
  auto bad = sb::parse_workload("multiturn");
  ASSERT_FALSE(bad.ok());
  EXPECT_CONTAINS(bad.status().message(), "--workload: unknown workload 'multiturn' (single, multi-turn or shared-prefix)");
  for (auto w : {sb::Workload::kSingle, sb::Workload::kMultiTurn, sb::Workload::kSharedPrefix}) {
    EXPECT_EQ(sb::parse_workload(sb::workload_name(w)).value(), w);
  }
}

TEST(ServeBenchWorkload, EachTurnIsThePreviousPromptPlusTheAnswerPlusTheNextMessage) {
  const std::vector<std::string> user = {"How are you?", "Tell me more.", "And then?"};
  const std::vector<std::string> answers = {" Fine, thanks.", " There is little to tell."};
  sb::TurnPrompt t1 = sb::first_turn(user[0]);
  EXPECT_EQ(t1.prompt, "How are you?");
  ASSERT_EQ(t1.messages.size(), 1u);
  EXPECT_EQ(t1.messages[0].role, "user");
  EXPECT_EQ(t1.messages[0].content, user[0]);

  sb::TurnPrompt prev = t1;
  for (size_t k = 1; k < user.size(); ++k) {
    sb::TurnPrompt next = sb::next_turn(prev, answers[k - 1], user[k]);
    // exactly: previous prompt + answer + separator + new message, nothing else
    EXPECT_EQ(next.prompt, prev.prompt + answers[k - 1] + sb::kTurnSeparator + user[k]);
    ASSERT_EQ(next.messages.size(), prev.messages.size() + 2);
    for (size_t i = 0; i < prev.messages.size(); ++i) {
      EXPECT_EQ(next.messages[i].role, prev.messages[i].role);
      EXPECT_EQ(next.messages[i].content, prev.messages[i].content);
    }
    EXPECT_EQ(next.messages[next.messages.size() - 2].role, "assistant");
    EXPECT_EQ(next.messages[next.messages.size() - 2].content, answers[k - 1]);
    EXPECT_EQ(next.messages.back().role, "user");
    EXPECT_EQ(next.messages.back().content, user[k]);
    prev = next;
  }
  EXPECT_EQ(prev.prompt, "How are you? Fine, thanks.\n\nTell me more. There is little to tell.\n\nAnd then?");
  // the messages alternate user / assistant, starting and ending with user
  for (size_t i = 0; i < prev.messages.size(); ++i) EXPECT_EQ(prev.messages[i].role, i % 2 ? "assistant" : "user");
}

TEST(ServeBenchWorkload, TurnEstimatePrefersTheServersCounts) {
  sb::TurnPrompt t1 = sb::first_turn("a b c");
  EXPECT_EQ(sb::estimate_turn_tokens(t1, "a b c", false, words_plus_bos, nullptr), 4);
  sb::TurnPrompt t2 = sb::next_turn(t1, " d e", "f g");
  // no usage before: the client's count of "a b c d e\n\nf g", 7 words + BOS
  EXPECT_EQ(sb::estimate_turn_tokens(t2, "f g", false, words_plus_bos, nullptr), 8);
  sb::RequestOutput prev;
  prev.success = true;
  prev.usage_reported = true;
  prev.prompt_len = 10;  // the server counted more than we do (its template, its tokenizer)
  prev.output_tokens = 3;
  // 10 + 3 + ("\n\nf g" = 2 words + BOS - BOS) = 15; chat: + 2 messages x kChatTokensPerMessage
  EXPECT_EQ(sb::estimate_turn_tokens(t2, "f g", false, words_plus_bos, &prev), 15);
  EXPECT_EQ(sb::estimate_turn_tokens(t2, "f g", true, words_plus_bos, &prev), 15 + 2 * sb::kChatTokensPerMessage);
  prev.prompt_len = 1;  // fewer than the client's count (a byte estimate overcounts): the server's wins
  prev.output_tokens = 1;
  EXPECT_EQ(sb::estimate_turn_tokens(t2, "f g", false, words_plus_bos, &prev), 4);
  prev.usage_reported = false;  // no usage: the client's count
  EXPECT_EQ(sb::estimate_turn_tokens(t2, "f g", false, words_plus_bos, &prev), 8);
  prev.usage_reported = true;
  prev.success = false;  // a failed turn's usage is not used
  EXPECT_EQ(sb::estimate_turn_tokens(t2, "f g", false, words_plus_bos, &prev), 8);
}

TEST(ServeBenchWorkload, SyntheticMessagesShareNoPrefix) {
  std::set<std::string> first_words;
  for (uint64_t i = 0; i < 3000; ++i) {
    const std::string m = sb::synthetic_message(sb::kSyntheticMessageWords, i);
    EXPECT_EQ(words_plus_bos(m), sb::kSyntheticMessageWords + 1);
    first_words.insert(m.substr(0, m.find(' ', m.find(' ', m.find(' ') + 1) + 1)));
  }
  EXPECT_EQ(first_words.size(), 3000u);  // the first three words tell every index apart
  EXPECT_NE(sb::synthetic_message(8, 0).substr(0, 3), sb::synthetic_message(8, 1).substr(0, 3));

  std::vector<sb::SampleRequest> msgs = sb::synthetic_messages(6, 20, words_plus_bos);
  ASSERT_EQ(msgs.size(), 6u);
  EXPECT_EQ(msgs[2].prompt_len, sb::kSyntheticMessageWords + 1);
  EXPECT_EQ(msgs[2].output_len, 20);
}

TEST(ServeBenchWorkload, ConversationsAreDealtInOrderAndWrapAround) {
  std::vector<sb::SampleRequest> msgs(5);
  for (int i = 0; i < 5; ++i) msgs[static_cast<size_t>(i)].prompt = "m" + std::to_string(i);
  auto convs = sb::deal_conversations(msgs, 3, 2);
  ASSERT_EQ(convs.size(), 3u);
  EXPECT_EQ(convs[0].turns[0].prompt, "m0");
  EXPECT_EQ(convs[0].turns[1].prompt, "m1");
  EXPECT_EQ(convs[1].turns[0].prompt, "m2");
  EXPECT_EQ(convs[2].turns[0].prompt, "m4");
  EXPECT_EQ(convs[2].turns[1].prompt, "m0");  // wrapped
  EXPECT_EQ(convs[2].index, 2);
}

TEST(ServeBenchWorkload, SharedPrefixPromptsShareExactlyThePrefix) {
  const std::string prefix = sb::shared_prefix_text(256, {});
  EXPECT_EQ(words_plus_bos(prefix), 256);  // 255 words + BOS
  std::vector<sb::SampleRequest> questions = sb::synthetic_messages(4, 16, words_plus_bos);
  questions[1].prompt = "Why is the sky blue?";
  auto reqs = sb::shared_prefix_requests(prefix, 256, questions, words_plus_bos);
  ASSERT_EQ(reqs.size(), 4u);
  const std::string head = prefix + sb::kTurnSeparator;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].prompt, head + questions[i].prompt);
    ASSERT_EQ(reqs[i].messages.size(), 2u);
    EXPECT_EQ(reqs[i].messages[0].role, "system");
    EXPECT_EQ(reqs[i].messages[0].content, prefix);
    EXPECT_EQ(reqs[i].messages[1].role, "user");
    EXPECT_EQ(reqs[i].messages[1].content, questions[i].prompt);
    EXPECT_EQ(reqs[i].output_len, 16);
    EXPECT_EQ(reqs[i].prompt_len, words_plus_bos(reqs[i].prompt));
  }
  // Nothing beyond the prefix and its separator is shared: the questions differ from
  // their first word on.
  auto first_word = [&](const sb::SampleRequest& r) {
    const std::string q = r.prompt.substr(head.size());
    return q.substr(0, q.find(' '));
  };
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (size_t j = i + 1; j < reqs.size(); ++j) EXPECT_NE(first_word(reqs[i]), first_word(reqs[j])) << i << " " << j;
  }
}

TEST(ServeBenchWorkload, SharedPrefixMatchesAnExactTokenizer) {
  // A tokenizer that counts every word as two tokens: 256 tokens are 127 words + BOS
  // (255), the most that fit.
  auto two_per_word = [](std::string_view t) { return 2 * (words_plus_bos(t) - 1) + 1; };
  const std::string prefix = sb::shared_prefix_text(256, two_per_word);
  EXPECT_EQ(words_plus_bos(prefix) - 1, 127);
  EXPECT_EQ(sb::shared_prefix_text(1, {}), "");  // BOS alone
  EXPECT_EQ(words_plus_bos(sb::shared_prefix_text(2, {})), 2);
}

TEST(ServeBenchWorkload, SyntheticMessagesStartAtTheFirstIndex) {
  auto a = sb::synthetic_messages(3, 8, {}, 0);
  auto b = sb::synthetic_messages(3, 8, {}, 3);
  EXPECT_EQ(a[0].prompt, sb::synthetic_message(sb::kSyntheticMessageWords, 0));
  EXPECT_EQ(b[0].prompt, sb::synthetic_message(sb::kSyntheticMessageWords, 3));
  EXPECT_EQ(a[2].prompt_len, sb::kSyntheticMessageWords + 1);  // no counter: a token per word + BOS
  EXPECT_EQ(b[1].source_index, 1);
}
