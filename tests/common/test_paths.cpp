#include "common/test_paths.h"

namespace pagoda::test {

std::filesystem::path testdata_dir() {
  return PAGODA_TESTDATA_DIR;
}
std::filesystem::path source_dir() {
  return PAGODA_SOURCE_DIR;
}
std::filesystem::path pagoda_binary() {
  return PAGODA_BIN;
}
std::filesystem::path tokenizer_reference_dir() {
  return PAGODA_TOKENIZER_REFERENCE_DIR;
}

}  // namespace pagoda::test
