// `pagoda`: one binary, one subcommand per job (serve, generate, chat, bench, tokenize, info).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "tools/pagoda/commands.h"
#include "tools/pagoda/vllm_compat.h"
#include "tools/pagoda/vllm_config_file.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Pagoda: serve DeepSeek models on CPU, the way vLLM does"};
  app.require_subcommand(1);
  app.set_version_flag("--version", PAGODA_VERSION);

  using Registration = pagoda::cli::Command (*)(CLI::App&);
  const Registration registrations[] = {
      pagoda::cli::register_version,       pagoda::cli::register_tokenize,
      pagoda::cli::register_detokenize,    pagoda::cli::register_generate,
      pagoda::cli::register_chat,          pagoda::cli::register_info,
      pagoda::cli::register_make_model,    pagoda::cli::register_serve,
      pagoda::cli::register_bench,         pagoda::cli::register_bench_engine,
      pagoda::cli::register_export_gguf,   pagoda::cli::register_quantize,
      pagoda::cli::register_bench_quality, pagoda::cli::register_download,
      pagoda::cli::register_encrypt,       pagoda::cli::register_make_draft,
  };
  std::vector<std::pair<CLI::App*, pagoda::cli::Command>> commands;
  for (Registration reg : registrations) {
    const size_t before = app.get_subcommands({}).size();
    pagoda::cli::Command run = reg(app);
    // A bench child (see bench_command) adds no top-level subcommand; `bench` dispatches to it.
    if (app.get_subcommands({}).size() > before)
      commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  }

  // vLLM's spellings first (-tp, --max_model_len, --config FILE.yaml), so that CLI11 sees only
  // its own.
  std::vector<std::string> args(argv + 1, argv + argc);
  pagoda::cli::expand_vllm_short_flags(args);
  pagoda::cli::normalize_option_names(args);
  try {
    pagoda::cli::expand_config_file(args, app);
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 1;
}
