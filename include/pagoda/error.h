// The one exception type Pagoda throws at its edges (loader, tokenizer, config, CLI) and across
// its public API. Messages name the file, the key and the cause, so they print as one line.
#pragma once

#include <stdexcept>
#include <string>

#include "pagoda/export.h"

namespace pagoda {

class PAGODA_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace pagoda
