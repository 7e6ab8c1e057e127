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
#include <regex>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "server_test_util.h"

namespace pagoda::server::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("pagoda_vllm_cli_test_" + std::to_string(getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

// `pagoda ARGS...` with `env` added, stdout and stderr into `output`; returns the pid.
pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
            const fs::path& output) {
  std::vector<std::string> argv_strings = {pagoda::test::pagoda_binary().string()};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = env;
  const pid_t pid = fork();
  if (pid == 0) {
    for (std::string& e : env_strings) putenv(e.data());
    std::freopen(output.c_str(), "w", stderr);
    std::freopen(output.c_str(), "a", stdout);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `timeout` for the process to exit; its exit code, or -1 (then it is killed).
int wait_exit(pid_t pid, std::chrono::seconds timeout) {
  int status = 0;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    usleep(20 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST(VllmCommandLine, FailedLoadExitsNonZeroWithTheError) {
  const Scratch scratch;
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
  const Scratch scratch;
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
        "--enforce-eager has no", "--trust-remote-code has no", "--download-dir has no",
        "--distributed-executor-backend has no", "--uvicorn-log-level has no",
        "--disable-log-stats has no"}) {
    EXPECT_NE(text.find(inert), std::string::npos) << inert << "\n" << text;
  }
}

// --isa forces a kernel table and says so; the negative flags parse with their own names.
TEST(VllmCommandLine, IsaForcesTheKernelsAndNegativeFlagsParse) {
  const Scratch scratch;
  const fs::path out = scratch.dir / "out.txt";
  const pid_t pid = spawn({"serve", (scratch.dir / "m").string(), "--port", "0", "--isa", "scalar",
                           "--no-enable-prefix-caching", "--no-enable-chunked-prefill"},
                          {}, out);
  EXPECT_EQ(wait_exit(pid, std::chrono::seconds(30)), 1);
  const std::string text = read_file(out);
  EXPECT_NE(text.find("kernels: scalar (--isa)"), std::string::npos) << text;
  EXPECT_NE(text.find("loading failed"), std::string::npos) << text;
}

TEST(VllmCommandLine, ParallelismAboveOneAndBadValuesAreClearErrors) {
  const Scratch scratch;
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> env;
    const char* message;
  };
  const std::string model = (scratch.dir / "m").string();
  const Case cases[] = {
      {{"serve", model, "-tp", "2"}, {}, "tensor parallelism is not available yet"},
      {{"serve", model, "--pipeline-parallel-size", "4"}, {}, "pipeline parallelism"},
      {{"serve", model, "--device", "cuda"}, {}, "--device"},
      {{"serve", model, "--max-model-len", "1.5K"}, {}, "decimals need a decimal suffix"},
      {{"serve", model, "--model", model + "2"}, {}, "two models given"},
      {{"serve"}, {}, "no model given"},
      {{"serve", model, "--isa", "avx3"}, {}, "--isa"},
      {{"serve", model}, {"VLLM_CPU_OMP_THREADS_BIND=0|1"}, "one CPU list per tensor-parallel"},
  };
  for (const Case& c : cases) {
    const fs::path out = scratch.dir / "out.txt";
    const int code = wait_exit(spawn(c.args, c.env, out), std::chrono::seconds(30));
    const std::string text = read_file(out);
    EXPECT_NE(code, 0) << c.message;
    EXPECT_NE(text.find(c.message), std::string::npos) << c.message << "\n" << text;
  }
}

// VLLM_API_KEY locks the server as --api-key does (before, it was ignored and the server open),
// and every --served-model-name is a name requests may use.
TEST(VllmCommandLine, VllmApiKeyLocksTheServerAndEveryServedNameWorks) {
  const Scratch scratch;
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
  int port = 0;
  const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
  const bool up = eventually(
      [&] {
        std::smatch m;
        const std::string text = read_file(log);
        if (port == 0 && std::regex_search(text, m, listening)) port = std::stoi(m[1]);
        if (port == 0) return false;
        auto r = client(port)->Get("/health");
        return r && r->status == 200;
      },
      std::chrono::seconds(120));
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

// The front door's vLLM flags on the real binary: HTTPS, CORS as vLLM's default allows it, a root
// path, the connection cap, and vLLM's keep-alive variable; a certificate that cannot be read
// fails the start naming the file.
TEST(VllmCommandLine, HttpsCorsAndRootPathFlags) {
  const Scratch scratch;
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
  int port = 0;
  const std::regex listening(R"(listening on https://127\.0\.0\.1:(\d+)/api)");
  auto tls_client = [&] {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    c->enable_server_certificate_verification(false);
    c->set_read_timeout(30);
    return c;
  };
  const bool up = eventually(
      [&] {
        std::smatch m;
        const std::string text = read_file(log);
        if (port == 0 && std::regex_search(text, m, listening)) port = std::stoi(m[1]);
        if (port == 0) return false;
        auto r = tls_client()->Get("/api/health");
        return r && r->status == 200;
      },
      std::chrono::seconds(120));
  if (up) {
    auto r = tls_client()->Post("/api/v1/completions", {{"Origin", "https://any.example"}},
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
