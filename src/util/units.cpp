#include "util/units.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "util/error.h"

namespace pagoda {

uint64_t parse_byte_size(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) {
    ++pos;
  }
  if (pos == 0) fail("invalid size '{}': expected a number such as 4GiB", text);
  char* end = nullptr;
  const std::string number = text.substr(0, pos);
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size()) fail("invalid size '{}'", text);
  std::string unit = text.substr(pos);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb" || unit == "k") scale = 1e3;
  else if (unit == "mb" || unit == "m") scale = 1e6;
  else if (unit == "gb" || unit == "g") scale = 1e9;
  else if (unit == "tb" || unit == "t") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else fail("invalid size '{}': unknown unit '{}'", text, unit);
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes > 1.8e19) fail("invalid size '{}': too large", text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace pagoda
