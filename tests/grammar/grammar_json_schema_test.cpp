// JSON Schema front end: documents each schema's grammar must accept and reject (written by
// hand from the JSON Schema spec), whitespace modes, and errors that name the schema path.
// grammar_ajv_test checks the other direction against ajv.
#include <gtest/gtest.h>

#include "grammar/grammar_error.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

using test::accepts;
using test::byte_grammar;

struct Case {
  const char* schema;
  std::vector<const char*> accepted;
  std::vector<const char*> rejected;
};

const Case kCases[] = {
    {R"({"type":"string"})",
     {R"("")", R"("a b")", R"("\"q\" \\ \n")", "\"\xC3\xA9\""},
     {R"(a)", R"("a)", "\"\n\"", R"("\x")", R"(1)"}},
    {R"({"type":"string","minLength":2,"maxLength":3})",
     {R"("ab")", R"("abc")", "\"\xC3\xA9\xC3\xA9\"", R"("\n\t")"},
     {R"("a")", R"("abcd")", R"("")"}},
    {R"({"type":"integer"})", {"0", "-7", "1234567890123"}, {"01", "-0", "1.5", "1e3", "+1", ""}},
    {R"({"type":"integer","minimum":-12,"maximum":305})",
     {"-12", "-1", "0", "9", "99", "305", "300"},
     {"-13", "306", "310", "1000", "-100"}},
    {R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":100})",
     {"1", "99", "50"},
     {"0", "100", "-1"}},
    {R"({"type":"integer","minimum":1000})",
     {"1000", "9999", "10000", "123456789"},
     {"999", "0", "-1000"}},
    {R"({"type":"integer","maximum":-5})", {"-5", "-6", "-100000"}, {"-4", "0", "5"}},
    {R"({"type":"number"})",
     {"0", "-0.5", "3.14", "1e10", "2E-3", "-1.5e+7"},
     {".5", "1.", "01", "1e", "--1"}},
    {R"({"type":"number","minimum":0,"maximum":10})",
     {"0", "0.0", "5.5", "10", "10.000", "9.999"},
     {"-0.1", "10.5", "10.01", "11", "-1"}},
    {R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":3})",
     {"-1.99", "-1", "2.999", "0"},
     {"-2", "-2.0", "3", "3.0", "3.1", "-2.01"}},
    {R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}},
    {R"({"type":"null"})", {"null"}, {"nul", "None"}},
    {R"({"enum":["red","green",3,null,{"a":[1]}]})",
     {R"("red")", R"("green")", "3", "null", R"({"a":[1]})"},
     {R"("blue")", "4", R"({"a":[2]})"}},
    {R"({"const":"fixed"})", {R"("fixed")"}, {R"("Fixed")", R"("fixed ")"}},
    {R"({"type":["string","null"]})", {R"("x")", "null"}, {"1"}},
    {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false})",
     {R"({"name":"Ann","age":30})", R"({"name": "Ann", "age": 30})"},
     {R"({"age":30,"name":"Ann"})", R"({"name":"Ann"})", R"({"name":"Ann","age":30,"x":1})",
      R"({ "name":"Ann","age":30})", R"({"name":"Ann","age":"30"})"}},
    {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["b"]})",
     {R"({"b":1})", R"({"a":0,"b":1})", R"({"b":1,"c":2})", R"({"a":0,"b":1,"c":2})"},
     {R"({})", R"({"a":0})", R"({"a":0,"c":2})", R"({"b":1,"a":0})", R"({"b":1,})"}},
    {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}})",
     {R"({})", R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":"x"})"},
     {R"({,"b":"x"})", R"({"c":1})"}},
    {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
     {R"({})", R"({"a":1,"x":true})", R"({"zz":false,"y":true})", R"({"ab":true})"},
     {R"({"x":1})", R"({"a":true})", R"({"a":1,"a":true})"}},
    {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
     {"[1]", "[1,2]", "[1, 2, 3]"},
     {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}},
    {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}]})",
     {R"([])", R"(["a"])", R"(["a",1])"},
     {R"([1])", R"(["a",1,2])", R"(["a","b"])"}},
    {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"null"},"minItems":2})",
     {R"(["a",null])", R"(["a",null,null])"},
     {R"(["a"])", R"(["a",1])", R"([null,null])"}},
    {R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"string"}}]})",
     {"1", R"(["a"])", "[]"},
     {R"("a")", "[1]"}},
    {R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k","x"]},{"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]})",
     {R"({"k":"a","x":1})", R"({"k":"b"})"},
     {R"({"k":"a"})", R"({"k":"c"})"}},
    {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]})",
     {R"({"a":1,"b":"x"})"},
     {R"({"a":1})", R"({"b":"x"})"}},
    {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"additionalProperties":false},{"properties":{"b":{},"c":{}},"required":["b"]}]})",
     {R"({"b":"x"})", R"({"a":1,"b":"x"})"},
     {R"({"a":1,"b":"x","c":1})", R"({"b":1})"}},
    {R"({"type":"string","enum":["a",1,"b",null]})", {R"("a")", R"("b")"}, {"1", "null"}},
    {R"({"anyOf":[{"not":{}},{"type":"integer"}]})", {"1"}, {"null", R"("x")"}},
    {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
     {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
     {R"({"v":1})", R"({"v":1,"next":{"v":2}})", R"({"v":1,"next":{"v":"x","next":null}})"}},
    {R"({"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}},"required":["children"],"additionalProperties":false})",
     {R"({"children":[]})", R"({"children":[{"children":[]},{"children":[{"children":[]}]}]})"},
     {R"({"children":[{}]})"}},
    {R"({"definitions":{"c":{"type":"string","enum":["x","y"]}},"type":"array","items":{"$ref":"#/definitions/c"}})",
     {R"(["x","y","x"])"},
     {R"(["z"])"}},
    {R"({"type":"string","pattern":"^[a-z]+\\d$"})",
     {R"("abc1")"},
     {R"("abc")", R"("Abc1")", R"("1")"}},
    {R"({"type":"string","pattern":"\\d{3}"})",
     {R"("123")", R"("a123b")", R"("xx9999")"},
     {R"("12")", R"("a1b2c3")"}},
    {R"({"type":"string","pattern":"^a\"b\\\\$"})", {R"("a\"b\\")"}, {R"("a"b\")"}},
    {R"({"type":"string","format":"date"})",
     {R"("2024-02-29")", R"("2023-12-31")", R"("2000-02-29")"},
     {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")", R"("23-01-01")"}},
    {R"({"type":"string","format":"time"})",
     {R"("23:59:59Z")", R"("00:00:00.123+05:30")"},
     {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:00:00")"}},
    {R"({"type":"string","format":"date-time"})",
     {R"("2024-01-15T10:20:30Z")", R"("2024-01-15T10:20:30.5-08:00")"},
     {R"("2024-01-15 10:20:30Z")", R"("2024-01-15")"}},
    {R"({"type":"string","format":"uuid"})",
     {R"("123e4567-e89b-12d3-a456-426614174000")"},
     {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"}},
    {R"({"type":"string","format":"email"})",
     {R"("a.b+c@example.co.uk")", R"("x@y.z")"},
     {R"("a@b")", R"("a..b@c.d")", R"("@c.d")", R"("a@-b.c")"}},
    {R"({"type":"string","format":"uri"})",
     {R"("https://example.com/a/b?x=1#f")", R"("ftp://h:21")"},
     {R"("example.com")", R"("http://")", R"("1http://a.b")"}},
    {R"({})", {"1", R"({"a":[true,null,"x"]})", R"("s")"}, {"{", "nan"}},
    {R"(true)", {"[1]"}, {"]"}},
    {R"({"type":"object","properties":{"a":{"type":"integer"}}})", {R"({"a":1})"}, {R"({"b":1})"}},
};

TEST(JsonSchema, AcceptsAndRejectsDocuments) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.schema);
    const auto grammar = byte_grammar(json_schema_grammar(std::string_view(c.schema), {}));
    for (const char* doc : c.accepted)
      EXPECT_TRUE(accepts(grammar, doc)) << "should accept " << doc;
    for (const char* doc : c.rejected)
      EXPECT_FALSE(accepts(grammar, doc)) << "should reject " << doc;
  }
}

TEST(JsonSchema, WhitespaceIsBoundedUnlessAsked) {
  const char* schema =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})";
  const auto compact = byte_grammar(json_schema_grammar(std::string_view(schema), {}));
  const auto free =
      byte_grammar(json_schema_grammar(std::string_view(schema), {.any_whitespace = true}));
  for (const char* doc : {R"({"a":[1,2]})", R"({"a": [1, 2]})"}) {
    EXPECT_TRUE(accepts(compact, doc)) << doc;
    EXPECT_TRUE(accepts(free, doc)) << doc;
  }
  for (const char* doc :
       {"{ \"a\":[1]}", "{\"a\":  [1]}", "{\n  \"a\": [\n    1\n  ]\n}", "{\"a\" :[1]}"}) {
    EXPECT_FALSE(accepts(compact, doc)) << doc;
    EXPECT_TRUE(accepts(free, doc)) << doc;
  }
}

TEST(JsonSchema, NonStrictFollowsTheSchemaDefaults) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  const auto lax = byte_grammar(json_schema_grammar(std::string_view(schema), {.strict = false}));
  EXPECT_TRUE(accepts(lax, R"({"a":1,"b":[null]})"));
  EXPECT_TRUE(accepts(lax, R"({"b":{}})"));
  EXPECT_FALSE(accepts(lax, R"({"a":1,"a":"x"})"));  // a declared key never takes another schema
}

TEST(JsonSchema, JsonObjectMode) {
  const auto g = byte_grammar(any_json_grammar({}));
  EXPECT_TRUE(accepts(g, R"({})"));
  EXPECT_TRUE(accepts(g, R"({"a":{"b":[1,-2.5e3,"x",true,false,null]}})"));
  EXPECT_FALSE(accepts(g, R"([1])"));
  EXPECT_FALSE(accepts(g, R"("x")"));
}

std::string error_of(const char* schema) {
  try {
    Pda::compile(json_schema_grammar(std::string_view(schema), {}));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, ErrorsNameThePath) {
  const struct {
    const char* schema;
    const char* expected;
  } cases[] = {
      {R"({"type":"object","properties":{"x":{"not":{"type":"string"}}}})",
       "/properties/x/not: unsupported keyword 'not'"},
      {R"s({"type":"string","pattern":"(?=a)"})s", "/pattern"},
      {R"({"type":"array","items":{"type":"string","format":"ipv9"}})",
       "/items/format: unsupported format"},
      {R"({"$ref":"#/$defs/missing"})", "points to nothing"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "no integer satisfies"},
      {R"({"type":"number","minimum":0.5})", "/minimum: non-integer bounds"},
      {R"({"type":"wat"})", "unknown type 'wat'"},
      {R"({"type":"array","uniqueItems":true})", "/uniqueItems"},
      {R"({"type":"object","properties":{"a":false},"required":["a"]})",
       "/properties/a: the schema 'false'"},
      {R"({"$defs":{"x":{"$ref":"#/$defs/x"}},"$ref":"#/$defs/x"})", "left recursion"},
      {R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})",
       "language is empty"},
      {R"({"type":"string",)", "not valid JSON"},
      {R"({"type":"array","minItems":3,"prefixItems":[{}],"items":false})", "/minItems"},
      {R"({"allOf":[{"properties":{"a":{}},"required":["a"]}],"properties":{},"additionalProperties":false})",
       "at /additionalProperties: required property 'a' is excluded"},
      {R"({"type":"string","enum":[1,2]})", "/enum: no value"},
  };
  for (const auto& c : cases) {
    const std::string error = error_of(c.schema);
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.schema << " gave: " << error;
  }
}

}  // namespace
}  // namespace pagoda::grammar
