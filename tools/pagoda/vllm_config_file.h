// vLLM's `--config FILE.yaml` and its spelling of option names, as a rewrite of the arguments
// before CLI11 parses them, so that every option of a command can come from the file
// (vllm/utils/argparse_utils.py, FlexibleArgumentParser.load_config_file):
//
//   port: 8001                    --port=8001
//   max_model_len: 4k             --max-model-len=4k     (underscores or dashes)
//   enforce-eager: true           --enforce-eager        (a switch given)
//   enable-prefix-caching: false  --no-enable-prefix-caching (where a --no- form exists)
//   served-model-name: [a, b]     --served-model-name=a --served-model-name=b
//
// Options given on the command line win over the file's.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pagoda::cli {

// `--max_model_len` → `--max-model-len`, `--max_model_len=4k` → `--max-model-len=4k`: vLLM
// takes underscores for dashes in every option name. Values are left as they are.
void normalize_option_names(std::vector<std::string>& args);

// The arguments FILE stands for, each option checked against `command`. Throws pagoda::Error
// naming the file and the key: a missing or unreadable file, bad YAML, something other than a
// mapping, an unknown key, or a value of the wrong kind for its option.
std::vector<std::string> config_file_arguments(const std::string& path, const CLI::App& command);

// `args` is the command line without the program name, args[0] the subcommand. Replaces
// `--config FILE` (or `--config=FILE`) by the file's options that the command line does not
// give itself; does nothing without --config. Throws pagoda::Error.
void expand_config_file(std::vector<std::string>& args, const CLI::App& app);

}  // namespace pagoda::cli
