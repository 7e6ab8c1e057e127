// `tools`, `tool_choice` and `parallel_tool_calls` in a chat request, with vLLM's rules: the
// tools' shape is checked field by field, auto needs --enable-auto-tool-choice, a forced choice
// becomes the JSON schema that constrains generation, and every mistake is a 400 naming the field.
#include <gtest/gtest.h>

#include "server/openai_protocol.h"
#include "server/tool_choice.h"

#include "request_error_of.h"

namespace pagoda::server {
namespace {

using testing::error_of;  // request_error_of.h

const json kWeather = {{"type", "function"},
                       {"function",
                        {{"name", "get_weather"},
                         {"description", "Weather in a city"},
                         {"parameters",
                          {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}}},
                           {"required", {"city"}}}}}}};
const json kTime = {{"type", "function"}, {"function", {{"name", "get_time"}}}};

json body_with(json extra) {
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", {kWeather, kTime}}};
  if (extra.is_object()) body.update(extra);
  return body;
}

ProtocolOptions auto_tools() {
  ProtocolOptions p;
  p.enable_auto_tool_choice = true;
  p.tool_call_parser = "hermes";
  return p;
}

ChatRequest chat(const json& body, const ProtocolOptions& protocol = {}) {
  return parse_chat_request(body, SamplingParams{}, nullptr, protocol);
}

TEST(ToolChoice, AutoNeedsTheServerFlagAsInVllm) {
  // Tools without tool_choice mean auto.
  ApiError e = error_of([] { chat(body_with({})); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "tool_choice");
  EXPECT_NE(e.message.find("--enable-auto-tool-choice"), std::string::npos) << e.message;
  e = error_of([] { chat(body_with({{"tool_choice", "auto"}})); });
  EXPECT_EQ(e.param, "tool_choice");

  const ChatRequest r = chat(body_with({}), auto_tools());
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kAuto);
  EXPECT_EQ(r.tools.size(), 2u);
  EXPECT_FALSE(r.params.structured_outputs.has_value());
  // The parser must see the model's special-token call markers.
  EXPECT_FALSE(r.params.skip_special_tokens);
}

TEST(ToolChoice, NoneKeepsTheToolsForTheTemplateAndGeneratesText) {
  const ChatRequest r = chat(body_with({{"tool_choice", "none"}}));
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kNone);
  EXPECT_EQ(r.tools.size(), 2u);
  EXPECT_FALSE(r.params.structured_outputs.has_value());
  EXPECT_TRUE(r.params.skip_special_tokens);
  // No tools at all: none, as before.
  const ChatRequest plain = chat({{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(plain.tool_choice.kind, ToolChoice::Kind::kNone);
  EXPECT_TRUE(plain.tools.is_null());
}

TEST(ToolChoice, NamedFunctionIsConstrainedToItsParameters) {
  const ChatRequest r = chat(body_with(
      {{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}));
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kNamed);
  EXPECT_EQ(r.tool_choice.name, "get_weather");
  ASSERT_TRUE(r.params.structured_outputs && r.params.structured_outputs->json);
  EXPECT_EQ(json::parse(*r.params.structured_outputs->json), kWeather["function"]["parameters"]);
  // A function without parameters takes any object.
  const ChatRequest t = chat(
      body_with({{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}));
  EXPECT_EQ(json::parse(*t.params.structured_outputs->json), (json{{"type", "object"}}));
}

TEST(ToolChoice, RequiredIsAnArrayOfNamedCalls) {
  const ChatRequest r = chat(body_with({{"tool_choice", "required"}}));
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kRequired);
  ASSERT_TRUE(r.params.structured_outputs && r.params.structured_outputs->json);
  const json schema = json::parse(*r.params.structured_outputs->json);
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  const json& alternatives = schema["items"]["anyOf"];
  ASSERT_EQ(alternatives.size(), 2u);
  EXPECT_EQ(alternatives[0]["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(alternatives[0]["properties"]["parameters"], kWeather["function"]["parameters"]);
  EXPECT_EQ(alternatives[1]["properties"]["name"]["const"], "get_time");
  EXPECT_EQ(alternatives[0]["required"], (json{"name", "parameters"}));
  // parallel_tool_calls false: exactly one call.
  const ChatRequest one =
      chat(body_with({{"tool_choice", "required"}, {"parallel_tool_calls", false}}));
  EXPECT_FALSE(one.parallel_tool_calls);
  EXPECT_EQ(json::parse(*one.params.structured_outputs->json)["maxItems"], 1);
}

TEST(ToolChoice, RequiredGathersDefsAtTheTop) {
  json a = kTime, b = kWeather;
  a["function"]["parameters"] = {{"$defs", {{"Point", {{"type", "number"}}}}},
                                 {"type", "object"},
                                 {"properties", {{"p", {{"$ref", "#/$defs/Point"}}}}}};
  b["function"]["parameters"] = {{"$defs", {{"Point", {{"type", "number"}}}}}, {"type", "object"}};
  const json tools = {a, b};
  ToolChoice required;
  required.kind = ToolChoice::Kind::kRequired;
  const json schema = json::parse(forced_tool_schema(tools, required, true));
  EXPECT_EQ(schema["$defs"], (json{{"Point", {{"type", "number"}}}}));
  EXPECT_FALSE(schema["items"]["anyOf"][0]["properties"]["parameters"].contains("$defs"));
  b["function"]["parameters"]["$defs"]["Point"] = {{"type", "string"}};
  const ApiError e = error_of([&] { forced_tool_schema(json{a, b}, required, true); });
  EXPECT_EQ(e.param, "tools");
  EXPECT_NE(e.message.find("Point"), std::string::npos) << e.message;
}

TEST(ToolChoice, MistakesAre400NamingTheField) {
  auto param_of = [](const json& body) {
    return error_of([&] { chat(body, auto_tools()); }).param;
  };
  EXPECT_EQ(param_of(body_with(
                {{"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}})),
            "tool_choice.function.name");
  EXPECT_EQ(param_of(body_with({{"tool_choice", "sometimes"}})), "tool_choice");
  EXPECT_EQ(param_of(body_with({{"tool_choice", {{"type", "tool"}}}})), "tool_choice.type");
  EXPECT_EQ(param_of(body_with({{"tool_choice", 3}})), "tool_choice");
  EXPECT_EQ(param_of(body_with({{"tools", "get_weather"}})), "tools");
  EXPECT_EQ(param_of(body_with({{"tools", {{{"type", "retrieval"}}}}})), "tools[0].type");
  EXPECT_EQ(param_of(body_with({{"tools", {{{"type", "function"}}}}})), "tools[0].function");
  EXPECT_EQ(
      param_of(body_with({{"tools", {{{"type", "function"}, {"function", json::object()}}}}})),
      "tools[0].function.name");
  EXPECT_EQ(param_of(body_with(
                {{"tools",
                  {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "{}"}}}}}}})),
            "tools[0].function.parameters");
  EXPECT_EQ(
      param_of(body_with({{"tools",
                           {{{"type", "function"},
                             {"function", {{"name", "f"}, {"paramters", json::object()}}}}}}})),
      "tools[0].function.paramters");
  // A forced choice is one constraint; response_format would be a second.
  EXPECT_EQ(param_of(body_with(
                {{"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}})),
            "tool_choice");
  // Forced choices need tools.
  json no_tools = body_with({{"tool_choice", "required"}});
  no_tools.erase("tools");
  EXPECT_EQ(param_of(no_tools), "tool_choice");
}

TEST(ToolChoice, HistoryWithToolCallsAndToolResultsIsKept) {
  const json body = {
      {"messages",
       {{{"role", "user"}, {"content", "weather?"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "call_1"},
            {"type", "function"},
            {"function", {{"name", "get_weather"}, {"arguments", "{\"city\":\"Oslo\"}"}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "-3 C"}}}},
      {"tools", {kWeather}},
      {"tool_choice", "none"}};
  const ChatRequest r = chat(body);
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
}

TEST(ToolChoice, TokenizeTakesToolsForTheTemplate) {
  const TokenizeRequest r = parse_tokenize_request(
      {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", {kWeather}}});
  EXPECT_EQ(r.tools, json::array({kWeather}));
  EXPECT_EQ(error_of([] {
              parse_tokenize_request({{"prompt", "hi"}, {"tools", {kWeather}}});
            }).param,
            "tools");
  EXPECT_EQ(error_of([] {
              parse_tokenize_request({{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                      {"tools", {{{"type", "function"}}}}});
            }).param,
            "tools[0].function");
}

}  // namespace
}  // namespace pagoda::server
