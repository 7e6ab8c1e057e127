// Each `pagoda <subcommand>` lives in its own cmd_<name>.cpp and registers itself here.
// A registration adds the subcommand's options to `app` and returns the function to run
// when that subcommand is chosen; the function returns the process exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace pagoda::cli {

using Command = std::function<int()>;

Command register_version(CLI::App& app);
Command register_generate(CLI::App& app);
Command register_chat(CLI::App& app);
Command register_info(CLI::App& app);
// Added by their rooms' cmd_*.cpp files:
Command register_tokenize(CLI::App& app);
Command register_detokenize(CLI::App& app);
Command register_make_model(CLI::App& app);
Command register_make_draft(CLI::App& app);
Command register_serve(CLI::App& app);
Command register_export_gguf(CLI::App& app);
Command register_quantize(CLI::App& app);
Command register_download(CLI::App& app);
Command register_encrypt(CLI::App& app);
// `pagoda bench`: a group of benchmarks. bench_command() creates the group on first use; each
// child adds itself with bench_command(app)->add_subcommand(...) and add_bench_runner(child, run),
// and register_bench (`bench serve`) returns the dispatcher that runs whichever child was chosen.
Command register_bench(CLI::App& app);
CLI::App* bench_command(CLI::App& app);
void add_bench_runner(CLI::App* child, Command run);
// `bench throughput` and `bench latency` (cmd_bench_engine.cpp); register after register_bench.
Command register_bench_engine(CLI::App& app);
// `bench quality` (cmd_bench_quality.cpp); register after register_bench.
Command register_bench_quality(CLI::App& app);

}  // namespace pagoda::cli
