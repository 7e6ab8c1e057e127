// `pagoda chat` end to end, the real binary fed through a stdin pipe on a tiny generated model:
// answers fit the context that is left, a conversation longer than the context drops its oldest
// turns and goes on, Ctrl-C (SIGINT) during an answer stops that answer and keeps the session,
// and Ctrl-C at the prompt leaves. Every wait is bounded.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "cli_process.h"

namespace pagoda::cli::testing {
namespace {

// A tiny Llama (64 hidden, 2 layers, vocab 512) with room for `positions` tokens.
std::string make_tiny_model(const Scratch& scratch, int positions) {
  const std::string dir = scratch.path("tiny");
  const RunResult made = run_pagoda({"make-model", "--preset", "tiny", "--out", dir,
                                     "--max-position-embeddings", std::to_string(positions)},
                                    scratch.dir());
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return dir;
}

TEST(ChatCli, AConversationLongerThanTheContextDropsTheOldestTurnsAndGoesOn) {
  const Scratch scratch;
  const std::string model = make_tiny_model(scratch, 512);
  PagodaProcess chat({"chat", "--model", model, "--max-model-len", "96", "--max-tokens", "24",
                      "--temperature", "0", "--ignore-eos", "--system", "be brief"},
                     scratch.dir());
  constexpr int kTurns = 6;
  for (int i = 0; i < kTurns; ++i)
    chat.write_stdin("tell me about the sea, part " + std::to_string(i) + "\n");
  chat.close_stdin();
  ASSERT_EQ(chat.wait_exit(120s), 0) << chat.err();
  const std::string err = chat.err();
  EXPECT_EQ(err.find("error"), std::string::npos) << err;
  // Every turn was answered with its full 24 tokens: the history was trimmed to leave room.
  EXPECT_EQ(count_of(err, "[answer cut at 24 tokens]"), static_cast<size_t>(kTurns)) << err;
  EXPECT_GE(count_of(err, "[context full: dropped the"), 1u) << err;
  EXPECT_EQ(count_of(err, "> "), static_cast<size_t>(kTurns + 1)) << err;  // + the one EOF ends
}

TEST(ChatCli, WithoutMaxTokensTheAnswerGetsTheContextLeft) {
  // The old fixed max_tokens 1024 failed at once on a context this small.
  const Scratch scratch;
  const std::string model = make_tiny_model(scratch, 512);
  PagodaProcess chat(
      {"chat", "--model", model, "--max-model-len", "64", "--temperature", "0", "--ignore-eos"},
      scratch.dir());
  chat.write_stdin("hello there\n");
  chat.close_stdin();
  ASSERT_EQ(chat.wait_exit(120s), 0) << chat.err();
  const std::string err = chat.err();
  EXPECT_EQ(err.find("error"), std::string::npos) << err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex(R"(\[answer cut at (\d+) tokens\])"))) << err;
  const int answer_tokens = std::stoi(m[1]);
  EXPECT_GT(answer_tokens, 32);  // the prompt is a handful of tokens: the rest of 64 is the answer
  EXPECT_LT(answer_tokens, 64);
}

TEST(ChatCli, AMessageLongerThanTheContextIsRefusedAndTheSessionGoesOn) {
  const Scratch scratch;
  const std::string model = make_tiny_model(scratch, 512);
  PagodaProcess chat({"chat", "--model", model, "--max-model-len", "48", "--max-tokens", "4",
                      "--temperature", "0", "--ignore-eos"},
                     scratch.dir());
  std::string long_message;
  for (int i = 0; i < 40; ++i) long_message += "word" + std::to_string(i) + " ";
  chat.write_stdin(long_message + "\nshort\n");
  chat.close_stdin();
  ASSERT_EQ(chat.wait_exit(120s), 0) << chat.err();
  const std::string err = chat.err();
  EXPECT_NE(err.find("send a shorter one"), std::string::npos) << err;
  EXPECT_EQ(count_of(err, "[answer cut at 4 tokens]"), 1u) << err;
}

TEST(ChatCli, CtrlCStopsTheAnswerAndKeepsTheSessionThenLeavesAtThePrompt) {
  const Scratch scratch;
  // Room for an answer of tens of thousands of tokens: it runs until it is stopped.
  const std::string model = make_tiny_model(scratch, 65536);
  PagodaProcess chat({"chat", "--model", model, "--max-model-len", "65536", "--max-num-seqs", "1",
                      "--kv-cache-space", "64MiB", "--temperature", "0", "--ignore-eos"},
                     scratch.dir());
  ASSERT_TRUE(chat.wait_until([&] { return count_of(chat.err(), "> ") == 1; }, 120s)) << chat.err();

  for (int answer = 1; answer <= 2; ++answer) {
    const size_t shown = chat.out().size();
    chat.write_stdin("tell me a very long story\n");
    ASSERT_TRUE(chat.wait_until([&] { return chat.out().size() >= shown + 40; }, 60s))
        << "no answer is streaming: " << chat.err();
    chat.send_signal(SIGINT);
    ASSERT_TRUE(chat.wait_until(
        [&] { return count_of(chat.err(), "[answer stopped]") == static_cast<size_t>(answer); },
        30s))
        << chat.err();
    ASSERT_TRUE(chat.running()) << "SIGINT during an answer ended the session: " << chat.err();
    ASSERT_TRUE(chat.wait_until(
        [&] { return count_of(chat.err(), "> ") == static_cast<size_t>(answer + 1); }, 30s))
        << chat.err();
  }
  // The answers were cut short, not run to the end of the context.
  EXPECT_EQ(chat.err().find("[answer cut at"), std::string::npos) << chat.err();

  chat.send_signal(SIGINT);  // at the prompt: leave
  EXPECT_EQ(chat.wait_exit(30s), 0) << chat.err();
  EXPECT_EQ(chat.err().find("error"), std::string::npos) << chat.err();
}

TEST(ChatCli, ExitAndResetCommands) {
  const Scratch scratch;
  const std::string model = make_tiny_model(scratch, 512);
  PagodaProcess chat({"chat", "--model", model, "--max-model-len", "128", "--max-tokens", "3",
                      "--temperature", "0", "--ignore-eos"},
                     scratch.dir());
  chat.write_stdin("one\n/reset\ntwo\n/exit\nthree\n");  // "three" is never read
  ASSERT_EQ(chat.wait_exit(120s), 0) << chat.err();
  EXPECT_EQ(count_of(chat.err(), "[answer cut at 3 tokens]"), 2u) << chat.err();
}

}  // namespace
}  // namespace pagoda::cli::testing
