// Seconds on the monotonic clock: the timestamps of request metrics, step logs and progress,
// which only ever subtract two of them.
#pragma once

#include <chrono>

namespace pagoda {

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace pagoda
