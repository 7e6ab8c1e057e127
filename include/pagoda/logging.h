// Where the library's log lines go. The CLI sets its own logger; a program embedding the
// library calls this once before creating an Engine, or gets spdlog's default (stdout, info).
#pragma once

#include <string>

#include "pagoda/export.h"

namespace pagoda {

// Sends the engine's log lines to stderr at `level`: "debug", "info", "warning", "error" or
// "off" (Python's upper-case names work too). Throws pagoda::Error for any other name.
PAGODA_API void log_to_stderr(const std::string& level);

}  // namespace pagoda
