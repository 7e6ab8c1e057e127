// Tool-call parsers: each model format (vLLM's deepseek_v3, deepseek_v31, hermes) and the JSON
// of grammar-forced calls read into content and calls; the same result whether the text comes
// whole, byte by byte or cut anywhere; malformed output left as content, never a crash.
#include "server/tool_parsers/tool_call_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "server/tool_parsers/forced_tool_parser.h"

namespace pagoda::server {
namespace {

using Calls = std::vector<std::pair<std::string, std::string>>;  // name, arguments

ParsedToolOutput whole(const std::string& parser, const std::string& text) {
  auto p = make_tool_call_parser(parser);
  EXPECT_NE(p, nullptr) << parser;
  return parse_all(*p, text);
}

Calls calls_of(const ParsedToolOutput& out) {
  Calls calls;
  for (const ParsedToolCall& c : out.calls) calls.emplace_back(c.name, c.arguments);
  return calls;
}

// Feeds `pieces` one by one, checking what a streamed response needs of the deltas: a call's
// first piece (with its name) comes before any of its arguments, and indices count up from 0.
ParsedToolOutput streamed(ToolCallParser& p, const std::vector<std::string>& pieces) {
  ParsedToolOutput out;
  int next_index = 0;
  auto take = [&](const ToolParseDelta& d) {
    for (const ToolCallPiece& piece : d.calls) {
      if (piece.first) {
        EXPECT_EQ(piece.index, next_index);
        EXPECT_FALSE(piece.name.empty());
        ++next_index;
      } else {
        EXPECT_EQ(piece.index, next_index - 1) << "arguments of a call not begun";
      }
    }
    out.add(d);
  };
  for (const std::string& piece : pieces) take(p.feed(piece));
  take(p.finish());
  return out;
}

void expect_same(const ParsedToolOutput& a, const ParsedToolOutput& b, const std::string& why) {
  EXPECT_EQ(a.content, b.content) << why;
  EXPECT_EQ(calls_of(a), calls_of(b)) << why;
}

// Every way of cutting `text` in three, and byte by byte, gives the whole-text result.
void expect_every_chunking_agrees(const std::string& parser, const std::string& text) {
  const ParsedToolOutput expected = whole(parser, text);
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  auto p = make_tool_call_parser(parser);
  expect_same(streamed(*p, bytes), expected, parser + " byte by byte");
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); j += 5) {
      auto q = make_tool_call_parser(parser);
      expect_same(streamed(*q, {text.substr(0, i), text.substr(i, j - i), text.substr(j)}),
                  expected, parser + " cut at " + std::to_string(i) + "," + std::to_string(j));
    }
  }
}

const std::string kV3Calls =
    "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
    "```json\n{\"city\": \"Paris\", \"unit\": \"c\"}\n```<｜tool▁call▁end｜>\n"
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"tz\": \"CET\"}\n```"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

const std::string kV31Calls =
    "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    "{\"city\": \"Paris\", \"unit\": \"c\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time"
    "<｜tool▁sep｜>{\"tz\": \"CET\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

const std::string kHermesCalls =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
    "\"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
    "{\"tz\": \"CET\"}}\n</tool_call>";

TEST(ToolCallParsers, KnowsVllmNames) {
  for (const char* name : {"deepseek_v3", "deepseek_v31", "hermes"})
    EXPECT_NE(make_tool_call_parser(name), nullptr) << name;
  EXPECT_EQ(make_tool_call_parser("deepseek"), nullptr);
  EXPECT_EQ(tool_call_parser_names().size(), 3u);
}

TEST(ToolCallParsers, DeepSeekV3TextThenTwoCalls) {
  const ParsedToolOutput out = whole("deepseek_v3", kV3Calls);
  EXPECT_EQ(out.content, "Let me check.");
  EXPECT_EQ(calls_of(out), (Calls{{"get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}"},
                                  {"get_time", "{\"tz\": \"CET\"}"}}));
}

TEST(ToolCallParsers, DeepSeekV31TextThenTwoCalls) {
  const ParsedToolOutput out = whole("deepseek_v31", kV31Calls);
  EXPECT_EQ(out.content, "Let me check.");
  EXPECT_EQ(calls_of(out), (Calls{{"get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}"},
                                  {"get_time", "{\"tz\": \"CET\"}"}}));
}

TEST(ToolCallParsers, HermesTextThenTwoCalls) {
  const ParsedToolOutput out = whole("hermes", kHermesCalls);
  EXPECT_EQ(out.content, "Let me check.\n");
  // Re-serialized compactly, in the model's key order.
  EXPECT_EQ(calls_of(out), (Calls{{"get_weather", "{\"city\":\"Paris\",\"unit\":\"c\"}"},
                                  {"get_time", "{\"tz\":\"CET\"}"}}));
}

TEST(ToolCallParsers, PlainTextIsAllContent) {
  for (const std::string& name : tool_call_parser_names()) {
    const ParsedToolOutput out = whole(name, "No tools needed: 2 < 3 and <b>bold</b>.");
    EXPECT_EQ(out.content, "No tools needed: 2 < 3 and <b>bold</b>.") << name;
    EXPECT_TRUE(out.calls.empty()) << name;
  }
}

TEST(ToolCallParsers, StreamedDeltasConcatenateToTheWholeResult) {
  expect_every_chunking_agrees("deepseek_v3", kV3Calls);
  expect_every_chunking_agrees("deepseek_v31", kV31Calls);
  expect_every_chunking_agrees("hermes", kHermesCalls);
  expect_every_chunking_agrees("hermes",
                               "a <tool_ca b\n<tool_call>{\"name\": \"x\"}</tool_call> after");
}

TEST(ToolCallParsers, DeepSeekArgumentsStreamBeforeTheCallEnds) {
  auto p = make_tool_call_parser("deepseek_v31");
  ToolParseDelta d = p->feed("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1");
  ASSERT_EQ(d.calls.size(), 2u);
  EXPECT_TRUE(d.calls[0].first);
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(d.calls[1].arguments, "{\"a\": 1");
  d = p->feed("}<｜tool▁call");  // a possible end marker is held back
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "}");
  d = p->feed("▁end｜><｜tool▁calls▁end｜>");
  EXPECT_TRUE(d.empty());
}

TEST(ToolCallParsers, UnfinishedCallsAtTheEnd) {
  // Cut by max_tokens inside the arguments: the call as far as it got.
  ParsedToolOutput out =
      whole("deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": ");
  EXPECT_EQ(calls_of(out), (Calls{{"f", "{\"a\": "}}));
  // Cut before the name ended: no call; the text stays content.
  out =
      whole("deepseek_v3", "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>ge");
  EXPECT_EQ(out.content, "x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>ge");
  EXPECT_TRUE(out.calls.empty());
  // hermes without the closing tag: a complete object still counts, as in vLLM.
  out = whole("hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1]}}");
  EXPECT_EQ(calls_of(out), (Calls{{"f", "{\"a\":[1]}"}}));
  out = whole("hermes", "<tool_call>{\"name\": \"f\", \"argu");
  EXPECT_EQ(out.content, "<tool_call>{\"name\": \"f\", \"argu");
}

TEST(ToolCallParsers, MalformedOutputStaysContent) {
  ParsedToolOutput out = whole("deepseek_v3", "hi<｜tool▁calls▁begin｜>no call here");
  EXPECT_EQ(out.content, "hi<｜tool▁calls▁begin｜>no call here");
  EXPECT_TRUE(out.calls.empty());
  out = whole("hermes", "a<tool_call>not json</tool_call>b");
  EXPECT_EQ(out.content, "a<tool_call>not json</tool_call>b");
  EXPECT_TRUE(out.calls.empty());
  out = whole("hermes", "<tool_call>{\"arguments\": {}}</tool_call>");  // no name
  EXPECT_TRUE(out.calls.empty());
  // Arguments a model wrote as a JSON string are already OpenAI's form.
  out =
      whole("hermes", "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\":1}\"}</tool_call>");
  EXPECT_EQ(calls_of(out), (Calls{{"f", "{\"a\":1}"}}));
}

TEST(ToolCallParsers, RandomMarkerSoupNeverCrashesAndStreamsAsWhole) {
  const std::vector<std::string> atoms = {"<｜tool▁calls▁begin｜>",
                                          "<｜tool▁calls▁end｜>",
                                          "<｜tool▁call▁begin｜>",
                                          "<｜tool▁call▁end｜>",
                                          "<｜tool▁sep｜>",
                                          "\n```json\n",
                                          "\n```",
                                          "<tool_call>",
                                          "</tool_call>",
                                          "{\"name\": \"f\"",
                                          ", \"arguments\": {}}",
                                          "function",
                                          "f",
                                          " ",
                                          "\n",
                                          "{",
                                          "}",
                                          "\"",
                                          "x"};
  std::mt19937 rng(29);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    for (const std::string& name : tool_call_parser_names()) {
      const ParsedToolOutput expected = whole(name, text);
      std::vector<std::string> bytes;
      for (char c : text) bytes.emplace_back(1, c);
      auto p = make_tool_call_parser(name);
      expect_same(streamed(*p, bytes), expected, name + ": " + text);
    }
  }
}

TEST(ForcedToolParsers, NamedFunctionStreamsItsArguments) {
  NamedToolParser p("get_weather");
  ParsedToolOutput out = streamed(p, {"{\"ci", "ty\": \"Oslo\"}"});
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(calls_of(out), (Calls{{"get_weather", "{\"city\": \"Oslo\"}"}}));
  NamedToolParser empty("f");
  EXPECT_EQ(calls_of(streamed(empty, {})), (Calls{{"f", ""}}));
}

TEST(ForcedToolParsers, RequiredReadsTheArrayOfCalls) {
  const std::string text =
      "[{\"name\": \"a\", \"parameters\": {\"s\": \"}]{[\\\"\", \"n\": [1, {\"x\": 2}]}}, "
      "{\"name\": \"b\", \"parameters\": {}}]";
  RequiredToolsParser whole_parser;
  const ParsedToolOutput expected = parse_all(whole_parser, text);
  EXPECT_EQ(expected.content, "");
  EXPECT_EQ(calls_of(expected),
            (Calls{{"a", "{\"s\":\"}]{[\\\"\",\"n\":[1,{\"x\":2}]}"}, {"b", "{}"}}));
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  RequiredToolsParser byte_parser;
  expect_same(streamed(byte_parser, bytes), expected, "byte by byte");
  // Cut short before any element closed: what there is stays content.
  RequiredToolsParser cut;
  const ParsedToolOutput partial = parse_all(cut, "[{\"name\": \"a\", \"para");
  EXPECT_TRUE(partial.calls.empty());
  EXPECT_EQ(partial.content, "[{\"name\": \"a\", \"para");
}

}  // namespace
}  // namespace pagoda::server
