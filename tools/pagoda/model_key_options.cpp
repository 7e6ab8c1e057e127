#include "tools/pagoda/model_key_options.h"

#include <cstdlib>

#include "util/error.h"

namespace pagoda::cli {

void add_model_key_options(CLI::App* app, ModelKeyFlags& flags) {
  app->add_option("--model-key-file", flags.file,
                  "Key of weights encrypted by `pagoda encrypt`: a file of 64 hex digits or 32 "
                  "bytes (also: --model-key-command, env PAGODA_MODEL_KEY)");
  app->add_option("--model-key-command", flags.command,
                  "Shell command printing the key of encrypted weights (a TEE, KMS or HSM client)");
}

crypto::ModelKeySource model_key_source(const ModelKeyFlags& flags) {
  if (!flags.file.empty() && !flags.command.empty()) {
    fail("--model-key-file and --model-key-command both given: the key comes from one of them");
  }
  crypto::ModelKeySource source;
  source.file = flags.file;
  source.command = flags.command;
  if (source.empty() && std::getenv("PAGODA_MODEL_KEY") != nullptr) {
    source.environment_variable = "PAGODA_MODEL_KEY";
  }
  return source;
}

}  // namespace pagoda::cli
