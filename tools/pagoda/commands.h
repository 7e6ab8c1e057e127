// Each `pagoda <subcommand>` lives in its own cmd_<name>.cpp and registers itself here.
// A registration adds the subcommand's options to `app` and returns the function to run
// when that subcommand is chosen; the function returns the process exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace pagoda::cli {

using Command = std::function<int()>;

Command register_version(CLI::App& app);
// Added by their rooms' cmd_*.cpp files:
Command register_tokenize(CLI::App& app);
Command register_detokenize(CLI::App& app);

}  // namespace pagoda::cli
