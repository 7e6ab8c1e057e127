// `pagoda serve` started as vLLM users start `vllm serve`: a command line from vLLM's CPU docs,
// VLLM_API_KEY, several served names; and a failed load, which must end the process with the
// error rather than leave a server answering 503. Each case runs the real binary, bounded in time.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "server_process.h"
#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

TEST(VllmCommandLine, FailedLoadExitsNonZeroWithTheError) {
  const Scratch scratch("pagoda_vllm_cli_test");
  const fs::path out = scratch.dir / "out.txt";
  const auto start = Clock::now();
  const pid_t pid = spawn({"serve", "--model", (scratch.dir / "no-such-model").string(), "--port",
                           "0", "--host", "127.0.0.1"},
                          {}, out);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(30)), 1) << read_file(out);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  const std::string text = read_file(out);
  EXPECT_NE(text.find("error: loading failed"), std::string::npos) << text;
  EXPECT_NE(text.find("no-such-model/config.json"), std::string::npos) << text;
}

// The flags of a `vllm serve` line on a CPU host parse; the GPU-only ones are named inert; the
// process then gets as far as loading (and fails there, on a model that does not exist).
TEST(VllmCommandLine, AVllmCpuCommandLineIsAcceptedWithInertFlagsNamed) {
  const Scratch scratch("pagoda_vllm_cli_test");
  const fs::path out = scratch.dir / "out.txt";
  const std::string model = (scratch.dir / "no-such-model").string();
  const pid_t pid = spawn({"serve",
                           model,
                           "--port",
                           "0",
                           "--dtype",
                           "bfloat16",
                           "-tp",
                           "1",
                           "--pipeline-parallel-size=1",
                           "--seed",
                           "0",
                           "--max-model-len",
                           "2k",
                           "--max-num-batched-tokens",
                           "4K",
                           "--trust-remote-code",
                           "--gpu-memory-utilization",
                           "0.9",
                           "--enforce-eager",
                           "--device",
                           "cpu",
                           "--disable-log-stats",
                           "--swap-space",
                           "4",
                           "--uvicorn-log-level",
                           "info",
                           "--load-format",
                           "auto",
                           "--distributed-executor-backend",
                           "mp",
                           "--download-dir",
                           scratch.dir.string(),
                           "--enable-log-requests",
                           "--served-model-name",
                           "first",
                           "second"},
                          {"VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_OMP_THREADS_BIND=nobind"}, out);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(30)), 1);
  const std::string text = read_file(out);
  EXPECT_NE(text.find("loading failed"), std::string::npos) << text;
  for (const char* inert :
       {"--dtype bfloat16 has no effect", "--gpu-memory-utilization has no", "--swap-space has no",
        "--enforce-eager has no", "--trust-remote-code has no",
        "--distributed-executor-backend has no", "--uvicorn-log-level has no"}) {
    EXPECT_NE(text.find(inert), std::string::npos) << inert << "\n" << text;
  }
}

// --isa forces a kernel table and says so; the negative flags and the partial-prefill flags
// parse with their own names.
TEST(VllmCommandLine, IsaForcesTheKernelsAndNegativeFlagsParse) {
  const Scratch scratch("pagoda_vllm_cli_test");
  const fs::path out = scratch.dir / "out.txt";
  const pid_t pid = spawn(
      {"serve", (scratch.dir / "m").string(), "--port", "0", "--isa", "scalar",
       "--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--max-num-partial-prefills",
       "4", "--max-long-partial-prefills", "2", "--long-prefill-token-threshold", "1K"},
      {}, out);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(30)), 1);
  const std::string text = read_file(out);
  EXPECT_NE(text.find("kernels: scalar (--isa)"), std::string::npos) << text;
  EXPECT_NE(text.find("loading failed"), std::string::npos) << text;
}

TEST(VllmCommandLine, ParallelismAboveOneAndBadValuesAreClearErrors) {
  const Scratch scratch("pagoda_vllm_cli_test");
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> env;
    const char* message;
  };
  const std::string model = (scratch.dir / "m").string();
  const Case cases[] = {
      {{"serve", model, "-tp", "0"}, {}, "--tensor-parallel-size"},
      {{"serve", model, "-pp", "0"}, {}, "--pipeline-parallel-size"},
      {{"serve", model, "--data-parallel-size", "4"}, {}, "data parallelism"},
      {{"serve", model, "--device", "cuda"}, {}, "--device"},
      {{"serve", model, "--max-model-len", "1.5K"}, {}, "decimals need a decimal suffix"},
      {{"serve", model, "--model", model + "2"}, {}, "two models given"},
      {{"serve"}, {}, "no model given"},
      {{"serve", model, "--isa", "avx3"}, {}, "--isa"},
      {{"serve", model}, {"VLLM_CPU_OMP_THREADS_BIND=0|1"}, "one CPU list per tensor-parallel"},
      {{"serve", model, "--num-reserved-cpus", "1"}, {}, "threads are not pinned unless"},
      {{"serve", model},
       {"VLLM_CPU_OMP_THREADS_BIND=auto", "VLLM_CPU_NUM_OF_RESERVED_CPU=100000"},
       "cannot reserve 100000 of the"},
      {{"serve", model}, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN=maybe"}, "expected 1, true, 0 or false"},
      {{"serve", model, "--max-logprobs", "-2"}, {}, "--max-logprobs must be -1 or at least 0"},
      {{"serve", model, "--max-num-partial-prefills", "0"},
       {},
       "--max-num-partial-prefills must be at least 1"},
      {{"serve", model, "--max-num-partial-prefills", "2", "--max-long-partial-prefills", "3"},
       {},
       "--max-long-partial-prefills must be in [1, --max-num-partial-prefills]"},
      {{"serve", model, "--chat-template-content-format", "list"}, {}, "--chat-template-content"},
      {{"serve", model, "--tool-call-parser", "mistral"}, {}, "--tool-call-parser must be one of"},
      {{"serve", model, "--enable-auto-tool-choice"},
       {},
       "--enable-auto-tool-choice requires --tool-call-parser"},
  };
  for (const Case& c : cases) {
    const fs::path out = scratch.dir / "out.txt";
    const int code = wait_exit(spawn(c.args, c.env, out), std::chrono::seconds(30));
    const std::string text = read_file(out);
    EXPECT_NE(code, 0) << c.message;
    EXPECT_NE(text.find(c.message), std::string::npos) << c.message << "\n" << text;
  }
}

// Waits up to 120 s for the server logging to `log` to name its port (the first group of
// `listening`) and then for `healthy(port)`; the port, or 0 if either never came.
int wait_for_server(const fs::path& log, const std::regex& listening,
                    const std::function<bool(int)>& healthy) {
  int port = 0;
  const bool up = eventually(
      [&] {
        std::smatch m;
        const std::string text = read_file(log);
        if (port == 0 && std::regex_search(text, m, listening)) port = std::stoi(m[1]);
        return port != 0 && healthy(port);
      },
      std::chrono::seconds(120));
  return up ? port : 0;
}

bool health_ok(int port) {
  auto r = client(port)->Get("/health");
  return r && r->status == 200;
}

// VLLM_API_KEY locks the server as --api-key does (before, it was ignored and the server open),
// and every --served-model-name is a name requests may use.
TEST(VllmCommandLine, VllmApiKeyLocksTheServerAndEveryServedNameWorks) {
  const Scratch scratch("pagoda_vllm_cli_test");
  const fs::path model = scratch.dir / "model";
  const fs::path make_out = scratch.dir / "make.txt";
  ASSERT_EQ(
      wait_exit(spawn({"make-model", "--preset", "tiny", "--out", model.string()}, {}, make_out),
                std::chrono::seconds(120)),
      0)
      << read_file(make_out);
  const fs::path log = scratch.dir / "serve.log";
  const pid_t pid = spawn(
      {"serve", model.string(), "--host", "127.0.0.1", "--port", "0", "--max-model-len", "256",
       "--threads", "1", "--log-file", log.string(), "--served-model-name", "first", "second"},
      {"VLLM_API_KEY=vllm-key"}, scratch.dir / "serve.out");
  const int port =
      wait_for_server(log, std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"), health_ok);
  const bool up = port != 0;
  if (up) {
    auto open = client(port)->Get("/v1/models");
    ASSERT_TRUE(open);
    EXPECT_EQ(open->status, 401) << open->body;
    auto models = client(port, "vllm-key")->Get("/v1/models");
    ASSERT_TRUE(models);
    ASSERT_EQ(models->status, 200) << models->body;
    const json data = json::parse(models->body)["data"];
    ASSERT_EQ(data.size(), 2u) << models->body;
    EXPECT_EQ(data[0]["id"], "first");
    EXPECT_EQ(data[1]["id"], "second");
    auto r = client(port, "vllm-key")
                 ->Post("/v1/completions",
                        json{{"model", "second"}, {"prompt", "hi"}, {"max_tokens", 2}}.dump(),
                        "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["model"], "first") << "responses name the first name";
    auto unknown = client(port, "vllm-key")
                       ->Post("/v1/completions",
                              json{{"model", "third"}, {"prompt", "hi"}, {"max_tokens", 2}}.dump(),
                              "application/json");
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->status, 404) << unknown->body;
  }
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(60)), 0) << read_file(log);
  ASSERT_TRUE(up) << read_file(log) << read_file(scratch.dir / "serve.out");
}

// `--config FILE.yaml` in vLLM's form carries any serve option; the command line wins; a bad
// file is a clear error before anything loads; a VLLM_* variable Pagoda does not read is named.
TEST(VllmCommandLine, ConfigFileInVllmsFormAndItsErrors) {
  const Scratch scratch("pagoda_vllm_cli_test");
  const fs::path config = scratch.dir / "serve.yaml";
  std::ofstream(config) << "model: " << (scratch.dir / "no-such-model").string() << "\n"
                        << "port: 0\n"
                        << "dtype: bfloat16\n"
                        << "enforce_eager: true\n"
                        << "trust-remote-code: false\n"
                        << "served-model-name: [first, second]\n"
                        << "max-model-len: 2k\n"
                        << "enable-auto-tool-choice: true\n"
                        << "tool-call-parser: deepseek_v3\n"
                        << "log-level: error\n";
  const fs::path out = scratch.dir / "out.txt";
  EXPECT_EQ(wait_exit(spawn({"serve", "--config", config.string(), "--log-level", "info"},
                            {"VLLM_HOST_IP=10.0.0.1", "VLLM_SOMETHING_NEW=1"}, out),
                      std::chrono::seconds(30)),
            1);
  std::string text = read_file(out);
  EXPECT_NE(text.find("--dtype bfloat16 has no effect"), std::string::npos) << text;
  EXPECT_NE(text.find("--enforce-eager has no effect"), std::string::npos) << text;
  EXPECT_EQ(text.find("--trust-remote-code has no effect"), std::string::npos) << text;
  EXPECT_NE(text.find("no-such-model/config.json"), std::string::npos) << text;
  EXPECT_NE(text.find("VLLM_HOST_IP is set but has no effect: it is the address of a node"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("VLLM_SOMETHING_NEW is set but has no effect"), std::string::npos) << text;
  // The warnings above show that --log-level info on the command line beat the file's error.

  // VLLM_LOGGING_LEVEL sets the level when neither --log-level nor PAGODA_LOG_LEVEL does.
  const std::string model = (scratch.dir / "no-such-model").string();
  EXPECT_EQ(wait_exit(spawn({"serve", model, "--dtype", "half"}, {"VLLM_LOGGING_LEVEL=ERROR"}, out),
                      std::chrono::seconds(30)),
            1);
  text = read_file(out);
  EXPECT_EQ(text.find("--dtype half has no effect"), std::string::npos) << text;
  EXPECT_NE(text.find("loading failed"), std::string::npos) << text;
  EXPECT_EQ(wait_exit(spawn({"serve", model, "--dtype", "half"},
                            {"VLLM_LOGGING_LEVEL=ERROR", "PAGODA_LOG_LEVEL=warning"}, out),
                      std::chrono::seconds(30)),
            1);
  text = read_file(out);
  EXPECT_NE(text.find("--dtype half has no effect"), std::string::npos) << text;

  struct Case {
    std::string yaml;
    const char* message;
  };
  const Case cases[] = {
      {"port: 0\nmax-lora-rank: 8\n", "unknown key 'max-lora-rank'"},
      {"port: [0\n", "not valid YAML"},
      {"enforce-eager: maybe\n", "--enforce-eager is a switch"},
  };
  for (const Case& c : cases) {
    std::ofstream(config) << c.yaml;
    const int code = wait_exit(spawn({"serve", "m", "--config", config.string()}, {}, out),
                               std::chrono::seconds(30));
    text = read_file(out);
    EXPECT_EQ(code, 1) << c.message;
    EXPECT_NE(text.find(c.message), std::string::npos) << c.message << "\n" << text;
  }
  EXPECT_EQ(
      wait_exit(spawn({"serve", "m", "--config", (scratch.dir / "none.yaml").string()}, {}, out),
                std::chrono::seconds(30)),
      1);
  EXPECT_NE(read_file(out).find("none.yaml: no such file"), std::string::npos) << read_file(out);
}

// `pagoda serve ARGS` on 127.0.0.1, any port, logging to `log`; its pid and, once /health
// answers 200, its port (0 if it never did).
std::pair<pid_t, int> start_server(std::vector<std::string> args, const fs::path& log,
                                   const fs::path& out, const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), "serve");
  for (const char* a : {"--host", "127.0.0.1", "--port", "0", "--log-file"}) args.push_back(a);
  args.push_back(log.string());
  const pid_t pid = spawn(args, env, out);
  return {pid,
          wait_for_server(log, std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"), health_ok)};
}

// POST a JSON body; the status and the parsed body (status 0 when nothing came back).
std::pair<int, json> post_json(int port, const std::string& path, const json& body) {
  auto r = client(port)->Post(path, body.dump(), "application/json");
  if (!r) return {0, json()};
  return {r->status, json::parse(r->body, nullptr, false)};
}

// The JSON payloads of an SSE body's `data: {...}` events.
std::vector<json> sse_chunks(const std::string& raw) {
  std::vector<json> chunks;
  std::istringstream events(raw);
  for (std::string line; std::getline(events, line);) {
    if (line.rfind("data: {", 0) == 0) chunks.push_back(json::parse(line.substr(6)));
  }
  return chunks;
}

// The serve flags with vLLM's meaning, set from a config file, against a real server: the
// logprobs limit, token ids as logprob tokens, the response role, an inline chat template with
// the openai content format, return_token_strs and continuous usage stats; then a second server
// whose --generation-config directory makes the first greedy token the end of the sequence.
TEST(VllmCommandLine, VllmServeFlagsAndRequestFieldsOnARealServer) {
  const Scratch scratch("pagoda_vllm_cli_test");
  const fs::path model = scratch.dir / "model";
  ASSERT_EQ(wait_exit(spawn({"make-model", "--preset", "tiny", "--out", model.string()}, {},
                            scratch.dir / "make.txt"),
                      std::chrono::seconds(120)),
            0)
      << read_file(scratch.dir / "make.txt");
  const fs::path config = scratch.dir / "serve.yaml";
  std::ofstream(config) << "max_logprobs: 3\n"
                        << "return-tokens-as-token-ids: true\n"
                        << "response-role: model\n"
                        << "chat-template-content-format: openai\n"
                        << "generation-config: vllm\n";
  const fs::path log = scratch.dir / "serve.log";
  // The template loops over each message's content parts: with the openai format a plain string
  // content arrives as one text part.
  const auto [pid, port] = start_server(
      {model.string(), "--config", config.string(), "--max-model-len", "256", "--threads", "1",
       "--chat-template",
       "{% for m in messages %}<{% for p in m['content'] %}{{ p.text }}{% endfor %}>{% endfor %}"},
      log, scratch.dir / "serve.out");
  std::string first_token;  // "token_id:N" of the greedy continuation of "hi"
  if (port != 0) {
    // --max-logprobs 3 (from the file).
    auto [too_many_status, too_many] =
        post_json(port, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}, {"logprobs", 4}});
    EXPECT_EQ(too_many_status, 400) << too_many;
    auto [ok_status, ok] = post_json(port, "/v1/completions",
                                     {{"prompt", "hi"},
                                      {"max_tokens", 2},
                                      {"logprobs", 3},
                                      {"temperature", 0},
                                      {"ignore_eos", true}});
    ASSERT_EQ(ok_status, 200) << ok;
    const json& tokens = ok["choices"][0]["logprobs"]["tokens"];
    ASSERT_EQ(tokens.size(), 2u) << ok;
    first_token = tokens[0].get<std::string>();
    EXPECT_EQ(first_token.rfind("token_id:", 0), 0u) << ok;
    // --response-role, and the inline template with string content as an openai part list.
    auto [chat_status, chat] = post_json(port, "/v1/chat/completions",
                                         {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                                          {"max_tokens", 2},
                                          {"logprobs", true},
                                          {"top_logprobs", 1}});
    ASSERT_EQ(chat_status, 200) << chat;
    EXPECT_EQ(chat["choices"][0]["message"]["role"], "model") << chat;
    EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["token"].get<std::string>().rfind(
                  "token_id:", 0),
              0u);
    auto [chat_tok_status, chat_tok] = post_json(
        port, "/tokenize",
        {{"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"return_token_strs", true}});
    ASSERT_EQ(chat_tok_status, 200) << chat_tok;
    auto [plain_status, plain] =
        post_json(port, "/tokenize", {{"prompt", "<hello>"}, {"add_special_tokens", false}});
    ASSERT_EQ(plain_status, 200) << plain;
    EXPECT_EQ(chat_tok["tokens"], plain["tokens"]) << chat_tok << plain;
    ASSERT_TRUE(chat_tok.contains("token_strs")) << chat_tok;
    std::string joined;
    for (const json& piece : chat_tok["token_strs"]) joined += piece.get<std::string>();
    EXPECT_EQ(joined, "<hello>") << chat_tok;
    EXPECT_FALSE(plain.contains("token_strs"));
    // stream_options.continuous_usage_stats: every chunk with a choice carries the usage so far;
    // the chat stream opens with the --response-role.
    const json usage_options = {{"include_usage", true}, {"continuous_usage_stats", true}};
    const StreamResult streamed = stream_request(port, "/v1/completions",
                                                 {{"prompt", "hi"},
                                                  {"max_tokens", 3},
                                                  {"ignore_eos", true},
                                                  {"stream", true},
                                                  {"stream_options", usage_options}});
    EXPECT_EQ(streamed.status, 200);
    int num_choice_chunks = 0;
    int64_t last_completion_tokens = -1;
    for (const json& chunk : sse_chunks(streamed.raw)) {
      if (chunk["choices"].empty()) continue;
      ++num_choice_chunks;
      ASSERT_TRUE(chunk["usage"].is_object()) << chunk;
      EXPECT_GE(chunk["usage"]["completion_tokens"].get<int64_t>(), last_completion_tokens);
      last_completion_tokens = chunk["usage"]["completion_tokens"].get<int64_t>();
    }
    EXPECT_GT(num_choice_chunks, 0) << streamed.raw;
    EXPECT_EQ(last_completion_tokens, 3) << streamed.raw;
    const StreamResult chat_stream =
        stream_request(port, "/v1/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", "hello"}}}},
                        {"max_tokens", 2},
                        {"stream", true},
                        {"stream_options", usage_options}});
    const std::vector<json> chat_chunks = sse_chunks(chat_stream.raw);
    ASSERT_FALSE(chat_chunks.empty()) << chat_stream.raw;
    EXPECT_EQ(chat_chunks[0]["choices"][0]["delta"]["role"], "model") << chat_stream.raw;
    EXPECT_EQ(chat_chunks[0]["usage"]["completion_tokens"], 0) << chat_stream.raw;
  }
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(60)), 0) << read_file(log);
  ASSERT_NE(port, 0) << read_file(log) << read_file(scratch.dir / "serve.out");
  ASSERT_FALSE(first_token.empty());

  // --generation-config DIR: greedy, with the first greedy token as EOS, so a request that sets
  // neither stops after one token. And VLLM_ALLOW_LONG_MAX_MODEL_LEN lets --max-model-len pass
  // the tiny model's 512 positions.
  const fs::path generation = scratch.dir / "generation";
  fs::create_directories(generation);
  std::ofstream(generation / "generation_config.json")
      << json{{"temperature", 0.0}, {"eos_token_id", std::stoi(first_token.substr(9))}}.dump();
  const fs::path log2 = scratch.dir / "serve2.log";
  const auto [pid2, port2] =
      start_server({model.string(), "--generation-config", generation.string(), "--max-model-len",
                    "1024", "--threads", "1"},
                   log2, scratch.dir / "serve2.out", {"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"});
  if (port2 != 0) {
    auto [status, body] =
        post_json(port2, "/v1/completions", {{"prompt", "hi"}, {"max_tokens", 3}});
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << body;
    EXPECT_EQ(body["usage"]["completion_tokens"], 1) << body;
  }
  kill(pid2, SIGTERM);
  EXPECT_EQ(wait_exit(pid2, std::chrono::seconds(60)), 0) << read_file(log2);
  ASSERT_NE(port2, 0) << read_file(log2) << read_file(scratch.dir / "serve2.out");
  EXPECT_NE(read_file(log2).find("--max-model-len 1024 exceeds the model's "
                                 "max_position_embeddings 512: allowed"),
            std::string::npos)
      << read_file(log2);
  const fs::path out = scratch.dir / "too_long.out";
  EXPECT_EQ(
      wait_exit(spawn({"serve", model.string(), "--port", "0", "--max-model-len", "1024"}, {}, out),
                std::chrono::seconds(60)),
      1);
  EXPECT_NE(read_file(out).find("set PAGODA_ALLOW_LONG_MAX_MODEL_LEN=1"), std::string::npos)
      << read_file(out);
}

// The front door's vLLM flags on the real binary: HTTPS, CORS as vLLM's default allows it, a root
// path, the connection cap, and vLLM's keep-alive variable; a certificate that cannot be read
// fails the start naming the file.
TEST(VllmCommandLine, HttpsCorsAndRootPathFlags) {
  const Scratch scratch("pagoda_vllm_cli_test");
  const std::string cert = (scratch.dir / "cert.pem").string();
  const std::string key = (scratch.dir / "key.pem").string();
  const std::string openssl =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=x -keyout " + key + " -out " +
      cert + " >/dev/null 2>&1";
  if (std::system(openssl.c_str()) != 0) GTEST_SKIP() << "no openssl command to make a certificate";

  const fs::path missing_out = scratch.dir / "missing.txt";
  EXPECT_EQ(wait_exit(spawn({"serve", "demo", "--port", "0", "--ssl-certfile",
                             (scratch.dir / "nope.pem").string(), "--ssl-keyfile", key},
                            {}, missing_out),
                      std::chrono::seconds(30)),
            1);
  EXPECT_NE(read_file(missing_out).find("nope.pem"), std::string::npos) << read_file(missing_out);

  const fs::path log = scratch.dir / "serve.log";
  const pid_t pid =
      spawn({"serve", "demo", "--host", "127.0.0.1", "--port", "0", "--log-file", log.string(),
             "--ssl-certfile", cert, "--ssl-keyfile", key, "--allowed-origins", R"(["*"])",
             "--root-path", "/api", "--max-connections", "64"},
            {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE=2"}, scratch.dir / "serve.out");
  auto tls_client = [](int port) {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    c->enable_server_certificate_verification(false);
    c->set_read_timeout(30);
    return c;
  };
  const int port = wait_for_server(
      log, std::regex(R"(listening on https://127\.0\.0\.1:(\d+)/api)"), [&](int p) {
        auto r = tls_client(p)->Get("/api/health");
        return r && r->status == 200;
      });
  const bool up = port != 0;
  if (up) {
    auto r = tls_client(port)->Post("/api/v1/completions", {{"Origin", "https://any.example"}},
                                    R"({"prompt": "hi", "max_tokens": 2})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
  }
  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(60)), 0) << read_file(log);
  ASSERT_TRUE(up) << read_file(log) << read_file(scratch.dir / "serve.out");
}

}  // namespace
}  // namespace pagoda::server::testing
