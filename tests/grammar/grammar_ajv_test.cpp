// Cross-check against ajv (JSON Schema 2020-12 with ajv-formats, run by Node): every document the
// grammar of a schema produces — random walks through its automaton, in both whitespace modes —
// must parse as JSON and validate against the schema. Skips when Node or the npm packages
// (tests/node, installed by scripts/test.sh) are missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

// Real function and response schemas (OpenAI strict, pydantic v2, zod-to-json-schema shapes) and
// generated-looking ones covering every supported keyword.
const char* const kSchemas[] =
    {
        // OpenAI function calling, strict mode.
        R"({"type":"object","properties":{"location":{"type":"string","description":"City and country"},"unit":{"type":["string","null"],"enum":["celsius","fahrenheit",null]}},"required":["location","unit"],"additionalProperties":false})",
        // pydantic v2: Optional fields as anyOf with null, nested model in $defs, enum class, list.
        R"({"$defs":{"Address":{"properties":{"street":{"title":"Street","type":"string"},"zip":{"title":"Zip","type":"string","pattern":"^\\d{5}$"}},"required":["street","zip"],"title":"Address","type":"object"},"Role":{"enum":["admin","user","guest"],"title":"Role","type":"string"}},"properties":{"name":{"title":"Name","type":"string","minLength":1,"maxLength":20},"age":{"anyOf":[{"type":"integer","minimum":0,"maximum":130},{"type":"null"}],"default":null,"title":"Age"},"role":{"$ref":"#/$defs/Role"},"addresses":{"items":{"$ref":"#/$defs/Address"},"title":"Addresses","type":"array","maxItems":2},"score":{"type":"number","exclusiveMinimum":0,"maximum":1}},"required":["name","role","addresses","score"],"title":"User","type":"object"})",
        // zod-to-json-schema: $schema, additionalProperties false, discriminated union.
        R"({"type":"object","properties":{"shape":{"anyOf":[{"type":"object","properties":{"kind":{"type":"string","const":"circle"},"radius":{"type":"number","minimum":0}},"required":["kind","radius"],"additionalProperties":false},{"type":"object","properties":{"kind":{"type":"string","const":"rect"},"w":{"type":"integer","exclusiveMinimum":0},"h":{"type":"integer","exclusiveMinimum":0}},"required":["kind","w","h"],"additionalProperties":false}]},"id":{"type":"string","format":"uuid"},"created":{"type":"string","format":"date-time"}},"required":["shape","id","created"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"})",
        // Recursion through $ref.
        R"({"$defs":{"tree":{"type":"object","properties":{"label":{"type":"string","maxLength":4},"children":{"type":"array","items":{"$ref":"#/$defs/tree"},"maxItems":2}},"required":["label","children"],"additionalProperties":false}},"$ref":"#/$defs/tree"})",
        R"({"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"},"maxItems":2}},"required":["children"],"additionalProperties":false})",
        // Tuples, counts, formats, patterns with escapes and unanchored search.
        R"({"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"string","format":"time"},{"type":"boolean"}],"items":{"type":"integer","minimum":-50,"maximum":50},"minItems":2,"maxItems":5})",
        R"({"type":"object","properties":{"email":{"type":"string","format":"email"},"site":{"type":"string","format":"uri"},"code":{"type":"string","pattern":"^[A-Z]{2}-\\d+"},"digit":{"type":"string","pattern":"\\d"},"quote":{"type":"string","pattern":"^\"[^\"]*\"\\\\$"}},"required":["email","site","code","digit","quote"],"additionalProperties":false})",
        // Optional members in many orders, additionalProperties with a schema.
        R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"},"c":{"type":"null"},"d":{"type":"string","maxLength":3},"e":{"type":"integer"},"f":{"type":"integer"},"g":{"type":"integer"},"h":{"type":"integer","minimum":10}},"additionalProperties":{"type":"array","items":{"type":"integer"},"maxItems":2}})",
        // allOf merging, enum of mixed values, const objects.
        R"({"allOf":[{"type":"object","properties":{"kind":{"const":{"v":1,"w":[true,null]}}},"required":["kind"]},{"type":"object","properties":{"level":{"enum":[1,2.5,"three",false,null]}},"required":["level"]}]})",
        // Numbers with every bound form.
        R"({"type":"array","prefixItems":[{"type":"number","minimum":-3,"maximum":7},{"type":"number","exclusiveMinimum":-1,"exclusiveMaximum":1},{"type":"integer","exclusiveMaximum":-999},{"type":"integer","minimum":12345},{"type":"number"}],"items":false,"minItems":5})",
        // Strings with unicode and escapes, lengths.
        R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":4}})",
        // any JSON under a key, oneOf of disjoint types.
        R"({"type":"object","properties":{"payload":{},"v":{"oneOf":[{"type":"string"},{"type":"integer"},{"type":"array","items":{"type":"number"}}]}},"required":["payload","v"],"additionalProperties":false})",
        // Absent "type", inferred.
        R"({"properties":{"x":{"minimum":1,"maximum":2},"y":{"maxLength":2},"z":{"items":{"const":0}}},"required":["x","y","z"]})",
};

TEST(JsonSchemaAgainstAjv, GeneratedDocumentsValidate) {
#ifndef PAGODA_NODE
  GTEST_SKIP() << "built without Node";
#else
  const std::string node = PAGODA_NODE;
  if (node.empty() || node.find("NOTFOUND") != std::string::npos)
    GTEST_SKIP() << "no node executable";
  const auto script = pagoda::test::source_dir() / "tests/node/grammar_ajv_check.js";
  std::mt19937 rng(29);
  nlohmann::json cases = nlohmann::json::array();
  size_t num_documents = 0;
  for (const char* schema : kSchemas) {
    for (const bool any_whitespace : {false, true}) {
      const auto grammar = test::byte_grammar(
          json_schema_grammar(std::string_view(schema), {.any_whitespace = any_whitespace}));
      nlohmann::json docs = nlohmann::json::array();
      for (int i = 0; i < 60; ++i) {
        if (auto doc = test::random_sentence(grammar, rng, 1500)) docs.push_back(*doc);
      }
      EXPECT_GE(docs.size(), 5u) << "too few walks finished for " << schema;
      num_documents += docs.size();
      cases.push_back({{"schema", nlohmann::json::parse(schema)}, {"documents", docs}});
    }
  }
  const std::string dir = ::testing::TempDir();
  const std::string in_path = dir + "/grammar_ajv_in.json";
  const std::string out_path = dir + "/grammar_ajv_out.json";
  std::ofstream(in_path) << cases.dump();
  const std::string command =
      "'" + node + "' '" + script.string() + "' '" + in_path + "' '" + out_path + "'";
  const int status = std::system(command.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    GTEST_SKIP() << "ajv is not installed in tests/node";
  ASSERT_EQ(status, 0) << command;
  std::ifstream out(out_path);
  const auto verdicts = nlohmann::json::parse(out);
  ASSERT_EQ(verdicts.size(), cases.size());
  size_t checked = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t d = 0; d < cases[c]["documents"].size(); ++d) {
      const auto& v = verdicts[c][d];
      EXPECT_TRUE(v["valid"].get<bool>())
          << "schema " << cases[c]["schema"].dump() << "\ndocument "
          << cases[c]["documents"][d].get<std::string>() << "\najv: " << v["error"];
      ++checked;
    }
  }
  EXPECT_EQ(checked, num_documents);
  std::printf("ajv validated %zu generated documents over %zu schemas\n", checked, cases.size());
#endif
}

}  // namespace
}  // namespace pagoda::grammar
