// The version of the Pagoda library a program runs against (which may be newer than the headers
// it was compiled with, as long as the soname matches).
#pragma once

#include "pagoda/export.h"

namespace pagoda {

// "MAJOR.MINOR.PATCH", as the project() line of CMakeLists.txt says.
PAGODA_API const char* version();

}  // namespace pagoda
