// The deepseek_r1 reasoning split, whole and streamed in every possible chunking.
#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

namespace pagoda::server {
namespace {

TEST(ReasoningParser, SplitsAtEndTag) {
  ReasoningDelta d = ReasoningParser::split("let me think</think>The answer is 4.");
  EXPECT_EQ(d.reasoning, "let me think");
  EXPECT_EQ(d.content, "The answer is 4.");
  d = ReasoningParser::split("<think>hmm</think>ok");
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "ok");
  // Never closed: all reasoning (the model ran out of tokens while thinking).
  d = ReasoningParser::split("still thinking </thi");
  EXPECT_EQ(d.reasoning, "still thinking </thi");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParser, EveryChunkingGivesTheWholeTextResult) {
  const std::string text = "<think>a < b, so </think>\n\nb is bigger </think> really";
  const ReasoningDelta whole = ReasoningParser::split(text);
  EXPECT_EQ(whole.reasoning, "a < b, so ");
  EXPECT_EQ(whole.content, "\n\nb is bigger </think> really");
  // Two cut points anywhere: three deltas.
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); j += 3) {
      ReasoningParser p;
      ReasoningDelta acc;
      for (const std::string& piece : {text.substr(0, i), text.substr(i, j - i), text.substr(j)}) {
        ReasoningDelta d = p.feed(piece);
        acc.reasoning += d.reasoning;
        acc.content += d.content;
      }
      ReasoningDelta rest = p.finish();
      acc.reasoning += rest.reasoning;
      acc.content += rest.content;
      ASSERT_EQ(acc.reasoning, whole.reasoning) << i << "," << j;
      ASSERT_EQ(acc.content, whole.content) << i << "," << j;
    }
  }
}

TEST(ReasoningParser, HoldsBackOnlyAPossibleTagPrefix) {
  ReasoningParser p;
  EXPECT_EQ(p.feed("abc</th").reasoning, "abc");
  const ReasoningDelta d = p.feed("ink>xyz");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "xyz");
}

}  // namespace
}  // namespace pagoda::server
