// Structured outputs end to end on a random-weight model, whose unconstrained output is
// gibberish: every constrained response must finish with "stop" and be what was asked for,
// checked by parsers that are not the grammar engine (nlohmann's JSON parser, std::regex,
// PCRE2).
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/pcre2_full_match.h"
#include "demo/model_generator.h"
#include "engine/structured_outputs.h"
#include "grammar/grammar_error.h"
#include "pagoda/engine.h"
#include "tiny_model.h"
#include "util/error.h"

namespace pagoda {
namespace {

using test::Pcre2FullMatch;
using test::tiny_model_dir;

Engine& engine() {
  static Engine e = [] {
    EngineArgs args;
    args.model = tiny_model_dir();
    args.max_model_len = 1024;
    args.max_num_seqs = 16;
    args.block_size = 16;
    return Engine(args);
  }();
  return e;
}

// Runs `params` with `num` seeds in one batch; returns the final outputs by seed.
std::vector<CompletionOutput> run(const SamplingParams& base, int num) {
  Engine& e = engine();
  for (int i = 0; i < num; ++i) {
    SamplingParams p = base;
    p.seed = 100 + i;
    e.add_request(std::to_string(i), "The answer is", p);
  }
  std::map<int, CompletionOutput> finished;
  while (e.has_unfinished_requests()) {
    for (const RequestOutput& out : e.step()) {
      if (out.finished) finished[std::stoi(out.request_id)] = out.outputs.front();
    }
  }
  std::vector<CompletionOutput> outputs;
  for (auto& [i, out] : finished) outputs.push_back(std::move(out));
  EXPECT_EQ(outputs.size(), static_cast<size_t>(num));
  return outputs;
}

// JSON Schema's string length: code points, not bytes.
size_t code_points(const std::string& text) {
  size_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

SamplingParams constrained(StructuredOutputsParams so) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 400;
  p.structured_outputs = std::move(so);
  return p;
}

// A schema whose every instance is short, so a random model must finish it within max_tokens.
constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "color": {"enum": ["red", "green", "blue"]},
    "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,3}$"},
             "maxItems": 3}
  },
  "required": ["name", "age", "color", "ok", "tags"],
  "additionalProperties": false
})";

TEST(StructuredOutputTest, JsonSchemaOutputParsesAndMatches) {
  StructuredOutputsParams so;
  so.json = kSchema;
  for (const CompletionOutput& out : run(constrained(so), 8)) {
    SCOPED_TRACE(out.text);
    EXPECT_EQ(out.finish_reason, "stop");
    const nlohmann::json value = nlohmann::json::parse(out.text);  // throws if not JSON
    ASSERT_TRUE(value.is_object());
    EXPECT_EQ(value.size(), 5u);
    ASSERT_TRUE(value["name"].is_string());
    EXPECT_LE(code_points(value["name"].get<std::string>()), 6u);
    ASSERT_TRUE(value["age"].is_number_integer());
    EXPECT_GE(value["age"].get<int>(), 0);
    EXPECT_LE(value["age"].get<int>(), 120);
    ASSERT_TRUE(value["color"].is_string());
    const std::string color = value["color"];
    EXPECT_TRUE(color == "red" || color == "green" || color == "blue");
    EXPECT_TRUE(value["ok"].is_boolean());
    ASSERT_TRUE(value["tags"].is_array());
    EXPECT_LE(value["tags"].size(), 3u);
    for (const auto& tag : value["tags"]) {
      ASSERT_TRUE(tag.is_string());
      EXPECT_TRUE(std::regex_match(tag.get<std::string>(), std::regex("[a-z]{1,3}")));
    }
  }
}

TEST(StructuredOutputTest, JsonObjectIsAnObject) {
  StructuredOutputsParams so;
  so.json_object = true;
  SamplingParams p = constrained(so);
  p.max_tokens = 60;  // any JSON need not end soon: check only what did
  for (const CompletionOutput& out : run(p, 4)) {
    SCOPED_TRACE(out.text);
    ASSERT_FALSE(out.text.empty());
    EXPECT_EQ(out.text.front(), '{');
    if (out.finish_reason == "stop") {
      EXPECT_TRUE(nlohmann::json::parse(out.text).is_object());
    }
  }
}

TEST(StructuredOutputTest, RegexAndChoice) {
  StructuredOutputsParams regex;
  regex.regex = "[a-c]{2,5}-[0-9]{3}";
  for (const CompletionOutput& out : run(constrained(regex), 6)) {
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_TRUE(std::regex_match(out.text, std::regex("[a-c]{2,5}-[0-9]{3}"))) << out.text;
  }
  StructuredOutputsParams choice;
  choice.choice = std::vector<std::string>{"positive", "negative", "neutral"};
  for (const CompletionOutput& out : run(constrained(choice), 6)) {
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_TRUE(out.text == "positive" || out.text == "negative" || out.text == "neutral")
        << out.text;
  }
}

// Patterns of the kinds requests send (identifiers, dates, phone numbers, enumerations, simple
// markup), written so that a random model reaches their end within max_tokens.
const char* const kRequestPatterns[] = {
    "[a-c]{2,5}-[0-9]{3}",
    "(yes|no|maybe)",
    "\\d{4}-\\d{2}-\\d{2}",
    "[01]\\d:[0-5]\\d",
    "\\+?\\d{1,3} \\d{3} \\d{4}",
    "[A-Z]{3}",
    "(ab|cd)+",
    "(foo|bar)(,(foo|bar)){0,3}",
    "#[0-9a-f]{6}",
    "v(0|[1-9]\\d?)\\.(0|[1-9]\\d?)\\.(0|[1-9]\\d?)",
    "[A-Z][a-z]{1,6} [A-Z][a-z]{1,6}",
    "\\w{3,8}@\\w{2,6}\\.(com|org|net)",
    "-?\\d{1,4}(\\.\\d{1,2})?",
    "(true|false)",
    "<b>[a-z]{1,5}</b>",
    "\\(\\d{3}\\) \\d{3}-\\d{4}",
    "[^a-z\\n]{2,4}",
    "x{2,3}y?z*",
    "(?:red|green|blue)-[0-9]{2}",
    "[a-f0-9]{8}-[a-f0-9]{4}",
    "\\[\\d(, \\d){0,3}\\]",
    "(?<year>19|20)\\d{2}",
    "\\u0041[\\u0030-\\u0039]{2}",
    "[.][*]\\.\\*",
    "a.{1,3}b",
    "[\\s\\S]{1,3}!",
    "(0|1)+",
    "(N|S) \\d{1,2}(\\.\\d)?",
    "[α-ω]{1,3}|[а-я]{1,3}",
    "\\D\\W\\d",
};

// Every regex output that finished matches its pattern under PCRE2; one cut by max_tokens is
// reported and must be a prefix of a match (PCRE2's partial match).
TEST(StructuredOutputTest, RegexOutputsMatchUnderPcre2) {
  int num_cut = 0;
  int num_checked = 0;
  for (const char* pattern : kRequestPatterns) {
    SCOPED_TRACE(pattern);
    // PCRE2 in its ECMAScript-escape mode: the patterns are written for JavaScript and Python
    // alike.
    const Pcre2FullMatch reference(pattern, PCRE2_ALT_BSUX);
    ASSERT_TRUE(reference.ok());
    StructuredOutputsParams so;
    so.regex = pattern;
    SamplingParams p = constrained(so);
    p.max_tokens = 120;
    for (const CompletionOutput& out : run(p, 2)) {
      ++num_checked;
      if (out.finish_reason == "length") {
        ++num_cut;
        EXPECT_TRUE(reference.prefix_of_match(out.text)) << "cut output '" << out.text << "'";
        continue;
      }
      EXPECT_EQ(out.finish_reason, "stop");
      EXPECT_TRUE(reference.matches(out.text)) << "output '" << out.text << "'";
    }
  }
  std::printf("%d regex outputs, %d cut at max_tokens\n", num_checked, num_cut);
  EXPECT_LE(num_cut, num_checked / 10);
}

// vLLM's detokenizer leaves out the EOS or stop token id that ends an output unless
// include_stop_str_in_output; with skip_special_tokens false its text ("<｜end▁of▁sentence｜>")
// would otherwise end every answer (and a tool-call parser would read it as content). A complete
// choice leaves only the stop tokens, so each output here ends on one.
TEST(StructuredOutputTest, TheStopTokenThatEndsTheOutputIsNotInItsText) {
  StructuredOutputsParams choice;
  choice.choice = std::vector<std::string>{"yes", "no"};
  SamplingParams p = constrained(choice);
  p.skip_special_tokens = false;
  for (const CompletionOutput& out : run(p, 3)) {
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_TRUE(out.text == "yes" || out.text == "no") << out.text;
  }
  p.include_stop_str_in_output = true;
  for (const CompletionOutput& out : run(p, 3)) {
    EXPECT_EQ(out.finish_reason, "stop");
    const bool starts = out.text.rfind("yes", 0) == 0 || out.text.rfind("no", 0) == 0;
    EXPECT_TRUE(starts && out.text.size() > 3) << "the stop token's text follows: " << out.text;
  }
}

TEST(StructuredOutputTest, GreedyEbnfFollowsTheGrammar) {
  StructuredOutputsParams so;
  so.grammar = "root ::= \"(\" item (\",\" item)* \")\"\nitem ::= [0-9] | \"x\"\n";
  SamplingParams p = constrained(so);
  p.temperature = 0.0f;
  p.max_tokens = 100;
  for (const CompletionOutput& out : run(p, 1)) {
    if (out.finish_reason == "stop") {
      EXPECT_TRUE(std::regex_match(out.text, std::regex("\\(([0-9x])(,[0-9x])*\\)"))) << out.text;
    } else {
      EXPECT_TRUE(std::regex_match(out.text, std::regex("\\(([0-9x])(,[0-9x])*,?"))) << out.text;
    }
  }
}

using Ids = std::vector<int32_t>;

// The ids among `num_rows` logit rows that `processor` leaves unmasked.
Ids allowed_ids(GrammarLogitsProcessor& processor, int64_t num_rows) {
  std::vector<float> logits(static_cast<size_t>(num_rows), 1.0f);
  processor.apply(logits.data(), num_rows);
  Ids ids;
  for (int32_t id = 0; id < num_rows; ++id) {
    if (logits[static_cast<size_t>(id)] == 1.0f) ids.push_back(id);
  }
  return ids;
}

// The processor alone, on a vocabulary small enough to list what each step must allow.
TEST(GrammarLogitsProcessorTest, MasksAdvancesAndRollsBack) {
  auto vocabulary = std::make_shared<const grammar::Vocabulary>(
      std::vector<std::string>{"a", "b", "ab", "c", "", "</s>"}, std::vector<int32_t>{5});
  grammar::GrammarCompiler compiler(vocabulary);
  GrammarLogitsProcessor processor(compiler.regex("ab?c"));
  // Ids past the vocabulary (padding rows of the embedding) are never allowed.
  constexpr int64_t kRows = 8;
  auto allowed = [&] { return allowed_ids(processor, kRows); };
  EXPECT_EQ(allowed(), (Ids{0, 2}));  // "a", "ab"
  processor.accept(0);
  EXPECT_EQ(allowed(), (Ids{1, 3}));  // "b", "c"
  processor.accept(1);
  EXPECT_EQ(allowed(), (Ids{3}));
  processor.accept(3);
  EXPECT_EQ(allowed(), (Ids{5})) << "complete: only the stop token";
  EXPECT_TRUE(processor.rollback(2));
  EXPECT_EQ(allowed(), (Ids{1, 3}));
  EXPECT_FALSE(processor.rollback(2)) << "only one token is left to undo";
  EXPECT_EQ(allowed(), (Ids{1, 3}));
  EXPECT_TRUE(processor.rollback(1));
  EXPECT_EQ(allowed(), (Ids{0, 2}));
}

// A request's stop_token_ids end a grammar where it may end, as EOS does; elsewhere they are
// masked like any token the grammar does not allow.
TEST(GrammarLogitsProcessorTest, RequestStopIdsEndTheGrammar) {
  auto vocabulary = std::make_shared<const grammar::Vocabulary>(
      std::vector<std::string>{"a", "b", "ab", "c", "", "</s>"}, std::vector<int32_t>{5});
  grammar::GrammarCompiler compiler(vocabulary);
  // Id 4 has no bytes (a special token); id 6 is a padding row past the vocabulary.
  GrammarRequestOptions options;
  options.stop_token_ids = {4, 6};
  GrammarLogitsProcessor processor(compiler.regex("ab?c"), options);
  constexpr int64_t kRows = 8;
  auto allowed = [&] { return allowed_ids(processor, kRows); };
  EXPECT_EQ(allowed(), (Ids{0, 2}));
  processor.accept(0);
  EXPECT_EQ(allowed(), (Ids{1, 3}));
  processor.accept(3);
  EXPECT_EQ(allowed(), (Ids{4, 5, 6})) << "complete: EOS and the request's stop ids";
  processor.accept(6);
  EXPECT_TRUE(processor.matcher().is_terminated());
  EXPECT_TRUE(processor.rollback(1));
  EXPECT_FALSE(processor.matcher().is_terminated());
  EXPECT_EQ(allowed(), (Ids{4, 5, 6}));
}

// With a think end, the reasoning before it is free (only EOS is held back under ignore_eos);
// the grammar applies from the token after it, and rolling back into the reasoning frees it.
TEST(GrammarLogitsProcessorTest, ConstraintStartsAfterTheThinkEnd) {
  auto vocabulary = std::make_shared<const grammar::Vocabulary>(
      std::vector<std::string>{"a", "b", "ab", "c", "</", "think>", "</s>"},
      std::vector<int32_t>{6});
  grammar::GrammarCompiler compiler(vocabulary);
  GrammarRequestOptions options;
  options.reasoning_end_token_ids = {4, 5};  // "</" "think>"
  options.masked_eos_token_ids = {6};        // ignore_eos
  GrammarLogitsProcessor processor(compiler.regex("ab?c"), options);
  constexpr int64_t kRows = 7;
  auto allowed = [&] { return allowed_ids(processor, kRows); };
  const Ids free = {0, 1, 2, 3, 4, 5};
  EXPECT_FALSE(processor.active());
  EXPECT_EQ(allowed(), free);
  for (const int32_t id : {3, 3, 5, 4, 1}) processor.accept(id);  // "think>" alone ends nothing
  EXPECT_EQ(allowed(), free);
  processor.accept(4);
  processor.accept(5);  // "</" "think>"
  EXPECT_TRUE(processor.active());
  EXPECT_EQ(allowed(), (Ids{0, 2}));
  processor.accept(2);
  EXPECT_EQ(allowed(), (Ids{3}));
  processor.accept(3);
  EXPECT_EQ(allowed(), (Ids{6}));
  EXPECT_TRUE(processor.rollback(2));
  EXPECT_EQ(allowed(), (Ids{0, 2})) << "back at the grammar's start";
  EXPECT_TRUE(processor.rollback(1));
  EXPECT_FALSE(processor.active()) << "the think end was taken back";
  EXPECT_EQ(allowed(), free);
  processor.accept(5);
  EXPECT_EQ(allowed(), (Ids{0, 2}));
}

// A request stop id ends a constrained request even when EOS is made all but impossible: the
// grammar lets the stop id through where it is complete.
TEST(StructuredOutputTest, StopTokenIdsEndTheGrammar) {
  StructuredOutputsParams so;
  so.regex = "(yes|no)-[0-9]{2}";
  SamplingParams p = constrained(so);
  constexpr int32_t kStopId = 2;  // the tiny tokenizer's <｜User｜>, a special token
  p.stop_token_ids = {kStopId};
  p.logit_bias[1] = -100.0f;  // EOS
  for (const CompletionOutput& out : run(p, 4)) {
    EXPECT_EQ(out.finish_reason, "stop");
    ASSERT_FALSE(out.token_ids.empty());
    EXPECT_EQ(out.token_ids.back(), kStopId);
    EXPECT_TRUE(std::regex_match(out.text, std::regex("(yes|no)-[0-9]{2}"))) << out.text;
  }
}

// ignore_eos with a finished grammar: the grammar allows only EOS there, so the request ends
// with "stop" (as vLLM's structured output does), instead of running on with every token masked.
TEST(StructuredOutputTest, IgnoreEosEndsWhereTheGrammarEnds) {
  StructuredOutputsParams so;
  so.choice = std::vector<std::string>{"alpha", "beta"};
  SamplingParams p = constrained(so);
  p.ignore_eos = true;
  p.max_tokens = 40;
  for (const CompletionOutput& out : run(p, 4)) {
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_TRUE(out.text == "alpha" || out.text == "beta") << out.text;
  }
}

// A reasoning model (--reasoning-parser deepseek_r1): the grammar waits for "</think>" in the
// output, unless the prompt already closed the reasoning.
TEST(StructuredOutputTest, ReasoningParserDefersTheGrammar) {
  EngineArgs args;
  args.model = tiny_model_dir();
  args.max_model_len = 1024;
  args.reasoning_parser = "deepseek_r1";
  Engine e(args);
  StructuredOutputsParams so;
  so.choice = std::vector<std::string>{"alpha", "beta"};
  SamplingParams p = constrained(so);
  p.max_tokens = 24;
  auto outputs_for = [&](const std::string& prompt) {
    for (int i = 0; i < 4; ++i) {
      SamplingParams q = p;
      q.seed = 7 + static_cast<uint64_t>(i);
      e.add_request(std::to_string(i), prompt, q);
    }
    std::vector<CompletionOutput> outs;
    while (e.has_unfinished_requests()) {
      for (RequestOutput& out : e.step()) {
        if (out.finished) outs.push_back(out.outputs.front());
      }
    }
    return outs;
  };
  // Closed in the prompt: constrained from the first token.
  for (const CompletionOutput& out : outputs_for("Q?<think>\nhmm</think>\n\n")) {
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_TRUE(out.text == "alpha" || out.text == "beta") << out.text;
  }
  // Open: the random model reasons freely (and never happens to close the tag here).
  int num_free = 0;
  for (const CompletionOutput& out : outputs_for("Q?<think>\n")) {
    EXPECT_EQ(out.text.find("</think>"), std::string::npos) << out.text;
    num_free += out.text != "alpha" && out.text != "beta";
  }
  EXPECT_EQ(num_free, 4);
}

TEST(StructuredOutputTest, BadSpecsAreRefusedAtAdmission) {
  Engine& e = engine();
  StructuredOutputsParams so;
  so.json = R"({"type": "object", "properties": {"a": {"type": "strin"}}})";
  try {
    e.add_request("bad", "x", constrained(so));
    FAIL() << "an invalid schema was accepted";
  } catch (const grammar::GrammarError& error) {
    EXPECT_NE(std::string(error.what()).find("/properties/a"), std::string::npos) << error.what();
  }
  StructuredOutputsParams regex;
  regex.regex = "(ab";
  EXPECT_THROW(e.add_request("bad", "x", constrained(regex)), grammar::GrammarError);
  // Our parser would read "a{2}{3}" as (a{2}){3}; PCRE2 (and JavaScript, and Python) refuse it.
  StructuredOutputsParams pcre2_refuses;
  pcre2_refuses.regex = "a{2}{3}";
  try {
    e.add_request("bad", "x", constrained(pcre2_refuses));
    FAIL() << "a regex PCRE2 cannot compile was accepted";
  } catch (const grammar::GrammarError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("structured_outputs.regex"), std::string::npos) << message;
    EXPECT_NE(message.find("PCRE2"), std::string::npos) << message;
  }
  StructuredOutputsParams two;
  two.regex = "a";
  two.json_object = true;
  EXPECT_THROW(e.add_request("bad", "x", constrained(two)), Error);
  EXPECT_FALSE(e.has_unfinished_requests());
  // Compiling ahead refuses what admission refuses.
  EXPECT_THROW(e.prepare_request(constrained(regex)), grammar::GrammarError);
}

// A grammar compiled ahead on another thread (as the server does while the engine steps) is the
// one admission then uses: the output still follows it.
TEST(StructuredOutputTest, PreparedOnAnotherThreadThenAdmitted) {
  StructuredOutputsParams regex;
  regex.regex = "(yes|no)-[0-9]{2}";
  std::thread compile([&] { engine().prepare_request(constrained(regex)); });
  compile.join();
  for (const CompletionOutput& out : run(constrained(regex), 4)) {
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_TRUE(std::regex_match(out.text, std::regex("(yes|no)-[0-9]{2}"))) << out.text;
  }
}

}  // namespace
}  // namespace pagoda
