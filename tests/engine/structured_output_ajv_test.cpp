// Structured outputs through the whole engine, judged by ajv (JSON Schema 2020-12 with
// ajv-formats, run by Node): a random-weight model, whose free output is gibberish, decodes
// under each of 200+ schemas — real function schemas (tests/engine/function_schemas.json:
// OpenAI-function, pydantic and zod shapes) and seeded generated ones covering every keyword the
// grammar engine supports — and every output that finished must parse and validate. Outputs cut
// by max_tokens before their grammar was complete are counted apart; every token of them must
// still have been a step the grammar allowed. Skips when Node or the npm packages (tests/node,
// installed by scripts/test.sh) are missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "engine/structured_outputs.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "pagoda/engine.h"
#include "tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

using json = nlohmann::json;

// Random JSON schemas over the keywords json_schema.h supports. Strings, arrays and numbers are
// mostly bounded, as a schema for a model's answer usually is; unbounded ones are left in
// (the punctuation bias in SamplingParams below lets a random model close them). oneOf
// branches get distinct types, since the grammar treats oneOf as anyOf (json_schema.h).
class SchemaGenerator {
 public:
  explicit SchemaGenerator(uint32_t seed) : rng_(seed) {}

  json schema() {
    defs_ = json::object();
    json root = any(0);
    // Now and then a recursive type through $defs, referenced from the root.
    if (pick(4) == 0) {
      json node = {{"type", "object"},
                   {"properties",
                    {{"v", integer()},
                     {"next", {{"anyOf", {{{"$ref", "#/$defs/node"}}, {{"type", "null"}}}}}}}},
                   {"required", {"v", "next"}},
                   {"additionalProperties", false}};
      defs_["node"] = node;
      root = {{"type", "object"},
              {"properties", {{"list", {{"$ref", "#/$defs/node"}}}, {"x", root}}},
              {"required", {"list", "x"}},
              {"additionalProperties", false}};
    }
    if (!defs_.empty()) root["$defs"] = defs_;
    return root;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }
  int range(int lo, int hi) { return lo + pick(hi - lo + 1); }

  json any(int depth) {
    if (depth >= 3) return scalar();
    switch (pick(12)) {
      case 0:
      case 1:
      case 2:
        return object(depth);
      case 3:
        return array(depth);
      case 4:
        return tuple(depth);
      case 5:
        return {{"anyOf", {any(depth + 1), any(depth + 1)}}};
      case 6:
        return one_of();
      case 7:
        return all_of();
      case 8:
        return nullable(depth);
      case 9: {
        std::string name = "d";
        name += std::to_string(defs_.size());
        defs_[name] = nullptr;  // taken before the body, which may add definitions of its own
        defs_[name] = any(depth + 1);
        return {{"$ref", "#/$defs/" + name}};
      }
      default:
        return scalar();
    }
  }

  json scalar() {
    switch (pick(9)) {
      case 0:
      case 1:
        return string();
      case 2:
        return integer();
      case 3:
        return number();
      case 4:
        return {{"type", "boolean"}};
      case 5:
        return {{"type", "null"}};
      case 6:
        return enumeration();
      case 7:
        return constant();
      default:
        return format();
    }
  }

  json string() {
    static const char* const kPatterns[] = {"^[a-z]{1,4}$", "^\\d{3}-\\d{2}$",
                                            "^(ab|cd)+x?$", "^[A-Z][a-z]{0,3}$",
                                            "[0-9]",        "^\\w{2}\\.\\w$"};
    json s = {{"type", "string"}};
    switch (pick(4)) {
      case 0:
        break;  // unbounded
      case 1:
        s["pattern"] = kPatterns[pick(static_cast<int>(std::size(kPatterns)))];
        break;
      default: {
        const int max = range(1, 8);
        s["maxLength"] = max;
        if (pick(2) == 0) s["minLength"] = range(0, max);
      }
    }
    return s;
  }

  json format() {
    static const char* const kFormats[] = {"date", "time", "date-time", "uuid", "email", "uri"};
    return {{"type", "string"}, {"format", kFormats[pick(static_cast<int>(std::size(kFormats)))]}};
  }

  json integer() {
    json s = {{"type", "integer"}};
    const int lo = range(-1000, 1000);
    const int hi = lo + range(0, 5000);
    switch (pick(4)) {
      case 0:
        s["minimum"] = lo;
        s["maximum"] = hi;
        break;
      case 1:
        s["exclusiveMinimum"] = lo;
        s["exclusiveMaximum"] = hi + 2;
        break;
      case 2:
        s["minimum"] = lo;
        break;
      default:
        s["maximum"] = hi;
        break;
    }
    return s;
  }

  json number() {
    // Bounds on numbers must be integers (json_schema.h's number ranges).
    json s = {{"type", "number"}};
    const int lo = range(-500, 500);
    switch (pick(3)) {
      case 0:
        s["minimum"] = lo;
        s["maximum"] = lo + range(0, 100);
        break;
      case 1:
        s["exclusiveMinimum"] = lo;
        s["exclusiveMaximum"] = lo + range(1, 100);
        break;
      default:
        break;  // unbounded
    }
    return s;
  }

  json enumeration() {
    static const json kValues = {"red", "green", 7, -2.5, true, false, nullptr, "a b", "é"};
    json values = json::array();
    for (const json& v : kValues) {
      if (pick(2) == 0) values.push_back(v);
    }
    if (values.empty()) values.push_back("only");
    json s = {{"enum", values}};
    return s;
  }

  json constant() {
    static const json kValues = {"fixed", 3, json{{"k", {1, nullptr}}}, json::array({true, "x"})};
    return {{"const", kValues[static_cast<size_t>(pick(static_cast<int>(kValues.size())))]}};
  }

  json object(int depth) {
    static const char* const kNames[] = {"id",    "name", "value", "items", "kind",
                                         "count", "when", "tags",  "ok",    "data"};
    json properties = json::object();
    json required = json::array();
    const int n = range(1, 4);
    for (int i = 0; i < n; ++i) {
      const std::string name = kNames[pick(static_cast<int>(std::size(kNames)))];
      if (properties.contains(name)) continue;
      properties[name] = any(depth + 1);
      if (pick(3) != 0) required.push_back(name);
    }
    json s = {{"type", "object"}, {"properties", properties}, {"required", required}};
    switch (pick(4)) {
      case 0:
        break;  // absent: none generated (strict), anything valid for ajv
      case 1:
        s["additionalProperties"] = {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}};
        break;
      default:
        s["additionalProperties"] = false;
    }
    return s;
  }

  json array(int depth) {
    json s = {{"type", "array"}, {"items", any(depth + 1)}};
    const int min = range(0, 2);
    if (min > 0) s["minItems"] = min;
    s["maxItems"] = min + range(0, 3);
    return s;
  }

  json tuple(int depth) {
    json prefix = json::array();
    for (int i = 0, n = range(1, 3); i < n; ++i) prefix.push_back(any(depth + 1));
    json s = {{"type", "array"}, {"prefixItems", prefix}, {"minItems", prefix.size()}};
    if (pick(2) == 0) {
      s["items"] = false;
    } else {
      s["items"] = scalar();
      s["maxItems"] = prefix.size() + 2;
    }
    return s;
  }

  json one_of() {
    const json kinds[] = {string(), integer(), json{{"type", "boolean"}}, json{{"type", "null"}},
                          json{{"type", "array"}, {"items", integer()}, {"maxItems", 2}}};
    const int first = pick(5);
    const int second = (first + range(1, 4)) % 5;
    return {{"oneOf", {kinds[first], kinds[second]}}};
  }

  json all_of() {
    return {{"allOf",
             {{{"type", "object"}, {"properties", {{"a", integer()}}}, {"required", {"a"}}},
              {{"type", "object"}, {"properties", {{"b", string()}}}, {"required", {"b"}}}}}};
  }

  json nullable(int depth) {
    if (pick(2) == 0) return {{"type", {"string", "null"}}, {"maxLength", range(1, 6)}};
    return {{"anyOf", {any(depth + 1), {{"type", "null"}}}}};
  }

  std::mt19937 rng_;
  json defs_;
};

constexpr int kNumGenerated = 170;
constexpr int kSamplesPerRealSchema = 2;
constexpr int kMaxTokens = 256;
constexpr size_t kTinyVocabSize = 512;  // model_preset("tiny")

struct Case {
  std::string name;
  json schema;
};

std::vector<Case> all_schemas() {
  std::vector<Case> cases;
  std::ifstream file(pagoda::test::source_dir() / "tests/engine/function_schemas.json");
  for (const json& entry : json::parse(file)) cases.push_back({entry["name"], entry["schema"]});
  SchemaGenerator generator(29);
  for (int i = 0; i < kNumGenerated; ++i) {
    cases.push_back({"generated_" + std::to_string(i), generator.schema()});
  }
  return cases;
}

// Runs ajv over `cases` ([{schema, documents}]); returns its verdicts, or null when Node or the
// packages are missing.
json run_ajv(const json& cases) {
  const std::string node = PAGODA_NODE;
  if (node.empty() || node.find("NOTFOUND") != std::string::npos) return nullptr;
  const auto script = pagoda::test::source_dir() / "tests/node/grammar_ajv_check.js";
  const std::string in_path = ::testing::TempDir() + "/engine_ajv_in.json";
  const std::string out_path = ::testing::TempDir() + "/engine_ajv_out.json";
  std::ofstream(in_path) << cases.dump();
  const std::string command =
      "'" + node + "' '" + script.string() + "' '" + in_path + "' '" + out_path + "'";
  const int status = std::system(command.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return nullptr;
  EXPECT_EQ(status, 0) << command;
  std::ifstream out(out_path);
  return json::parse(out);
}

TEST(StructuredOutputAjvTest, EveryFinishedOutputValidates) {
  const std::vector<Case> schemas = all_schemas();
  ASSERT_GE(schemas.size(), 200u);

  EngineArgs args;
  args.model = test::tiny_model_dir();
  args.max_model_len = 1024;
  args.max_num_seqs = 64;
  Engine engine(args);

  // A random model rarely picks the one token that closes a string or a structure among the
  // hundreds a grammar allows inside it; favouring those few keeps outputs short. The bias
  // changes which allowed token is drawn, never what is allowed.
  std::map<int32_t, float> closers;
  for (const char* text : {"\"", ",", "}", "]"}) {
    const std::vector<int32_t> ids = engine.encode(text, false);
    ASSERT_EQ(ids.size(), 1u) << text;
    closers[ids[0]] = 4.0f;
  }

  std::map<std::string, std::pair<size_t, int>> requests;  // request id -> schema, sample
  for (size_t s = 0; s < schemas.size(); ++s) {
    const bool real = !schemas[s].name.starts_with("generated_");
    for (int k = 0; k < (real ? kSamplesPerRealSchema : 1); ++k) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.max_tokens = kMaxTokens;
      p.seed = 1000 * static_cast<uint64_t>(s) + static_cast<uint64_t>(k);
      p.logit_bias = closers;
      p.structured_outputs = StructuredOutputsParams{};
      p.structured_outputs->json = schemas[s].schema.dump();
      const std::string id = std::to_string(s) + "." + std::to_string(k);
      try {
        engine.add_request(id, "Answer in JSON:", p);
      } catch (const std::exception& e) {
        FAIL() << schemas[s].name << " was refused: " << e.what() << "\n" << schemas[s].schema;
      }
      requests[id] = {s, k};
    }
  }
  std::map<std::string, CompletionOutput> outputs;
  while (engine.has_unfinished_requests()) {
    for (RequestOutput& out : engine.step()) {
      if (out.finished) outputs[out.request_id] = std::move(out.outputs.front());
    }
  }
  ASSERT_EQ(outputs.size(), requests.size());

  // Cut outputs: every token must have been one the grammar allowed at its step.
  const Tokenizer tokenizer = Tokenizer::from_directory(test::tiny_model_dir());
  grammar::GrammarCompiler compiler(std::make_shared<const grammar::Vocabulary>(
      vocabulary_token_bytes(tokenizer, kTinyVocabSize), std::vector<int32_t>{}));
  json cases = json::array();
  std::vector<std::string> case_ids;
  size_t num_finished = 0;
  size_t num_cut = 0;
  for (const auto& [id, out] : outputs) {
    const Case& c = schemas[requests[id].first];
    if (out.finish_reason == "length") {
      ++num_cut;
      grammar::GrammarMatcher matcher(compiler.json_schema(c.schema.dump()));
      for (const int32_t token : out.token_ids) {
        ASSERT_TRUE(matcher.accept_token(token))
            << c.name << ": token " << token << " left the grammar in " << out.text;
      }
      continue;
    }
    EXPECT_EQ(out.finish_reason, "stop") << c.name;
    ++num_finished;
    cases.push_back({{"schema", c.schema}, {"documents", {out.text}}});
    case_ids.push_back(id);
  }
  std::printf("%zu outputs over %zu schemas: %zu finished, %zu cut at max_tokens %d\n",
              outputs.size(), schemas.size(), num_finished, num_cut, kMaxTokens);
  EXPECT_LE(num_cut, outputs.size() / 10) << "too many outputs cut: raise the bias or max_tokens";

  const json verdicts = run_ajv(cases);
  if (verdicts.is_null()) GTEST_SKIP() << "Node or ajv (tests/node) is not installed";
  ASSERT_EQ(verdicts.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& v = verdicts[i][0];
    EXPECT_TRUE(v["valid"].get<bool>())
        << schemas[requests[case_ids[i]].first].name << "\nschema " << cases[i]["schema"].dump()
        << "\noutput " << cases[i]["documents"][0].get<std::string>() << "\najv: " << v["error"];
  }
}

}  // namespace
}  // namespace pagoda
