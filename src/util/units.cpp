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
  while (pos < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) {
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
  struct Unit {
    const char* name;
    double scale;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1e3},
      {"kb", 1e3},
      {"m", 1e6},
      {"mb", 1e6},
      {"g", 1e9},
      {"gb", 1e9},
      {"t", 1e12},
      {"tb", 1e12},
      {"kib", 1024.0},
      {"mib", 1048576.0},
      {"gib", 1073741824.0},
      {"tib", 1099511627776.0},
  };
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (unit == u.name) found = &u;
  }
  if (found == nullptr) fail("invalid size '{}': unknown unit '{}'", text, unit);
  const double scale = found->scale;
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes > 1.8e19) fail("invalid size '{}': too large", text);
  return static_cast<uint64_t>(std::llround(bytes));
}

int64_t parse_count(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  const std::string number = text.substr(0, digits);
  const std::string suffix = text.substr(digits);
  const size_t dots = static_cast<size_t>(std::count(number.begin(), number.end(), '.'));
  if (number.empty() || number.front() == '.' || number.back() == '.' || dots > 1 ||
      suffix.size() > 1) {
    fail("invalid count '{}': expected an integer such as 4096, 2k or 32K", text);
  }
  const std::string decimal = "kmgt", binary = "KMGT";
  double scale = 1;
  if (!suffix.empty()) {
    const size_t d = decimal.find(suffix[0]), b = binary.find(suffix[0]);
    if (d == std::string::npos && b == std::string::npos) {
      fail("invalid count '{}': the suffix must be k, m, g, t (x1000) or K, M, G, T (x1024)", text);
    }
    scale = d != std::string::npos ? std::pow(1000.0, d + 1) : std::pow(1024.0, b + 1);
    if (b != std::string::npos && dots > 0) {
      fail("invalid count '{}': decimals need a decimal suffix (k, m, g, t), as in {}{}", text,
           number, static_cast<char>(std::tolower(static_cast<unsigned char>(suffix[0]))));
    }
  } else if (dots > 0) {
    fail("invalid count '{}': a count without a suffix must be an integer", text);
  }
  const double value = std::strtod(number.c_str(), nullptr) * scale;
  if (value > 9.2e18) fail("invalid count '{}': too large", text);
  return static_cast<int64_t>(value);
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
