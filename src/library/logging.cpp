// log_to_stderr: the library's logging set-up for embedding programs (the CLI's init_runtime
// does the same for itself, with its flags).
#include "pagoda/logging.h"

#include <algorithm>
#include <cctype>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "util/error.h"

namespace pagoda {

void log_to_stderr(const std::string& level) {
  std::string name = level;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name == "warning") name = "warn";  // spdlog's spelling of Python's WARNING
  if (name == "critical") name = "err";
  const spdlog::level::level_enum parsed = spdlog::level::from_str(name);
  if (parsed == spdlog::level::off && name != "off") {
    fail("log level must be debug, info, warning, error or off, got '{}'", level);
  }
  // stdout belongs to the program: a Python script's prints, a tool's results.
  if (spdlog::get("pagoda") == nullptr) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("pagoda"));
  }
  spdlog::set_level(parsed);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
}

}  // namespace pagoda
