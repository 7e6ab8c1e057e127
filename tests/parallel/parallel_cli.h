// What the end-to-end tests of `pagoda ... -tp N` and `-pp P` (tensor_parallel_cli_test,
// pipeline_parallel_cli_test) share: whether there is a CLI to run, their generated models, the
// port a parallel `pagoda serve` answers on, and killing one rank of a generation under way.
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "cli/cli_process.h"
#include "common/test_paths.h"
#include "demo/model_generator.h"

namespace pagoda::cli::testing {

inline bool have_pagoda() {
  return std::filesystem::exists(pagoda::test::pagoda_binary());
}

// `spec` generated into the scratch folder named after its architecture; returns its path.
inline std::string generate_in(const Scratch& scratch, const ModelSpec& spec) {
  const std::string dir = scratch.path(spec.architecture);
  generate_model(spec, dir);
  return dir;
}

// The port `p` (`pagoda serve ... --host 127.0.0.1 --port 0 --log-level info`) says it listens
// on, once its /health answers 200 there; 0 when that has not happened within `timeout`.
inline int wait_until_serving(PagodaProcess& p, std::chrono::milliseconds timeout) {
  const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
  int port = 0;
  const bool serving = p.wait_until(
      [&] {
        std::smatch m;
        const std::string err = p.err();
        if (port == 0 && std::regex_search(err, m, listening)) port = std::stoi(m[1]);
        if (port == 0) return false;
        httplib::Client client("127.0.0.1", port);
        const auto health = client.Get("/health");
        return health && health->status == 200;
      },
      timeout);
  return serving ? port : 0;
}

// The processes of tensor-parallel rank `rank` (a follower's own flag) serving `model`.
inline std::vector<pid_t> rank_processes(const std::string& model, int rank) {
  return processes_with(
      {model, std::string("--tensor-parallel-rank") + '\0' + std::to_string(rank)});
}

// Once `p` (started with --log-level info) generates and the process of `rank` runs: kills that
// process with SIGKILL. Fails, killing nothing, unless exactly one such process runs.
inline ::testing::AssertionResult kill_rank_while_generating(PagodaProcess& p,
                                                             const std::string& model, int rank) {
  using namespace std::chrono_literals;
  if (!p.wait_until([&] { return p.err().find("KV cache:") != std::string::npos; }, 120s))
    return ::testing::AssertionFailure() << "no KV cache planned:\n" << p.err();
  std::vector<pid_t> victims;
  if (!p.wait_until(
          [&] {
            victims = rank_processes(model, rank);
            return !victims.empty();
          },
          30s))
    return ::testing::AssertionFailure() << "no rank " << rank << " process";
  std::this_thread::sleep_for(300ms);
  if (victims.size() != 1u)
    return ::testing::AssertionFailure() << victims.size() << " rank " << rank << " processes";
  ::kill(victims.front(), SIGKILL);
  return ::testing::AssertionSuccess();
}

}  // namespace pagoda::cli::testing
