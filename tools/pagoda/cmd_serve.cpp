// `pagoda serve`: the OpenAI-compatible HTTP server (src/server) over one engine, with vLLM's
// flag names. Signals: SIGHUP reopens --log-file (logrotate); SIGTERM/SIGINT stop accepting
// new requests, let running ones finish for up to --shutdown-timeout seconds, then abort them.
// Under mpirun, SIGTERM means the job is being torn down (a rank died, or mpirun was stopped)
// and SIGKILL follows within a second (Open MPI's odls_base_sigkill_timeout): the requests in
// flight and any new one are answered 503 at once, and the process exits 1.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "pagoda/async_engine.h"
#include "server/http_server.h"
#include "server/log_file_sink.h"
#include "server/tool_parsers/tool_call_parser.h"
#include "tools/pagoda/commands.h"
#include "tools/pagoda/engine_options.h"
#include "tools/pagoda/http_options.h"
#include "tools/pagoda/tensor_parallel_launch.h"
#include "tools/pagoda/vllm_compat.h"
#include "util/error.h"

namespace pagoda::cli {
namespace {

struct ServeFlags {
  EngineFlags engine;
  VllmServeFlags vllm;
  HttpFlags http;
  CLI::App* command = nullptr;
  server::ServerOptions server;
  int max_waiting_requests = 1024;
  bool disable_log_requests = false;
  bool disable_log_stats = false;
  std::string log_file;
  double shutdown_timeout_s = 30;
};

// "--port 8080, --api-key <redacted>": the serve options given (command line or environment)
// whose value differs from the default, except the engine's, which the engine logs itself
// (engine_log.h). Secrets are never logged.
std::string non_default_server_flags(const CLI::App& command) {
  CLI::App engine_only;
  EngineFlags engine_defaults;
  add_engine_options(&engine_only, engine_defaults);
  std::set<std::string> engine_names;
  for (const CLI::Option* opt : engine_only.get_options()) engine_names.insert(opt->get_name());
  std::vector<std::string> items;
  for (const CLI::Option* opt : command.get_options()) {
    const std::string name = opt->get_name();
    if (opt->count() == 0 || opt->get_positional() || engine_names.count(name) != 0) continue;
    if (opt->get_expected_max() == 0) {  // a flag
      items.push_back(name);
      continue;
    }
    const std::string value = fmt::format("{}", fmt::join(opt->results(), " "));
    if (value == opt->get_default_str()) continue;
    const bool secret = name.find("key") != std::string::npos && name != "--ssl-keyfile";
    items.push_back(fmt::format("{} {}", name, secret ? "<redacted>" : value));
  }
  return items.empty() ? "none" : fmt::format("{}", fmt::join(items, ", "));
}

// Every request in flight answered 503 at once (the engine thread may be blocked for good in a
// collective with a rank that is gone), a moment for the answers to be written, then exit 1
// without destructors: joining the engine thread or finalising MPI could wait forever.
[[noreturn]] void fail_mpi_job(AsyncEngine& engine) {
  const std::string reason =
      "The server is stopping: mpirun is ending the job (a parallel rank exited, or mpirun was "
      "stopped)";
  engine.fail_now(reason);
  spdlog::error("SIGTERM under mpirun: {}; answered the requests in flight with 503", reason);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::fprintf(stderr, "error: %s\n", reason.c_str());
  spdlog::shutdown();
  std::_Exit(1);
}

// Waits for running requests to end (or the deadline), then aborts the rest and waits briefly
// for their streams to deliver the final chunk.
void drain(AsyncEngine& engine, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  engine.begin_drain();
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (engine.num_in_flight() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (engine.num_in_flight() > 0) {
    spdlog::warn("shutdown timeout reached: aborting {} requests", engine.num_in_flight());
    engine.abort_all();
    const auto flush_deadline = Clock::now() + std::chrono::seconds(2);
    while (engine.num_in_flight() > 0 && Clock::now() < flush_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Give the last streams a moment to write their [DONE] before the sockets close.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

int run_serve(ServeFlags& f) {
  init_runtime(f.engine);
  std::shared_ptr<server::LogFileSink> file_sink;
  if (!f.log_file.empty()) {
    file_sink = std::make_shared<server::LogFileSink>(f.log_file);
    auto logger = std::make_shared<spdlog::logger>("pagoda", file_sink);
    logger->set_level(spdlog::get_level());
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %v");
    spdlog::set_default_logger(logger);
  }
  spdlog::info("Pagoda API server version {}", PAGODA_VERSION);
  apply_vllm_serve_options(*f.command, f.vllm, f.engine, f.server, f.disable_log_requests);
  apply_http_options(*f.command, f.http, f.server);
  spdlog::info("server args (non-default): {}", non_default_server_flags(*f.command));
  EngineArgs args = f.engine.to_engine_args();
  adopt_mpi_rank(args);  // under mpirun: this process is one rank of its world
  if (args.tensor_parallel_rank > 0) return run_follower_rank(args);
  args.reasoning_parser = f.server.reasoning_parser;  // a grammar starts after </think>
  if (!f.server.reasoning_parser.empty() && f.server.reasoning_parser != "deepseek_r1") {
    fail("--reasoning-parser must be deepseek_r1, got '{}'", f.server.reasoning_parser);
  }
  const auto& parsers = server::tool_call_parser_names();
  std::string& tool_parser = f.server.protocol.tool_call_parser;
  if (!tool_parser.empty() &&
      std::find(parsers.begin(), parsers.end(), tool_parser) == parsers.end()) {
    fail("--tool-call-parser must be one of {}, got '{}'", fmt::join(parsers, ", "), tool_parser);
  }
  if (f.server.protocol.enable_auto_tool_choice && tool_parser.empty()) {
    fail("--enable-auto-tool-choice requires --tool-call-parser");
  }
  if (f.max_waiting_requests < 1)
    fail("--max-waiting-requests must be at least 1, got {}", f.max_waiting_requests);
  if (f.shutdown_timeout_s < 0)
    fail("--shutdown-timeout must not be negative, got {}", f.shutdown_timeout_s);
  f.server.version = PAGODA_VERSION;
  // -tp N: ranks 1..N-1 (started before signals are blocked, which they would inherit), waited
  // for after the engine, which tells them to stop as it goes.
  const FollowerRanks followers(args);

  // Signals go to one thread that waits for them; every other thread inherits the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  AsyncEngineOptions engine_options;
  engine_options.max_waiting_requests = f.max_waiting_requests;
  engine_options.log_requests = !f.disable_log_requests;
  engine_options.log_stats = !f.disable_log_stats;
  // The engine thread records into the metrics /metrics renders.
  f.server.metrics = std::make_shared<server::EngineMetrics>();
  engine_options.observer = f.server.metrics;
  AsyncEngine engine([args] { return make_engine_backend(args); }, engine_options);
  server::HttpServer http(engine, f.server);
  const int port = http.bind();
  engine.start();
  spdlog::info("listening on {}://{}:{}{} (model loading: /health answers 503 until ready)",
               f.server.transport.ssl_certfile.empty() ? "http" : "https", f.server.host, port,
               f.server.transport.root_path);

  // A failed load (or an engine loop that died) ends the process with the error, so that a
  // supervisor sees the exit instead of a server answering 503 forever; as vLLM does.
  std::atomic<bool> serving{true};
  std::thread engine_watch([&] {
    while (serving.load()) {
      if (engine.state() == AsyncEngine::State::kDead) {
        spdlog::error("stopping the server: {}", engine.failure());
        http.stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  std::thread signal_thread([&] {
    while (true) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0) continue;
      if (sig == SIGHUP) {
        if (file_sink) file_sink->reopen();
        spdlog::info("SIGHUP: log file reopened");
        continue;
      }
      if (sig == SIGUSR1) return;  // the server stopped by itself
      if (sig == SIGTERM && args.tensor_parallel_mpi) fail_mpi_job(engine);
      spdlog::info("{}: shutting down (up to {} s for running requests)",
                   sig == SIGTERM ? "SIGTERM" : "SIGINT", f.shutdown_timeout_s);
      drain(engine, f.shutdown_timeout_s);
      http.stop();
      return;
    }
  });
  http.listen();
  serving = false;
  engine_watch.join();
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();
  engine.stop();
  if (engine.state() == AsyncEngine::State::kDead) {
    // On stderr too: with --log-file the log may not be where the supervisor looks.
    std::fprintf(stderr, "error: %s\n", engine.failure().c_str());
    return 1;
  }
  spdlog::info("server stopped");
  return 0;
}

}  // namespace

Command register_serve(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  f->engine.log_level = "info";
  CLI::App* sub = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  f->command = sub;
  add_engine_options(sub, f->engine);
  add_tensor_parallel_options(sub, f->engine.args);
  add_vllm_serve_options(sub, f->vllm);
  add_http_options(sub, f->http, f->server);
  server::ServerOptions& s = f->server;
  sub->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", s.port, "Port to listen on (0: any free port)")->capture_default_str();
  sub->add_option("--api-key", s.api_key,
                  "Require 'Authorization: Bearer KEY' on every route but /health (env "
                  "PAGODA_API_KEY, or vLLM's VLLM_API_KEY)")
      ->envname("PAGODA_API_KEY");
  sub->add_option("--max-request-bytes", s.max_request_bytes, "Largest request body (413 above)")
      ->capture_default_str();
  sub->add_option("--max-waiting-requests", f->max_waiting_requests,
                  "Queued requests beyond this get 503")
      ->capture_default_str();
  sub->add_option("--http-threads", s.num_http_threads,
                  "Threads that parse, template and tokenize requests (open connections and "
                  "streams hold none)")
      ->capture_default_str();
  sub->add_option("--reasoning-parser", s.reasoning_parser,
                  "deepseek_r1: put <think>...</think> text into reasoning_content");
  sub->add_flag("--enable-auto-tool-choice", s.protocol.enable_auto_tool_choice,
                "Let the model decide when to call tools (tool_choice \"auto\", the default when "
                "a request sends tools); needs --tool-call-parser");
  sub->add_option("--tool-call-parser", s.protocol.tool_call_parser,
                  "How the model writes tool calls: deepseek_v3 (DeepSeek-V3/R1), deepseek_v31 "
                  "(DeepSeek-V3.1), hermes (Qwen 2.5, DeepSeek-R1-Distill-Qwen)");
  sub->add_flag("--strict-request-fields", s.strict_request_fields,
                "Answer 400 to request fields the server does not know (default: ignore them "
                "with a warning, as vLLM does)");
  sub->add_flag("--disable-log-requests", f->disable_log_requests,
                "No log line per finished request");
  sub->add_flag("--disable-log-stats", f->disable_log_stats,
                "No stats line (throughput, running and waiting requests, KV cache usage) every "
                "10 s while the server is busy");
  sub->add_option("--log-file", f->log_file,
                  "Append logs to this file (reopened on SIGHUP) instead of stderr");
  sub->add_option("--shutdown-timeout", f->shutdown_timeout_s,
                  "Seconds running requests may take to finish after SIGTERM")
      ->capture_default_str();
  return [f] { return run_serve(*f); };
}

}  // namespace pagoda::cli
