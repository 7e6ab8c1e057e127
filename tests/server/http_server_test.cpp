// The whole server over loopback HTTP with a deterministic fake engine (fake_engine.h): routes,
// auth, streaming, error statuses, the broken-request corpus sent while streams run, client
// disconnect freeing KV, queue limits, engine death, and `promtool check metrics`.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "fake_engine.h"
#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

constexpr size_t kMaxRequestBytes = 1 << 20;

struct TestServer {
  // Strict request fields unless told otherwise: the broken-request corpus expects unknown
  // fields to be 400s.
  explicit TestServer(FakeEngine::Options engine_options = {}, std::string api_key = {},
                      int max_waiting = 1024, bool strict_request_fields = true,
                      std::string reasoning_parser = {}, ProtocolOptions protocol = {})
      : engine(
            [engine_options] { return std::make_unique<FakeEngine>(engine_options); },
            AsyncEngineOptions{
                .max_waiting_requests = max_waiting, .log_requests = false, .observer = metrics}) {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.api_key = std::move(api_key);
    o.max_request_bytes = kMaxRequestBytes;
    o.num_http_threads = 64;
    o.version = "test";
    o.strict_request_fields = strict_request_fields;
    o.reasoning_parser = std::move(reasoning_parser);
    o.protocol = std::move(protocol);
    o.metrics = metrics;
    http = std::make_unique<HttpServer>(engine, o);
    port = http->bind();
    engine.start();
    thread = std::thread([this] { http->listen(); });
    EXPECT_TRUE(engine.wait_ready(std::chrono::seconds(10)));
  }
  ~TestServer() {
    http->stop();
    thread.join();
    engine.stop();
  }
  std::shared_ptr<EngineMetrics> metrics = std::make_shared<EngineMetrics>();  // before engine
  AsyncEngine engine;
  std::unique_ptr<HttpServer> http;
  int port = 0;
  std::thread thread;
};

// What the fake engine generates for a prompt: its tokens rendered as text.
std::string expected_text(const std::vector<int32_t>& prompt, int num_tokens) {
  std::string s;
  for (int i = 0; i < num_tokens; ++i) s += FakeEngine::token_text(FakeEngine::token_at(prompt, i));
  return s;
}

std::vector<int32_t> fake_ids(const std::string& text) {
  return FakeEngine(FakeEngine::Options{}).encode(text, true);
}

// Clients that send fields newer than ours (or vendor ones) keep working by default, as with
// vLLM; the reasoning split goes out under vLLM's current name and the old one.
TEST(HttpServer, UnknownFieldsAreIgnoredByDefaultAndReasoningHasBothNames) {
  TestServer s({}, {}, 1024, /*strict_request_fields=*/false, "deepseek_r1");
  auto c = client(s.port);
  auto r = c->Post("/v1/completions",
                   R"({"prompt": "a b", "max_tokens": 2, "cache_salt": "x", "priority_hint": 1})",
                   "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = c->Post("/v1/chat/completions",
              R"({"messages": [{"role": "user", "content": "a"},
                              {"role": "assistant", "content": "b", "refusal": null},
                              {"role": "user", "content": "c"}],
                 "max_tokens": 3, "reasoning_effort": "low"})",
              "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  // deepseek_r1 starts inside <think>; the fake engine never closes it, so all is reasoning.
  const json message = json::parse(r->body)["choices"][0]["message"];
  EXPECT_TRUE(message["reasoning"].is_string()) << message;
  EXPECT_EQ(message["reasoning"], message["reasoning_content"]) << message;
}

// tool_choice auto through the whole server: a DeepSeek-R1 output written by hand (reasoning,
// text, two calls in the V3 format), cut inside its markers, read into reasoning, content and
// tool_calls; streamed, the deltas put together give the same answer.
TEST(HttpServer, AutoToolCallsFromTheModelsFormatWholeAndStreamed) {
  FakeEngine::Options engine;
  engine.script = {"thinking</th",
                   "ink>Let me check.<｜tool▁calls▁begin｜><｜tool▁call",
                   "▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": ",
                   "\"Oslo\"}\n``",
                   "`<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n",
                   "```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"};
  ProtocolOptions protocol;
  protocol.enable_auto_tool_choice = true;
  protocol.tool_call_parser = "deepseek_v3";
  TestServer s(engine, {}, 1024, true, "deepseek_r1", protocol);
  const json body = {{"messages", {{{"role", "user"}, {"content", "a"}}}},
                     {"tools",
                      {{{"type", "function"}, {"function", {{"name", "get_weather"}}}},
                       {{"type", "function"}, {"function", {{"name", "get_time"}}}}}},
                     {"max_tokens", 20}};
  auto r = client(s.port)->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const json& message = choice["message"];
  EXPECT_EQ(message["reasoning"], "thinking");
  EXPECT_EQ(message["content"], "Let me check.");
  ASSERT_EQ(message["tool_calls"].size(), 2u) << message;
  EXPECT_EQ(message["tool_calls"][0]["function"],
            (json{{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}));
  EXPECT_EQ(message["tool_calls"][1]["function"],
            (json{{"name", "get_time"}, {"arguments", "{}"}}));
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_NE(message["tool_calls"][0]["id"], message["tool_calls"][1]["id"]);

  json streamed_body = body;
  streamed_body["stream"] = true;
  const StreamResult st = stream_request(s.port, "/v1/chat/completions", streamed_body);
  ASSERT_EQ(st.status, 200) << st.raw;
  EXPECT_EQ(st.text, "Let me check.");
  EXPECT_EQ(st.last_finish_reason, "tool_calls");
  json calls = json::array();
  size_t pos = 0, end;
  while ((end = st.raw.find("\n\n", pos)) != std::string::npos) {
    const std::string event = st.raw.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: {", 0) != 0) continue;
    for (const json& d :
         json::parse(event.substr(6))["choices"][0]["delta"].value("tool_calls", json::array())) {
      const size_t index = d["index"];
      if (index == calls.size()) {
        // A call's first delta: its id, type and name.
        ASSERT_TRUE(d.contains("id") && d["type"] == "function" && d["function"].contains("name"))
            << d;
        calls.push_back({{"name", d["function"]["name"]}, {"arguments", ""}});
      }
      ASSERT_LT(index, calls.size()) << d;
      EXPECT_FALSE(d["function"].contains("name") && index + 1 != calls.size()) << d;
      calls[index]["arguments"] =
          calls[index]["arguments"].get<std::string>() + d["function"].value("arguments", "");
    }
  }
  ASSERT_EQ(calls.size(), 2u) << st.raw;
  EXPECT_EQ(calls[0], message["tool_calls"][0]["function"]);
  EXPECT_EQ(calls[1], message["tool_calls"][1]["function"]);
}

// With a reasoning parser, a forced call (constrained from the first token) is still read as the
// call: its JSON must not disappear into reasoning_content, where R1's open <think> would put it.
TEST(HttpServer, ForcedToolCallIsNotTakenForReasoning) {
  FakeEngine::Options engine;
  engine.script = {"{\"city\"", ": \"Oslo\"}"};
  TestServer s(engine, {}, 1024, true, "deepseek_r1");
  const json body = {
      {"messages", {{{"role", "user"}, {"content", "a"}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
      {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
      {"max_tokens", 20}};
  auto r = client(s.port)->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_FALSE(choice["message"].contains("reasoning")) << choice;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"],
            (json{{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}));
}

// A second server on a taken port fails to start: it must never share the port (SO_REUSEPORT)
// and take some of the first one's clients.
TEST(HttpServer, ATakenPortFailsTheStart) {
  TestServer first;
  AsyncEngine engine([] { return std::make_unique<FakeEngine>(FakeEngine::Options{}); },
                     AsyncEngineOptions{});
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = first.port;
  HttpServer second(engine, o);
  try {
    second.bind();
    FAIL() << "bound port " << first.port << " twice";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
  }
}

TEST(HttpServer, HealthVersionModelsAndAuth) {
  TestServer s({}, "sekrit");
  auto anon = client(s.port);
  auto wrong = client(s.port, "sekri");
  auto good = client(s.port, "sekrit");
  EXPECT_EQ(anon->Get("/health")->status, 200);
  for (const char* path : {"/v1/models", "/metrics", "/version", "/v1/nothing"}) {
    auto r = anon->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
    EXPECT_EQ(wrong->Get(path)->status, 401) << path;
  }
  EXPECT_EQ(anon->Post("/v1/completions", R"({"prompt": "x"})", "application/json")->status, 401);
  auto models = good->Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "fake-model");
  EXPECT_EQ(m["data"][0]["max_model_len"], FakeEngine::kMaxModelLen);
  EXPECT_EQ(good->Get("/v1/models/fake-model")->status, 200);
  EXPECT_EQ(good->Get("/v1/models/other")->status, 404);
  EXPECT_EQ(json::parse(good->Get("/version")->body)["version"], "test");
  auto missing = good->Get("/v1/nothing");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["type"], "NotFoundError");
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "abcd"));
  EXPECT_FALSE(constant_time_equals("", "a"));
}

TEST(HttpServer, CompletionNonStreamedAndStreamedAgree) {
  TestServer s;
  auto c = client(s.port);
  auto r = c->Post("/v1/completions",
                   R"({"prompt": "hello world", "max_tokens": 6, "ignore_eos": true})",
                   "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const std::string want = expected_text(fake_ids("hello world"), 6);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake-model");
  EXPECT_EQ(j["choices"][0]["text"], want);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["usage"]["total_tokens"], 9);

  const StreamResult st = stream_request(s.port, "/v1/completions",
                                         {{"prompt", "hello world"},
                                          {"max_tokens", 6},
                                          {"stream", true},
                                          {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(st.status, 200);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.text, want);
  EXPECT_EQ(st.last_finish_reason, "length");
  EXPECT_EQ(st.usage["completion_tokens"], 6);
  EXPECT_EQ(st.raw.substr(st.raw.size() - 14), "data: [DONE]\n\n");

  // Several prompts, n = 2, echo, stop by EOS ("forty-two" makes the fake stop after 5 tokens).
  r = c->Post("/v1/completions",
              R"({"prompt": ["forty-two a", "b"], "n": 2, "max_tokens": 8, "echo": true})",
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json multi = json::parse(r->body);
  ASSERT_EQ(multi["choices"].size(), 4u);
  EXPECT_EQ(multi["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(multi["choices"][3]["finish_reason"], "length");
  EXPECT_EQ(multi["choices"][2]["text"], "b" + expected_text(fake_ids("b"), 8));
  EXPECT_EQ(multi["choices"][3]["index"], 3);

  // Token-id prompts and logprobs.
  r = c->Post("/v1/completions", R"({"prompt": [1, 5, 9], "max_tokens": 3, "logprobs": 2})",
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
}

// The JSON payloads of an SSE body, [DONE] left out.
std::vector<json> sse_payloads(const std::string& raw) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = raw.find("data: ", pos)) != std::string::npos) {
    const size_t end = raw.find("\n\n", pos);
    const std::string payload = raw.substr(pos + 6, end - pos - 6);
    pos = end;
    if (payload != "[DONE]") out.push_back(json::parse(payload));
  }
  return out;
}

TEST(HttpServer, EchoWithLogprobsPutsThePromptFirstLikeVllm) {
  TestServer s;
  auto c = client(s.port);
  const std::vector<int32_t> ids = fake_ids("hello world");  // BOS + 2 words
  ASSERT_EQ(ids.size(), 3u);
  const json body = {{"prompt", "hello world"},
                     {"max_tokens", 3},
                     {"echo", true},
                     {"logprobs", 2},
                     {"ignore_eos", true}};
  auto r = c->Post("/v1/completions", body.dump(), "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  EXPECT_EQ(choice["text"], "hello world" + expected_text(ids, 3));

  // Prompt positions first: the first one has nothing before it, so null logprobs.
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  EXPECT_EQ(lp["tokens"][0], FakeEngine::token_text(ids[0]));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(lp["tokens"][i], FakeEngine::token_text(ids[i]));
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), -0.25f * static_cast<float>(i));
    // The prompt token itself plus the 2 most likely (OpenAI: up to logprobs + 1 entries).
    const json& top = lp["top_logprobs"][i];
    EXPECT_EQ(top.size(), 3u);
    EXPECT_FLOAT_EQ(top[FakeEngine::token_text(500)].get<float>(), -0.1f);
    EXPECT_FLOAT_EQ(top[FakeEngine::token_text(501)].get<float>(), -0.2f);
  }
  // Then the generated ones.
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(lp["tokens"][i], FakeEngine::token_text(FakeEngine::token_at(ids, i - 3)));
    EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), -0.5f);
  }
  // Offsets run over every token's text from 0.
  size_t offset = 0;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(lp["text_offset"][i], offset) << i;
    offset += lp["tokens"][i].get<std::string>().size();
  }
  // vLLM's prompt_logprobs field, keyed by token id.
  const json& plp = choice["prompt_logprobs"];
  ASSERT_EQ(plp.size(), 3u);
  EXPECT_TRUE(plp[0].is_null());
  const json& second = plp[1][std::to_string(ids[1])];
  EXPECT_EQ(second["rank"], 2);
  EXPECT_EQ(second["decoded_token"], FakeEngine::token_text(ids[1]));
  EXPECT_EQ(plp[2].size(), 3u);

  // Streamed: the first chunk carries the prompt text and the prompt's logprobs; joined, the
  // chunks say exactly what the whole response says.
  json streamed_body = body;
  streamed_body["stream"] = true;
  const StreamResult st = stream_request(s.port, "/v1/completions", streamed_body);
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(st.text, choice["text"]);
  json joined = {{"tokens", json::array()},
                 {"token_logprobs", json::array()},
                 {"top_logprobs", json::array()},
                 {"text_offset", json::array()}};
  const std::vector<json> chunks = sse_payloads(st.raw);
  ASSERT_FALSE(chunks.empty());
  EXPECT_EQ(chunks[0]["choices"][0]["text"].get<std::string>().rfind("hello world", 0), 0u);
  for (const json& chunk : chunks) {
    const json& l = chunk["choices"][0]["logprobs"];
    if (l.is_null()) continue;
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const json& v : l[key]) joined[key].push_back(v);
  }
  EXPECT_EQ(joined, lp);
}

TEST(HttpServer, EchoWithNSamplesAndTokenPromptsAndPromptLogprobsField) {
  TestServer s;
  auto c = client(s.port);
  // n = 2: every choice echoes the prompt and its logprobs.
  auto r =
      c->Post("/v1/completions",
              R"({"prompt": "hello world", "n": 2, "max_tokens": 2, "echo": true, "logprobs": 0})",
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json n2 = json::parse(r->body);
  ASSERT_EQ(n2["choices"].size(), 2u);
  for (const json& choice : n2["choices"]) {
    EXPECT_EQ(choice["text"].get<std::string>().rfind("hello world", 0), 0u);
    const json& lp = choice["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 5u);
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_FLOAT_EQ(lp["token_logprobs"][2].get<float>(), -0.5f);
    EXPECT_EQ(lp["top_logprobs"][1].size(), 1u) << "logprobs 0: just the token itself";
  }
  EXPECT_EQ(n2["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(n2["usage"]["completion_tokens"], 4);

  // A token-id prompt echoes its decoded text; no logprobs asked, none computed.
  r = c->Post("/v1/completions", R"({"prompt": [1, 5, 9], "max_tokens": 2, "echo": true})",
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json ids = json::parse(r->body)["choices"][0];
  EXPECT_EQ(ids["text"], "w1 w5 w9 " + expected_text({1, 5, 9}, 2));
  EXPECT_TRUE(ids["logprobs"].is_null());
  EXPECT_TRUE(ids["prompt_logprobs"].is_null());

  // echo with max_tokens 0 (vLLM's echo without generation): the prompt, its logprobs, nothing
  // generated, finished on length; streamed the same.
  const json echo_only = {
      {"prompt", "hello world"}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}};
  r = c->Post("/v1/completions", echo_only.dump(), "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json only = json::parse(r->body);
  EXPECT_EQ(only["choices"][0]["text"], "hello world");
  EXPECT_EQ(only["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(only["choices"][0]["logprobs"]["tokens"].size(), 3u);
  EXPECT_EQ(only["usage"]["completion_tokens"], 0);
  json echo_only_streamed = echo_only;
  echo_only_streamed["stream"] = true;
  const StreamResult only_st = stream_request(s.port, "/v1/completions", echo_only_streamed);
  EXPECT_TRUE(only_st.done);
  EXPECT_EQ(only_st.text, "hello world");
  EXPECT_EQ(only_st.last_finish_reason, "length");
  // Without echo, max_tokens 0 is still out of range.
  r = c->Post("/v1/completions", R"({"prompt": "hello world", "max_tokens": 0})",
              "application/json");
  EXPECT_EQ(r->status, 400);

  // A token-id prompt of 1,000 ids is one prompt: it is refused for the context length (the
  // fake's is 256), not for holding too many prompts.
  json long_ids = json::array();
  for (int i = 0; i < 1000; ++i) long_ids.push_back(1 + i % 50);
  r = c->Post("/v1/completions", json({{"prompt", long_ids}}).dump(), "application/json");
  ASSERT_EQ(r->status, 400);
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find(
                "maximum context length is 256 tokens. However, your prompt has 1000 tokens"),
            std::string::npos)
      << r->body;
  long_ids.erase(long_ids.begin() + 200, long_ids.end());
  r = c->Post("/v1/completions", json({{"prompt", long_ids}, {"max_tokens", 2}}).dump(),
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens"], 200);

  // vLLM's prompt_logprobs extra without echo: the field, not the text or the logprobs.
  r = c->Post("/v1/completions",
              R"({"prompt": "hello world", "max_tokens": 2, "prompt_logprobs": 1})",
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json plp = json::parse(r->body)["choices"][0];
  EXPECT_EQ(plp["text"], expected_text(fake_ids("hello world"), 2));
  EXPECT_TRUE(plp["logprobs"].is_null());
  ASSERT_EQ(plp["prompt_logprobs"].size(), 3u);
  EXPECT_TRUE(plp["prompt_logprobs"][0].is_null());
  EXPECT_EQ(plp["prompt_logprobs"][1].size(), 2u);

  // Like vLLM, prompt_logprobs are not streamed.
  r = c->Post("/v1/completions",
              R"({"prompt": "hello world", "stream": true, "prompt_logprobs": 1})",
              "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "prompt_logprobs");
}

TEST(HttpServer, ChatStreamsRoleThenContent) {
  TestServer s;
  auto c = client(s.port);
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}};
  auto r = c->Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  // The chat template output is tokenized without special tokens.
  const std::vector<int32_t> ids =
      FakeEngine(FakeEngine::Options{}).encode("user: hi assistant:", false);
  EXPECT_EQ(j["choices"][0]["message"]["content"], expected_text(ids, 4));
  json streamed = body;
  streamed["stream"] = true;
  const StreamResult st = stream_request(s.port, "/v1/chat/completions", streamed);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.text, expected_text(ids, 4));
  EXPECT_NE(st.raw.find(R"("delta":{"content":"","role":"assistant"})"), std::string::npos)
      << st.raw;
  EXPECT_NE(st.raw.find("chat.completion.chunk"), std::string::npos);
  // Default max_tokens for chat is the rest of the context.
  auto rest = c->Post("/v1/chat/completions",
                      json{{"messages", body["messages"]}, {"ignore_eos", true}}.dump(),
                      "application/json");
  ASSERT_EQ(rest->status, 200);
  EXPECT_EQ(json::parse(rest->body)["usage"]["total_tokens"], FakeEngine::kMaxModelLen);
}

TEST(HttpServer, TokenizeDetokenize) {
  TestServer s;
  auto c = client(s.port);
  auto r = c->Post("/tokenize", R"({"prompt": "a b c"})", "application/json");
  ASSERT_EQ(r->status, 200);
  const json j = json::parse(r->body);
  EXPECT_EQ(j["count"], 4);
  EXPECT_EQ(j["tokens"], json(fake_ids("a b c")));
  EXPECT_EQ(j["max_model_len"], FakeEngine::kMaxModelLen);
  r = c->Post("/detokenize", R"({"tokens": [11, 12]})", "application/json");
  EXPECT_EQ(json::parse(r->body)["prompt"], "w11 w12 ");
}

TEST(HttpServer, ErrorsHaveOpenAiShapeAndStatus) {
  TestServer s;
  auto c = client(s.port);
  auto over =
      c->Post("/v1/completions", R"({"prompt": "a b c", "max_tokens": 300})", "application/json");
  EXPECT_EQ(over->status, 400);
  const json e = json::parse(over->body)["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_NE(e["message"].get<std::string>().find("48 over the limit"), std::string::npos)
      << e["message"];
  // The engine refuses a token id outside its vocabulary: a 400 from the engine thread.
  auto vocab = c->Post("/v1/completions", R"({"prompt": [1, 5000]})", "application/json");
  EXPECT_EQ(vocab->status, 400);
  EXPECT_NE(json::parse(vocab->body)["error"]["message"].get<std::string>().find("vocabulary"),
            std::string::npos);
  auto big =
      c->Post("/v1/completions", std::string(kMaxRequestBytes + 10, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
}

TEST(HttpServer, BrokenCorpusWhileStreamsRun) {
  TestServer s({.max_num_seqs = 16, .step_time = std::chrono::milliseconds(5)});
  // Streams that run throughout.
  const int kStreams = 4;
  std::vector<StreamResult> results(kStreams);
  std::vector<std::thread> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back([&, i] {
      results[i] = stream_request(
          s.port, "/v1/completions",
          {{"prompt", "stream " + std::to_string(i)}, {"max_tokens", 150}, {"stream", true}});
    });
  }
  const std::vector<BrokenRequest> corpus = broken_corpus(kMaxRequestBytes);
  ASSERT_GE(corpus.size(), 200u);
  auto c = client(s.port);
  int num_checked = 0;
  for (const BrokenRequest& b : corpus) {
    auto r = c->Post(b.path, b.body, "application/json");
    ASSERT_TRUE(r) << b.why;
    EXPECT_EQ(r->status, b.status)
        << b.why << ": " << b.body.substr(0, 200) << " -> " << r->body.substr(0, 300);
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error") && j["error"].contains("message")) << b.why;
    ++num_checked;
  }
  // Raw bytes httplib's client would not send: a garbage request line and a lying Content-Length.
  {
    RawSocket sock(s.port);
    ASSERT_TRUE(sock.ok());
    sock.send_all("BLAH /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE(sock.read_until("\r\n\r\n").find("HTTP/1.1 4"), std::string::npos);
  }
  {
    RawSocket sock(s.port);
    sock.send_all(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"");
    sock.close();  // hang up before the body is complete
  }
  for (std::thread& t : streams) t.join();
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(results[i].status, 200);
    EXPECT_TRUE(results[i].done);
    EXPECT_EQ(results[i].text, expected_text(fake_ids("stream " + std::to_string(i)), 150)) << i;
  }
  EXPECT_GE(num_checked, 200);
  EXPECT_EQ(client(s.port)->Get("/health")->status, 200);
}

TEST(HttpServer, ClientDisconnectAbortsAndFreesKv) {
  TestServer s({.max_num_seqs = 8, .step_time = std::chrono::milliseconds(10)});
  const std::string running = "vllm:num_requests_running{model_name=\"fake-model\"}";
  const std::string usage = "vllm:kv_cache_usage_perc{model_name=\"fake-model\"}";
  EXPECT_EQ(metric(s.port, usage), 0.0);
  {
    std::vector<std::unique_ptr<RawSocket>> socks;
    for (int i = 0; i < 3; ++i) {
      auto sock = std::make_unique<RawSocket>(s.port);
      ASSERT_TRUE(sock->ok());
      const std::string body = json{
          {"prompt", "long story " + std::to_string(i)},
          {"max_tokens", 240},
          {"stream", true}}.dump();
      sock->send_all(http_post("/v1/completions", body));
      EXPECT_NE(sock->read_until("\"text\"").find("text_completion"), std::string::npos);
      socks.push_back(std::move(sock));
    }
    EXPECT_TRUE(eventually([&] { return metric(s.port, running) == 3; }, std::chrono::seconds(5)));
    EXPECT_GT(metric(s.port, usage), 0.0);
  }  // all three hang up mid-stream
  EXPECT_TRUE(
      eventually([&] { return metric(s.port, running) == 0 && metric(s.port, usage) == 0.0; },
                 std::chrono::seconds(5)));
  EXPECT_EQ(
      metric(s.port,
             "vllm:request_success_total{model_name=\"fake-model\",finished_reason=\"abort\"}"),
      3);
  EXPECT_EQ(s.engine.num_in_flight(), 0);
}

TEST(HttpServer, NonStreamedClientDisconnectAbortsAndFreesKv) {
  // 240 tokens at 20 ms a step: 4.8 s if nobody aborts them.
  TestServer s({.max_num_seqs = 8, .step_time = std::chrono::milliseconds(20)});
  const std::string running = "vllm:num_requests_running{model_name=\"fake-model\"}";
  const std::string usage = "vllm:kv_cache_usage_perc{model_name=\"fake-model\"}";
  EXPECT_EQ(metric(s.port, usage), 0.0);
  {
    std::vector<std::unique_ptr<RawSocket>> socks;
    for (int i = 0; i < 3; ++i) {
      auto sock = std::make_unique<RawSocket>(s.port);
      ASSERT_TRUE(sock->ok());
      const std::string body =
          json{{"prompt", "long story " + std::to_string(i)}, {"max_tokens", 240}}.dump();
      ASSERT_TRUE(sock->send_all(http_post("/v1/completions", body)));
      socks.push_back(std::move(sock));
    }
    EXPECT_TRUE(eventually([&] { return metric(s.port, running) == 3; }, std::chrono::seconds(5)));
    EXPECT_GT(metric(s.port, usage), 0.0);
  }  // all three hang up while their responses are being generated
  EXPECT_TRUE(
      eventually([&] { return metric(s.port, running) == 0 && metric(s.port, usage) == 0.0; },
                 std::chrono::seconds(5)));
  // Aborted, not run to their length.
  EXPECT_EQ(
      metric(s.port,
             "vllm:request_success_total{model_name=\"fake-model\",finished_reason=\"abort\"}"),
      3);
  EXPECT_TRUE(eventually([&] { return s.engine.num_in_flight() == 0; }, std::chrono::seconds(5)));

  // A client that stays connected still gets its whole response.
  auto c = client(s.port);
  auto r = c->Post("/v1/completions", R"({"prompt": "short", "max_tokens": 3, "ignore_eos": true})",
                   "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], expected_text(fake_ids("short"), 3));
}

TEST(HttpServer, WaitingQueueLimitGives503) {
  TestServer s({.max_num_seqs = 1, .step_time = std::chrono::milliseconds(10)}, {},
               /*max_waiting=*/2);
  const std::string running = "vllm:num_requests_running{model_name=\"fake-model\"}";
  std::vector<std::unique_ptr<RawSocket>> socks;
  auto open_stream = [&](int i) {
    auto sock = std::make_unique<RawSocket>(s.port);
    sock->send_all(http_post(
        "/v1/completions",
        json{{"prompt", "q " + std::to_string(i)}, {"max_tokens", 240}, {"stream", true}}.dump()));
    const std::string head = sock->read_until("\r\n\r\n");
    socks.push_back(std::move(sock));
    return head;
  };
  EXPECT_NE(open_stream(0).find("200 OK"), std::string::npos);
  ASSERT_TRUE(eventually([&] { return metric(s.port, running) == 1; }, std::chrono::seconds(5)));
  EXPECT_NE(open_stream(1).find("200 OK"), std::string::npos);  // waiting: 1
  EXPECT_NE(open_stream(2).find("200 OK"), std::string::npos);  // waiting: 2
  auto r =
      client(s.port)->Post("/v1/completions", R"({"prompt": "one too many"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "ServiceUnavailableError");
  socks.clear();  // hang up: everything is aborted
  EXPECT_TRUE(eventually([&] { return s.engine.num_in_flight() == 0; }, std::chrono::seconds(5)));
  EXPECT_EQ(client(s.port)
                ->Post("/v1/completions", R"({"prompt": "now fine", "max_tokens": 2})",
                       "application/json")
                ->status,
            200);
}

TEST(HttpServer, ConcurrentStreamsEachMatchTheirOutputAlone) {
  TestServer s({.max_num_seqs = 16, .step_time = std::chrono::milliseconds(1)});
  const int kRequests = 32;
  std::vector<StreamResult> results(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      results[i] = stream_request(s.port, "/v1/completions",
                                  {{"prompt", "concurrent " + std::to_string(i)},
                                   {"max_tokens", 20 + i},
                                   {"stream", true}});
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_TRUE(results[i].done) << i << ": HTTP " << results[i].status << " "
                                 << results[i].raw.substr(0, 300);
    EXPECT_EQ(results[i].text, expected_text(fake_ids("concurrent " + std::to_string(i)), 20 + i))
        << i;
  }
}

TEST(HttpServer, EngineFailureIsReportedNotFatal) {
  TestServer s({.throw_after_steps = 3});
  auto c = client(s.port);
  auto r = c->Post("/v1/completions", R"({"prompt": "x", "max_tokens": 10})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("fake engine failure"), std::string::npos);
  EXPECT_EQ(c->Get("/health")->status, 503);
  EXPECT_EQ(c->Post("/v1/completions", R"({"prompt": "x"})", "application/json")->status, 503);
}

TEST(HttpServer, DrainRefusesNewRequests) {
  TestServer s;
  s.engine.begin_drain();
  auto c = client(s.port);
  EXPECT_EQ(c->Get("/health")->status, 503);
  EXPECT_EQ(c->Post("/v1/completions", R"({"prompt": "x"})", "application/json")->status, 503);
}

TEST(HttpServer, MetricsPassPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "promtool not installed";
  TestServer s;
  auto c = client(s.port);
  ASSERT_EQ(c->Post("/v1/completions", R"({"prompt": "a b", "max_tokens": 5})", "application/json")
                ->status,
            200);
  auto r = c->Get("/metrics");
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain; version=0.0.4"),
            std::string::npos);
  EXPECT_EQ(promtool_problems(r->body, ::testing::TempDir() + "/pagoda_metrics.txt"), "");
  // A broken exposition must be caught (the check can fail).
  EXPECT_NE(promtool_problems(r->body + "broken line\n",
                              ::testing::TempDir() + "/pagoda_metrics_bad.txt"),
            "");
  EXPECT_EQ(
      metric(s.port,
             "vllm:request_success_total{model_name=\"fake-model\",finished_reason=\"length\"}"),
      1);
  EXPECT_EQ(metric(s.port, "vllm:time_to_first_token_seconds_count{model_name=\"fake-model\"}"), 1);
  // Every answer is counted as vLLM counts it, including the transport's own refusals.
  ASSERT_EQ(c->Get("/v1/nothing")->status, 404);
  ASSERT_EQ(c->Post("/v1/completions", "{", "application/json")->status, 400);
  auto streamed = stream_request(s.port, "/v1/completions",
                                 json{{"prompt", "a"}, {"max_tokens", 2}, {"stream", true}});
  ASSERT_EQ(streamed.status, 200);
  EXPECT_EQ(
      metric(s.port,
             "http_requests_total{handler=\"/v1/completions\",method=\"POST\",status=\"2xx\"}"),
      2);
  EXPECT_EQ(
      metric(s.port,
             "http_requests_total{handler=\"/v1/completions\",method=\"POST\",status=\"4xx\"}"),
      1);
  EXPECT_EQ(metric(s.port, "http_requests_total{handler=\"none\",method=\"GET\",status=\"4xx\"}"),
            1);
  EXPECT_GE(
      metric(s.port, "http_requests_total{handler=\"/metrics\",method=\"GET\",status=\"2xx\"}"), 3);
}

}  // namespace
}  // namespace pagoda::server::testing
