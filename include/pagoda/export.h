// PAGODA_API marks what libpagoda.so exports. The library is compiled with hidden visibility
// (src/CMakeLists.txt), so only the classes and functions of include/pagoda/ that carry this
// macro are visible to programs linking it; everything in src/ stays private and the compiler
// may inline and drop it freely. Exception types must carry it too: a program catches
// pagoda::Error by its type_info, which has to be the library's one.
#pragma once

#if defined(_WIN32)
#define PAGODA_API
#else
#define PAGODA_API __attribute__((visibility("default")))
#endif
