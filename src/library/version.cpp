// The library's own translation unit: the version string, compiled in from CMake.
#include "pagoda/version.h"

namespace pagoda {

const char* version() {
  return PAGODA_VERSION;
}

}  // namespace pagoda
