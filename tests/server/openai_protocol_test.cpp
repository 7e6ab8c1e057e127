// Request parsing and response building of the OpenAI protocol: valid bodies map to the right
// SamplingParams, and every kind of invalid body is a 400 naming the field.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "request_error_of.h"

namespace pagoda::server {
namespace {

using testing::error_of;  // request_error_of.h

CompletionRequest completion(const std::string& body) {
  return parse_completion_request(parse_json_body(body), SamplingParams{});
}
ChatRequest chat(const std::string& body) {
  return parse_chat_request(parse_json_body(body), SamplingParams{});
}

TEST(ParseJsonBody, RejectsBadJsonNonObjectsDeepNestingAndInvalidUtf8) {
  EXPECT_EQ(error_of([] { parse_json_body(""); }).status, 400);
  EXPECT_EQ(error_of([] { parse_json_body("{\"prompt\": "); }).status, 400);
  EXPECT_EQ(error_of([] { parse_json_body("[1, 2]"); }).status, 400);
  EXPECT_EQ(error_of([] { parse_json_body("{\"a\": NaN}"); }).status, 400);
  EXPECT_EQ(error_of([] { parse_json_body("{\"a\": 1e999}"); }).status, 400);
  EXPECT_EQ(error_of([] { parse_json_body(std::string("{\"a\": \"\xff\xfe\"}")); }).status, 400);
  const std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const ApiError e = error_of([&] { parse_json_body(deep); });
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("nested"), std::string::npos);
  // Brackets inside strings do not count as nesting.
  EXPECT_NO_THROW(parse_json_body("{\"a\": \"" + std::string(1000, '[') + "\"}"));
}

TEST(ParseCompletion, PromptForms) {
  EXPECT_EQ(*completion(R"({"prompt": "hi"})").prompts.at(0).text, "hi");
  const auto list = completion(R"({"prompt": ["a", "b"]})").prompts;
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(*list[1].text, "b");
  const auto ids = completion(R"({"prompt": [1, 2, 3]})").prompts;
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  const auto lists = completion(R"({"prompt": [[1], [2, 3]]})").prompts;
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_EQ(lists[1].token_ids, (std::vector<int32_t>{2, 3}));
  // A long token-id prompt is one prompt; a batch of more than kMaxPromptsPerRequest is refused.
  json many_ids = json::array(), many_texts = json::array();
  for (int i = 0; i < 1000; ++i) many_ids.push_back(i);
  for (int i = 0; i <= kMaxPromptsPerRequest; ++i) many_texts.push_back("p");
  EXPECT_EQ(completion(json({{"prompt", many_ids}}).dump()).prompts.at(0).token_ids.size(),
            many_ids.size());
  const ApiError too_many = error_of([&] { completion(json({{"prompt", many_texts}}).dump()); });
  EXPECT_EQ(too_many.status, 400);
  EXPECT_EQ(too_many.param, "prompt");
  for (const char* bad :
       {R"({})", R"({"prompt": 5})", R"({"prompt": []})", R"({"prompt": ["a", 1]})",
        R"({"prompt": [1, "a"]})", R"({"prompt": [-1]})", R"({"prompt": [[]]})",
        R"({"prompt": [4294967296]})", R"({"prompt": {"a": 1}})", R"({"prompt": [1.5]})"}) {
    const ApiError e = error_of([&] { completion(bad); });
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "prompt") << bad;
  }
}

TEST(ParseCompletion, SamplingFieldsUseOpenAiAndVllmNames) {
  const CompletionRequest r = completion(R"({
    "model": "m", "prompt": "x", "max_tokens": 7, "n": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 42,
    "stop": ["a", "b"], "stop_token_ids": [5], "min_tokens": 3, "ignore_eos": true, "logprobs": 2,
    "skip_special_tokens": false, "stream": true, "stream_options": {"include_usage": true}, "echo": false,
    "user": "u", "best_of": 2, "logit_bias": {}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.9f);
  EXPECT_EQ(r.params.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.params.repetition_penalty, 1.1f);
  EXPECT_EQ(*r.params.seed, 42u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int32_t>{5}));
  EXPECT_EQ(r.params.min_tokens, 3);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(*r.params.logprobs, 2);
  EXPECT_FALSE(r.params.skip_special_tokens);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(completion(R"({"prompt": "x", "stop": "end"})").params.stop,
            (std::vector<std::string>{"end"}));
}

// OpenAI's logit_bias and vLLM's allowed_token_ids and bad_words, on both endpoints; null is
// absent and an empty logit_bias biases nothing.
TEST(ParseCompletion, LogitBiasAllowedTokenIdsAndBadWords) {
  const CompletionRequest r = completion(R"({"prompt": "x",
    "logit_bias": {"5": 100, "17": -100, "3": 0.25}, "allowed_token_ids": [5, 17, 2],
    "bad_words": ["foo", " bar baz"]})");
  EXPECT_EQ(r.params.logit_bias,
            (std::map<int32_t, float>{{3, 0.25f}, {5, 100.0f}, {17, -100.0f}}));
  ASSERT_TRUE(r.params.allowed_token_ids.has_value());
  EXPECT_EQ(*r.params.allowed_token_ids, (std::vector<int32_t>{5, 17, 2}));
  EXPECT_EQ(r.params.bad_words, (std::vector<std::string>{"foo", " bar baz"}));
  EXPECT_TRUE(r.params.bad_words_token_ids.empty()) << "the engine tokenizes bad words";

  const ChatRequest c = chat(R"({"messages": [{"role": "user", "content": "x"}],
    "logit_bias": {"0": -1.5}, "allowed_token_ids": [0], "bad_words": ["no"]})");
  EXPECT_EQ(c.params.logit_bias, (std::map<int32_t, float>{{0, -1.5f}}));
  EXPECT_EQ(*c.params.allowed_token_ids, (std::vector<int32_t>{0}));
  EXPECT_EQ(c.params.bad_words, (std::vector<std::string>{"no"}));

  const CompletionRequest none = completion(
      R"({"prompt": "x", "logit_bias": null, "allowed_token_ids": null, "bad_words": null})");
  EXPECT_TRUE(none.params.logit_bias.empty());
  EXPECT_FALSE(none.params.allowed_token_ids.has_value());
  EXPECT_TRUE(none.params.bad_words.empty());
  EXPECT_TRUE(completion(R"({"prompt": "x", "logit_bias": {}})").params.logit_bias.empty());
}

TEST(ParseCompletion, EchoWithLogprobsAsksForPromptLogprobs) {
  // vLLM's to_sampling_params: echo + logprobs N computes N prompt logprobs too.
  const CompletionRequest echo = completion(R"({"prompt": "x", "echo": true, "logprobs": 3})");
  EXPECT_TRUE(echo.echo);
  EXPECT_EQ(*echo.params.logprobs, 3);
  ASSERT_TRUE(echo.params.prompt_logprobs.has_value());
  EXPECT_EQ(*echo.params.prompt_logprobs, 3);
  // Streamed too (only an explicit prompt_logprobs > 0 is refused with stream, as in vLLM).
  EXPECT_EQ(*completion(R"({"prompt": "x", "echo": true, "logprobs": 0, "stream": true})")
                 .params.prompt_logprobs,
            0);
  // An explicit prompt_logprobs wins; without echo logprobs leave the prompt alone.
  EXPECT_EQ(*completion(R"({"prompt": "x", "echo": true, "logprobs": 3, "prompt_logprobs": 1})")
                 .params.prompt_logprobs,
            1);
  EXPECT_FALSE(completion(R"({"prompt": "x", "logprobs": 3})").params.prompt_logprobs);
  EXPECT_FALSE(completion(R"({"prompt": "x", "echo": true})").params.prompt_logprobs);
  EXPECT_EQ(*completion(R"({"prompt": "x", "prompt_logprobs": 2})").params.prompt_logprobs, 2);
}

TEST(ParseCompletion, DefaultsComeFromGenerationConfigAndNullIsAbsent) {
  SamplingParams defaults;
  defaults.temperature = 0.6f;
  defaults.top_p = 0.95f;
  const CompletionRequest r = parse_completion_request(
      parse_json_body(R"({"prompt": "x", "temperature": null})"), defaults);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.6f);
  EXPECT_FLOAT_EQ(r.params.top_p, 0.95f);
  EXPECT_FALSE(r.max_tokens.has_value());
}

TEST(ParseCompletion, WrongTypesAndUnknownFieldsNameTheParam) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 99999999999999999999})", "max_tokens"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": 1e300})", "temperature"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 100000})", "n"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": [-3]})", "stop_token_ids"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "max_token": 5})", "max_token"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"bogus": 1}})",
       "stream_options.bogus"},
      {R"({"prompt": "x", "logit_bias": [5]})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": 100.5}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": -101}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5": "1"}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"five": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"-5": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5x": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"99999999999": 1}})", "logit_bias"},
      {R"({"prompt": "x", "allowed_token_ids": []})", "allowed_token_ids"},
      {R"({"prompt": "x", "allowed_token_ids": [3, -1]})", "allowed_token_ids"},
      {R"({"prompt": "x", "allowed_token_ids": 3})", "allowed_token_ids"},
      {R"({"prompt": "x", "bad_words": "word"})", "bad_words"},
      {R"({"prompt": "x", "bad_words": ["ok", 3]})", "bad_words"},
      {R"({"prompt": "x", "bad_words": ["ok", " "]})", "bad_words"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "model": 7})", "model"},
      {R"({"prompt": "x", "seed": 1.5})", "seed"},
      {R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs"},
      {R"({"prompt": "x", "prompt_logprobs": -1})", "prompt_logprobs"},
      {R"({"prompt": "x", "prompt_logprobs": true})", "prompt_logprobs"},
      {R"({"prompt": "x", "stream": true, "prompt_logprobs": 1})", "prompt_logprobs"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError e = error_of([&] { completion(body); });
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_FALSE(e.message.empty());
  }
}

// The server's default, as vLLM: unknown fields, top-level or nested, are ignored and named;
// fields we know but cannot honour stay a 400, since ignoring them would change the answer.
TEST(UnknownFields, AreIgnoredAndNamedUnlessStrictButUnsupportedOnesStayErrors) {
  UnknownFields lenient;
  lenient.strict = false;
  const ChatRequest c =
      parse_chat_request(parse_json_body(R"({"messages": [{"role": "user", "content": "hi"},
                                      {"role": "assistant", "content": "yo", "refusal": null,
                                       "reasoning": "it greeted me"}],
                         "reasoning_effort": "low", "cache_salt": "s", "stream": true,
                         "stream_options": {"include_usage": true, "bogus": 1}})"),
                         SamplingParams{}, &lenient);
  EXPECT_EQ(lenient.ignored,
            (std::vector<std::string>{"messages[1].refusal", "stream_options.bogus", "cache_salt",
                                      "reasoning_effort"}));
  EXPECT_EQ(c.messages[1]["reasoning_content"], "it greeted me") << "vLLM's current name";
  EXPECT_TRUE(c.include_usage);

  UnknownFields strict;
  EXPECT_EQ(error_of([&] {
              parse_completion_request(parse_json_body(R"({"prompt": "x", "max_token": 5})"),
                                       SamplingParams{}, &strict);
            }).param,
            "max_token");

  for (const char* body : {R"({"prompt": "x", "use_beam_search": true})"}) {
    UnknownFields unknown;
    unknown.strict = false;
    const ApiError e = error_of(
        [&] { parse_completion_request(parse_json_body(body), SamplingParams{}, &unknown); });
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_NE(e.message.find("not supported"), std::string::npos) << body << ": " << e.message;
  }
  // Tools with tool_choice auto (their default) need --enable-auto-tool-choice, lax or not.
  UnknownFields unknown;
  unknown.strict = false;
  EXPECT_EQ(error_of([&] {
              parse_chat_request(parse_json_body(R"({"messages": [{"role": "user", "content": "x"}],
                                      "tools": [{"type": "function", "function": {"name": "f"}}]})"),
                                 SamplingParams{}, &unknown);
            }).param,
            "tool_choice");
}

TEST(ParseChat, MessagesContentPartsAndChatFields) {
  const ChatRequest r = chat(R"({
    "model": "m",
    "messages": [{"role": "system", "content": "be brief"},
                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
    "max_completion_tokens": 9, "max_tokens": 3, "logprobs": true, "top_logprobs": 4,
    "add_generation_prompt": false, "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(r.messages.size(), 2u);
  // Parts stay a list, as sent; the engine shapes them for the template
  // (--chat-template-content-format).
  EXPECT_EQ(r.messages[1]["content"],
            json::parse(R"([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])"));
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(*r.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(*r.params.logprobs, 4);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(*chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})")
                 .params.logprobs,
            0);
  EXPECT_FALSE(
      chat(R"({"messages": [{"role": "user", "content": "x"}]})").params.logprobs.has_value());
}

TEST(ParseChat, InvalidMessages) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [5]})", "messages[0]"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": "x", "colour": 1}]})", "messages[0].colour"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools[0].function"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})",
       "chat_template_kwargs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt": "y"})", "prompt"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError e = error_of([&] { chat(body); });
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body;
  }
}

TEST(ResolveMaxTokens, DefaultsAndContextOverflowSaysByHowMuch) {
  EXPECT_EQ(resolve_max_tokens(std::nullopt, 16, 10, 100), 16);
  EXPECT_EQ(resolve_max_tokens(std::nullopt, 0, 10, 100), 90);  // chat: the rest of the context
  EXPECT_EQ(resolve_max_tokens(std::nullopt, 16, 95, 100), 5);
  EXPECT_EQ(resolve_max_tokens(50, 16, 50, 100), 50);
  const ApiError over = error_of([] { resolve_max_tokens(60, 16, 50, 100); });
  EXPECT_EQ(over.status, 400);
  EXPECT_EQ(over.param, "max_tokens");
  EXPECT_NE(over.message.find("10 over the limit"), std::string::npos) << over.message;
  const ApiError prompt = error_of([] { resolve_max_tokens(std::nullopt, 16, 130, 100); });
  EXPECT_NE(prompt.message.find("31 over the limit"), std::string::npos) << prompt.message;
  EXPECT_EQ(error_of([] { resolve_max_tokens(0, 16, 5, 100); }).param, "max_tokens");
}

TEST(CheckSamplingParams, MapsValidateMessageToParam) {
  SamplingParams p;
  p.top_p = 1.5f;
  const ApiError e = error_of([&] { check_sampling_params(p); });
  EXPECT_EQ(e.param, "top_p");
  p.top_p = 1.0f;
  p.min_tokens = 20;
  p.max_tokens = 10;
  EXPECT_EQ(error_of([&] { check_sampling_params(p); }).param, "min_tokens");
  p.min_tokens = 0;
  p.logit_bias = {{4, 150.0f}};
  EXPECT_EQ(error_of([&] { check_sampling_params(p); }).param, "logit_bias");
}

TEST(Tokenize, PromptOrMessages) {
  TokenizeRequest t = parse_tokenize_request(parse_json_body(R"({"prompt": "hi"})"));
  EXPECT_EQ(*t.prompt, "hi");
  EXPECT_TRUE(t.add_special_tokens);
  t = parse_tokenize_request(
      parse_json_body(R"({"messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_FALSE(t.add_special_tokens);
  EXPECT_EQ(t.messages.size(), 1u);
  EXPECT_EQ(error_of([] { parse_tokenize_request(parse_json_body("{}")); }).status, 400);
  std::string model;
  EXPECT_EQ(parse_detokenize_request(parse_json_body(R"({"tokens": [1, 2]})"), &model),
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(error_of([&] {
              parse_detokenize_request(parse_json_body(R"({"tokens": "x"})"), &model);
            }).param,
            "tokens");
}

TEST(Responses, ErrorShapeUsageAndSse) {
  ApiError e;
  e.message = "bad";
  e.param = "top_p";
  const json j = error_json(e);
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_EQ(j["error"]["code"], 400);
  EXPECT_TRUE(error_json(ApiError{}).at("error").at("param").is_null());

  const json u = usage_json({5, 7});
  EXPECT_EQ(u["total_tokens"], 12);
  // A token that ends inside a UTF-8 character must not break serialisation.
  const std::string event = sse_event({{"text", std::string("a\xe2\x82")}});
  EXPECT_EQ(event.rfind("data: {", 0), 0u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  EXPECT_NE(event.find("\xef\xbf\xbd"), std::string::npos);  // U+FFFD
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

TEST(Responses, LogprobsShapes) {
  std::vector<GeneratedTokenLogprobs> lps(2);
  lps[0].chosen = {5, "He", -0.5f};
  lps[0].top = {{5, "He", -0.5f}, {6, "She", -1.5f}};
  lps[1].chosen = {7, "llo", -0.25f};
  lps[1].top = {{7, "llo", -0.25f}};
  const json c = completion_logprobs_json(lps, 0, 2, 3, 2);
  EXPECT_EQ(c["tokens"], json({"He", "llo"}));
  EXPECT_EQ(c["text_offset"], json({3, 5}));
  EXPECT_DOUBLE_EQ(c["token_logprobs"][1].get<double>(), -0.25);
  EXPECT_DOUBLE_EQ(c["top_logprobs"][0]["She"].get<double>(), -1.5);
  EXPECT_EQ(c["top_logprobs"][0].size(), 2u);  // "He" is both the token and the best one

  // vLLM / OpenAI: the token itself plus the N most likely, so up to N + 1 entries; an unscored
  // position (the first prompt token of an echo) is null; -inf goes out as -9999.
  CompletionLogprobs echo(1, 0);
  echo.add_unscored("<s>", 1);
  GeneratedTokenLogprobs unlikely;
  unlikely.chosen = {9, "Z", -std::numeric_limits<float>::infinity(), 1000};
  unlikely.top = {{5, "He", -0.1f, 1}, {6, "She", -0.2f, 2}};
  echo.add(unlikely);
  EXPECT_EQ(echo.text_offset(), 4u);
  const json e = echo.to_json();
  EXPECT_EQ(e["tokens"], json({"<s>", "Z"}));
  EXPECT_TRUE(e["token_logprobs"][0].is_null());
  EXPECT_TRUE(e["top_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(e["token_logprobs"][1].get<double>(), -9999.0);
  EXPECT_EQ(e["top_logprobs"][1], json({{"Z", -9999.0}, {"He", -0.1f}}));
  EXPECT_EQ(e["text_offset"], json({0, 3}));

  // The choice's prompt_logprobs field in vLLM's shape, keyed by token id.
  std::vector<std::optional<GeneratedTokenLogprobs>> prompt(2);
  prompt[1] = unlikely;
  const json p = prompt_logprobs_json(prompt);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].is_null());
  EXPECT_EQ(p[1].size(), 3u);
  EXPECT_EQ(p[1]["9"]["rank"], 1000);
  EXPECT_EQ(p[1]["9"]["decoded_token"], "Z");
  EXPECT_DOUBLE_EQ(p[1]["9"]["logprob"].get<double>(), -9999.0);
  EXPECT_EQ(p[1]["6"]["rank"], 2);
  const json chat = chat_logprobs_json(lps, 1, 2);
  ASSERT_EQ(chat["content"].size(), 1u);
  EXPECT_EQ(chat["content"][0]["token"], "llo");
  EXPECT_EQ(chat["content"][0]["bytes"], json({108, 108, 111}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"].size(), 1u);
}

TEST(RequestIds, PrefixedAndDistinct) {
  const std::string a = random_request_id("cmpl"), b = random_request_id("cmpl");
  EXPECT_EQ(a.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 5u + 32u);
  EXPECT_NE(a, b);
}

// --max-logprobs: a request may ask for up to that many logprobs of any kind (vLLM's default
// 20); more is a 400 naming the field and the limit; -1 lifts the limit.
TEST(MaxLogprobs, BoundsEveryKindOfLogprobs) {
  const SamplingParams defaults;
  ProtocolOptions five;
  five.max_logprobs = 5;
  auto completion_with = [&](const std::string& body, const ProtocolOptions& p) {
    return parse_completion_request(parse_json_body(body), defaults, nullptr, p);
  };
  EXPECT_EQ(*completion_with(R"({"prompt": "x", "logprobs": 5})", five).params.logprobs, 5);
  for (const char* body :
       {R"({"prompt": "x", "logprobs": 6})", R"({"prompt": "x", "prompt_logprobs": 6})"}) {
    const ApiError e = error_of([&] { completion_with(body, five); });
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find("greater than max allowed: 5"), std::string::npos) << e.message;
  }
  const ApiError chat_error = error_of([&] {
    parse_chat_request(
        parse_json_body(
            R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 6})"),
        defaults, nullptr, five);
  });
  EXPECT_EQ(chat_error.param, "top_logprobs");
  // The default is vLLM's 20.
  EXPECT_EQ(*completion(R"({"prompt": "x", "logprobs": 20})").params.logprobs, 20);
  EXPECT_EQ(error_of([] { completion(R"({"prompt": "x", "logprobs": 21})"); }).param, "logprobs");
  ProtocolOptions unlimited;
  unlimited.max_logprobs = -1;
  EXPECT_EQ(*completion_with(R"({"prompt": "x", "logprobs": 1000})", unlimited).params.logprobs,
            1000);
  // check_sampling_params leaves the bound to the parser.
  SamplingParams many;
  many.logprobs = 1000;
  EXPECT_NO_THROW(check_sampling_params(many));
}

TEST(ResponseRole, ResponseRoleWithAGenerationPromptElseTheLastMessagesRole) {
  ProtocolOptions options;
  options.response_role = "model";
  EXPECT_EQ(
      chat_response_role(chat(R"({"messages": [{"role": "user", "content": "x"}]})"), options),
      "model");
  EXPECT_EQ(chat_response_role(chat(R"({"messages": [{"role": "user", "content": "x"},
                                                     {"role": "assistant", "content": "Once"}],
                                        "add_generation_prompt": false})"),
                               options),
            "assistant");
}

TEST(StreamOptions, ContinuousUsageStatsOnlyWithIncludeUsage) {
  const CompletionRequest both = completion(
      R"({"prompt": "x", "stream": true,
          "stream_options": {"include_usage": true, "continuous_usage_stats": true}})");
  EXPECT_TRUE(both.include_usage);
  EXPECT_TRUE(both.continuous_usage);
  const CompletionRequest alone = completion(
      R"({"prompt": "x", "stream": true, "stream_options": {"continuous_usage_stats": true}})");
  EXPECT_FALSE(alone.continuous_usage);
  const ChatRequest c = chat(
      R"({"messages": [{"role": "user", "content": "x"}], "stream": true,
          "stream_options": {"include_usage": true, "continuous_usage_stats": true}})");
  EXPECT_TRUE(c.continuous_usage);
  EXPECT_EQ(error_of([] {
              completion(R"({"prompt": "x", "stream": true,
                             "stream_options": {"continuous_usage_stats": 1}})");
            }).param,
            "stream_options.continuous_usage_stats");
}

TEST(Tokenize, ReturnTokenStrsAddsEachTokensText) {
  const TokenizeRequest plain = parse_tokenize_request(parse_json_body(R"({"prompt": "hi"})"));
  EXPECT_FALSE(plain.return_token_strs);
  auto text = [](int32_t id) { return fmt::format("t{}", id); };
  EXPECT_EQ(tokenize_response(plain, {3, 4}, 64, text),
            json({{"count", 2}, {"max_model_len", 64}, {"tokens", {3, 4}}}));
  const TokenizeRequest with_strs =
      parse_tokenize_request(parse_json_body(R"({"prompt": "hi", "return_token_strs": true})"));
  const json r = tokenize_response(with_strs, {3, 4}, 64, text);
  EXPECT_EQ(r["tokens"], json({3, 4}));
  EXPECT_EQ(r["token_strs"], json({"t3", "t4"}));
  EXPECT_EQ(
      error_of([] {
        parse_tokenize_request(parse_json_body(R"({"prompt": "hi", "return_token_strs": 1})"));
      }).param,
      "return_token_strs");
}

// --return-tokens-as-token-ids: every logprob token (chosen, alternatives, the unscored first
// prompt token) is "token_id:N"; offsets still count the text.
TEST(Responses, LogprobTokensAsTokenIds) {
  std::vector<GeneratedTokenLogprobs> lps(1);
  lps[0].chosen = {5, "He", -0.5f};
  lps[0].top = {{5, "He", -0.5f}, {6, "She", -1.5f}};
  CompletionLogprobs c(2, 0, true);
  c.add_unscored("<s>", 1);
  c.add(lps[0]);
  const json j = c.to_json();
  EXPECT_EQ(j["tokens"], json({"token_id:1", "token_id:5"}));
  EXPECT_EQ(j["top_logprobs"][1], json({{"token_id:5", -0.5}, {"token_id:6", -1.5}}));
  EXPECT_EQ(j["text_offset"], json({0, 3}));
  const json chat = chat_logprobs_json(lps, 0, 1, true);
  EXPECT_EQ(chat["content"][0]["token"], "token_id:5");
  EXPECT_EQ(chat["content"][0]["top_logprobs"][1]["token"], "token_id:6");
  EXPECT_EQ(chat["content"][0]["bytes"].size(), std::string("token_id:5").size());
  EXPECT_EQ(chat_logprobs_json(lps, 0, 1)["content"][0]["token"], "He");
}

}  // namespace
}  // namespace pagoda::server

namespace pagoda::server {
namespace {

TEST(ParseStructuredOutputs, EveryFormTheClientsSend) {
  auto completion_so = [](const char* body) {
    return *parse_completion_request(parse_json_body(body), SamplingParams{})
                .params.structured_outputs;
  };
  auto chat_so = [](const char* body) {
    return *parse_chat_request(parse_json_body(body), SamplingParams{}).params.structured_outputs;
  };
  EXPECT_EQ(completion_so(R"({"prompt": "x", "guided_json": {"type": "object"}})").json,
            R"({"type":"object"})");
  EXPECT_EQ(completion_so(R"({"prompt": "x", "guided_json": "{\"type\": \"integer\"}"})").json,
            R"({"type": "integer"})");
  EXPECT_EQ(completion_so(R"({"prompt": "x", "guided_regex": "a+"})").regex, "a+");
  EXPECT_EQ(completion_so(R"({"prompt": "x", "guided_choice": ["a", "b"]})").choice,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(completion_so(R"({"prompt": "x", "guided_grammar": "root ::= \"a\""})").grammar,
            R"(root ::= "a")");
  const StructuredOutputsParams so = completion_so(
      R"({"prompt": "x", "structured_outputs": {"json": {"type": "object"},
                                                "disable_any_whitespace": false}})");
  EXPECT_EQ(so.json, R"({"type":"object"})");
  EXPECT_TRUE(so.any_whitespace) << "vLLM's default, asked for explicitly";
  EXPECT_FALSE(completion_so(R"({"prompt": "x", "structured_outputs": {"json_object": true}})")
                   .any_whitespace);
  EXPECT_TRUE(
      completion_so(R"({"prompt": "x", "structured_outputs": {"json_object": true}})").json_object);

  const char* kMessages = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_TRUE(
      chat_so(
          fmt::format(R"({{{}, "response_format": {{"type": "json_object"}}}})", kMessages).c_str())
          .json_object);
  EXPECT_EQ(chat_so(fmt::format(R"({{{}, "response_format": {{"type": "json_schema",
                "json_schema": {{"name": "p", "strict": true,
                                 "schema": {{"type": "object"}}}}}}}})",
                                kMessages)
                        .c_str())
                .json,
            R"({"type":"object"})");
  EXPECT_FALSE(
      parse_chat_request(parse_json_body(fmt::format(
                             R"({{{}, "response_format": {{"type": "text"}}}})", kMessages)),
                         SamplingParams{})
          .params.structured_outputs.has_value());
}

TEST(ParseStructuredOutputs, ConflictsAndMalformedFieldsAre400) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "x", "guided_regex": "a", "guided_choice": ["a"]})", "guided_choice"},
      {R"({"prompt": "x", "structured_outputs": {"regex": "a", "json_object": true}})",
       "structured_outputs.json_object"},
      {R"({"prompt": "x", "structured_outputs": {"regx": "a"}})", "structured_outputs.regx"},
      {R"({"prompt": "x", "guided_choice": []})", "guided_choice"},
      {R"({"prompt": "x", "guided_json": 5})", "guided_json"},
      {R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format.type"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema"}})",
       "response_format.json_schema"},
  };
  for (const auto& [body, param] : cases) {
    try {
      parse_completion_request(parse_json_body(body), SamplingParams{});
      ADD_FAILURE() << "accepted: " << body;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.error().status, 400) << body;
      EXPECT_EQ(e.error().param, param) << body << ": " << e.error().message;
    }
  }
}

}  // namespace
}  // namespace pagoda::server
