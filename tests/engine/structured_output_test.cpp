// Structured outputs end to end on a random-weight model, whose unconstrained output is
// gibberish: every constrained response must finish with "stop" and be what was asked for,
// checked by parsers that are not the grammar engine (nlohmann's JSON parser, std::regex).
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/structured_outputs.h"
#include "grammar/grammar_error.h"
#include "demo/model_generator.h"
#include "pagoda/engine.h"
#include "tiny_model.h"
#include "util/error.h"

namespace pagoda {
namespace {

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

// The processor alone, on a vocabulary small enough to list what each step must allow.
TEST(GrammarLogitsProcessorTest, MasksAdvancesAndRollsBack) {
  auto vocabulary = std::make_shared<const grammar::Vocabulary>(
      std::vector<std::string>{"a", "b", "ab", "c", "", "</s>"}, std::vector<int32_t>{5});
  grammar::GrammarCompiler compiler(vocabulary);
  GrammarLogitsProcessor processor(compiler.regex("ab?c"));
  // Ids past the vocabulary (padding rows of the embedding) are never allowed.
  constexpr int64_t kRows = 8;
  auto allowed = [&] {
    std::vector<float> logits(kRows, 0.0f);
    processor.apply(logits.data(), kRows);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < kRows; ++id) {
      if (logits[static_cast<size_t>(id)] == 0.0f) ids.push_back(id);
    }
    return ids;
  };
  using Ids = std::vector<int32_t>;
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
