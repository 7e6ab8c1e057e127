// --model-key-file / --model-key-command and PAGODA_MODEL_KEY: the key of weights that
// `pagoda encrypt` wrote, for every command that takes --model (docs/deployment.md).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "crypto/model_key.h"

namespace pagoda::cli {

struct ModelKeyFlags {
  std::string file;
  std::string command;
};
void add_model_key_options(CLI::App* app, ModelKeyFlags& flags);

// The flags, else PAGODA_MODEL_KEY when it is set (the command line wins); empty for plain
// weights. Throws pagoda::Error when both flags are given.
crypto::ModelKeySource model_key_source(const ModelKeyFlags& flags);

}  // namespace pagoda::cli
