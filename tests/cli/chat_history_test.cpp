// The history-fitting rule of `pagoda chat` (tools/pagoda/chat_history.h), with a renderer whose
// token counts are known: one token per character of content, 3 per message for the role
// markers, 2 for the generation prompt.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/pagoda/chat_history.h"

namespace pagoda::cli {
namespace {

std::vector<int32_t> render(const nlohmann::json& messages) {
  size_t n = 2;
  for (const nlohmann::json& m : messages) n += 3 + m["content"].get<std::string>().size();
  return std::vector<int32_t>(n, 7);
}

ChatHistory history_of(const std::string& system, int num_turns, size_t chars) {
  ChatHistory h(system);
  for (int i = 0; i < num_turns; ++i) {
    h.add_user(std::string(chars, 'u') + std::to_string(i));
    h.set_answer(std::string(chars, 'a'));
  }
  return h;
}

TEST(ChatHistory, MessagesHoldTheSystemPromptAndLeaveOutAnEmptyAnswer) {
  ChatHistory h("be brief");
  h.add_user("hi");
  h.set_answer("hello");
  h.add_user("again");
  const nlohmann::json m = h.messages();
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[1]["content"], "hi");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[3]["role"], "user");
  EXPECT_EQ(m[3]["content"], "again");
  h.clear();
  EXPECT_EQ(h.messages().size(), 1u);  // /reset keeps the system prompt
  EXPECT_EQ(ChatHistory().messages().size(), 0u);
}

TEST(ChatHistory, AShortConversationKeepsEveryTurnAndTheAnswerGetsTheRoomLeft) {
  ChatHistory h = history_of("", 2, 10);  // 2 + 2 * (14 + 13) = 56 tokens
  h.add_user("q");                        // + 4 = 60
  const ChatFit fit = fit_history(h, render, 512, 100, std::nullopt);
  EXPECT_TRUE(fit.fits);
  EXPECT_EQ(fit.num_dropped_turns, 0);
  EXPECT_EQ(fit.prompt_ids.size(), 60u);
  EXPECT_EQ(fit.max_tokens, 512 - 60);
  EXPECT_EQ(h.num_turns(), 3u);
}

TEST(ChatHistory, AMaxTokensCapLimitsTheAnswer) {
  ChatHistory h;
  h.add_user("q");
  EXPECT_EQ(fit_history(h, render, 512, 50, 50).max_tokens, 50);
  EXPECT_EQ(fit_history(h, render, 40, 20, 1000).max_tokens, 40 - 6);
}

TEST(ChatHistory, TheOldestTurnsAreDroppedUntilTheReserveFitsAndTheSystemPromptStays) {
  // System: 3 + 6 = 9. Each old turn: (3 + 21) + (3 + 20) = 47. Newest question: 3 + 1.
  ChatHistory h = history_of("system", 5, 20);
  h.add_user("q");
  const int64_t context = 128;
  const ChatFit fit = fit_history(h, render, context, 64, std::nullopt);
  // 2 + 9 + 4 = 15 with no old turn, 62 with one, 109 with two: one old turn leaves 66 >= 64.
  EXPECT_TRUE(fit.fits);
  EXPECT_EQ(fit.num_dropped_turns, 4);
  EXPECT_EQ(fit.prompt_ids.size(), 62u);
  EXPECT_EQ(fit.max_tokens, context - 62);
  ASSERT_EQ(h.num_turns(), 2u);
  EXPECT_EQ(h.turns()[0].user, std::string(20, 'u') + "4");  // the newest of the old turns
  EXPECT_EQ(h.turns()[1].user, "q");
  EXPECT_EQ(h.messages()[0]["role"], "system");
}

TEST(ChatHistory, TheNewestQuestionIsKeptEvenWhenItLeavesLessThanTheReserve) {
  ChatHistory h = history_of("", 3, 10);
  h.add_user(std::string(90, 'x'));  // 2 + 93 = 95 tokens alone
  const ChatFit fit = fit_history(h, render, 100, 50, std::nullopt);
  EXPECT_TRUE(fit.fits);
  EXPECT_EQ(fit.num_dropped_turns, 3);
  EXPECT_EQ(h.num_turns(), 1u);
  EXPECT_EQ(fit.max_tokens, 5);
}

TEST(ChatHistory, AQuestionThatFillsTheContextAloneDoesNotFit) {
  ChatHistory h = history_of("", 1, 10);
  h.add_user(std::string(200, 'x'));
  const ChatFit fit = fit_history(h, render, 100, 50, std::nullopt);
  EXPECT_FALSE(fit.fits);
  EXPECT_EQ(fit.max_tokens, 0);
  EXPECT_EQ(h.num_turns(), 1u);  // the caller drops it
}

TEST(ChatHistory, TheReserveIsTheCapOr256AndAtMostHalfTheContext) {
  EXPECT_EQ(answer_reserve(4096, std::nullopt), 256);
  EXPECT_EQ(answer_reserve(4096, 100), 100);
  EXPECT_EQ(answer_reserve(512, 1024), 256);
  EXPECT_EQ(answer_reserve(128, std::nullopt), 64);
  EXPECT_EQ(answer_reserve(1, std::nullopt), 1);
}

}  // namespace
}  // namespace pagoda::cli
