// StopStringMatcher: held-back text, matches across chunk boundaries, several and overlapping
// stop strings, include_stop_str_in_output, UTF-8, and independence from how text is chunked.
#include "sampling/stop_strings.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

struct Streamed {
  std::string text;
  bool stopped = false;
  std::vector<std::string> pieces;  // what each push emitted
};

Streamed stream(StopStringMatcher& matcher, const std::vector<std::string>& chunks) {
  Streamed out;
  for (const std::string& chunk : chunks) {
    StopStringMatcher::PushResult r = matcher.push(chunk);
    out.text += r.text;
    out.pieces.push_back(r.text);
    if (r.stopped) {
      out.stopped = true;
      break;
    }
  }
  if (!out.stopped) out.text += matcher.flush();
  return out;
}

StopStringMatcher make(std::vector<std::string> stop, bool include = false) {
  return StopStringMatcher(stop, include);
}

TEST(StopStrings, NoStopStringsPassEverythingThrough) {
  StopStringMatcher m = make({});
  EXPECT_EQ(m.push("hello").text, "hello");
  EXPECT_EQ(m.push(" world").text, " world");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopStrings, MatchAcrossChunksHoldsBackThePrefix) {
  StopStringMatcher m = make({"STOP"});
  StopStringMatcher::PushResult r = m.push("hello ST");
  EXPECT_EQ(r.text, "hello ");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.num_held_bytes(), 2u);
  r = m.push("O");
  EXPECT_EQ(r.text, "");
  r = m.push("P and more");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(m.stop_reason(), "STOP");
  // After the stop nothing more comes out.
  r = m.push("later");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, HeldTextIsReleasedWhenItCannotMatch) {
  StopStringMatcher m = make({"STOP"});
  EXPECT_EQ(m.push("a S").text, "a ");
  EXPECT_EQ(m.push("T").text, "");
  EXPECT_EQ(m.push("x").text, "STx");
  EXPECT_EQ(m.num_held_bytes(), 0u);
}

TEST(StopStrings, TextBeforeTheStopInTheSameChunkIsEmitted) {
  StopStringMatcher m = make({"\n\n"});
  const StopStringMatcher::PushResult r = m.push("line one\n\nline two");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "line one");
}

TEST(StopStrings, IncludeStopStringInOutput) {
  StopStringMatcher m = make({"STOP"}, /*include=*/true);
  const Streamed s = stream(m, {"hello ST", "OP world"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "hello STOP");
  // Nothing is held back: the prefix is emitted either way.
  EXPECT_EQ(s.pieces[0], "hello ST");
  EXPECT_EQ(s.pieces[1], "OP");
}

TEST(StopStrings, NoMatchFlushReturnsEverything) {
  StopStringMatcher m = make({"STOP", "</s>"});
  const Streamed s = stream(m, {"it ends with ", "ST", "O", "</"});
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.text, "it ends with STO</");
}

TEST(StopStrings, SeveralStopStringsEarliestEndWins) {
  // "c" ends before "abcd" does: output stops before "c".
  StopStringMatcher m = make({"abcd", "c"});
  const StopStringMatcher::PushResult r = m.push("xxabcd");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "xxab");
  EXPECT_EQ(m.stop_reason(), "c");
  // Same end: the longer (earlier starting) one.
  StopStringMatcher n = make({"bc", "abc"});
  EXPECT_EQ(n.push("zabc").text, "z");
  EXPECT_EQ(n.stop_reason(), "abc");
}

TEST(StopStrings, OverlappingPrefixes) {
  StopStringMatcher m = make({"aab"});
  const Streamed s = stream(m, {"a", "a", "a", "b", "tail"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "a");
  EXPECT_EQ(s.pieces, (std::vector<std::string>{"", "", "a", ""}));
}

TEST(StopStrings, Utf8IsNeverSplit) {
  StopStringMatcher m = make({"é!"});
  EXPECT_EQ(m.push("café").text, "caf");  // "é" could start "é!"
  EXPECT_EQ(m.push("?").text, "é?");
  StopStringMatcher n = make({"日本語"});
  const Streamed s = stream(n, {"こんにちは日", "本", "人"});
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.text, "こんにちは日本人");
  EXPECT_EQ(s.pieces[0], "こんにちは");
  StopStringMatcher o = make({"日本語"});
  EXPECT_EQ(stream(o, {"東京は日", "本語"}).text, "東京は");
}

TEST(StopStrings, EmptyStopStringsAreIgnored) {
  StopStringMatcher m = make({"", "x"});
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_TRUE(m.push("axb").stopped);
}

TEST(StopStrings, FromSamplingParams) {
  SamplingParams params;
  params.stop = {"###"};
  params.include_stop_str_in_output = true;
  StopStringMatcher m(params);
  EXPECT_EQ(m.push("a##").text, "a##");
  EXPECT_EQ(m.push("#b").text, "#");
}

// Reference: the output for the whole text at once, by brute force over every end position.
std::string reference_output(const std::string& text, const std::vector<std::string>& stops,
                             bool include, bool* stopped) {
  for (size_t end = 1; end <= text.size(); ++end) {
    for (size_t start = 0; start < end; ++start) {  // earliest start first: longest match
      const std::string candidate = text.substr(start, end - start);
      for (const std::string& s : stops) {
        if (!s.empty() && candidate == s) {
          *stopped = true;
          return text.substr(0, include ? end : start);
        }
      }
    }
  }
  *stopped = false;
  return text;
}

TEST(StopStrings, AnyChunkingGivesTheSameOutputAsTheReference) {
  std::mt19937 gen(123);
  const std::string alphabet = "abc";
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    const int num_stops = 1 + static_cast<int>(gen() % 3);
    for (int i = 0; i < num_stops; ++i) {
      std::string s;
      const int length = 1 + static_cast<int>(gen() % 4);
      for (int j = 0; j < length; ++j) s += alphabet[gen() % 3];
      stops.push_back(s);
    }
    std::string text;
    const int length = static_cast<int>(gen() % 30);
    for (int j = 0; j < length; ++j) text += alphabet[gen() % 3];
    const bool include = gen() % 2 == 0;

    bool expected_stopped = false;
    const std::string expected = reference_output(text, stops, include, &expected_stopped);
    std::vector<std::string> chunks;
    for (size_t pos = 0; pos < text.size();) {
      const size_t n = 1 + gen() % 5;
      chunks.push_back(text.substr(pos, n));
      pos += n;
    }
    StopStringMatcher m(stops, include);
    const Streamed s = stream(m, chunks);
    ASSERT_EQ(s.text, expected) << "trial " << trial << " text " << text;
    ASSERT_EQ(s.stopped, expected_stopped) << "trial " << trial;
    if (!include) {
      // Nothing emitted so far ever contains a stop string.
      std::string so_far;
      for (const std::string& piece : s.pieces) {
        so_far += piece;
        for (const std::string& stop : stops) {
          ASSERT_EQ(so_far.find(stop), std::string::npos) << "trial " << trial;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
