#include "tools/pagoda/commands.h"

#include <fmt/format.h>

#include "kernels/kernels.h"
#include "util/cpu_features.h"

namespace pagoda::cli {

Command register_version(CLI::App& app) {
  app.add_subcommand("version", "Print the version, CPU features and chosen kernels");
  return [] {
    fmt::print("pagoda {}\ncpu: {}\nkernels: {}\n", PAGODA_VERSION, cpu_features().describe(),
               kernels().isa);
    return 0;
  };
}

}  // namespace pagoda::cli
