// Pagoda's exception type (public: include/pagoda/error.h) and `fail`, the way the rooms throw
// it with a formatted message.
#pragma once

#include <utility>

#include <fmt/format.h>

#include "pagoda/error.h"

namespace pagoda {

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace pagoda
