// The protocol tests' way to look at a refused request: the RequestError a call throws.
#pragma once

#include <functional>

#include <gtest/gtest.h>

#include "server/openai_protocol.h"

namespace pagoda::server::testing {

// The error `f` throws as a RequestError; a test failure (and an empty error) when it throws
// none.
inline ApiError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RequestError& e) {
    return e.error();
  }
  ADD_FAILURE() << "expected a RequestError";
  return {};
}

}  // namespace pagoda::server::testing
