// Where the tests find the shared test data, the source tree and the binaries they run.
//
// The paths are compiled into test_paths.cpp alone, so that no other test file's compile line
// names the checkout: a fresh clone then reuses the compiler cache for every other file.
#pragma once

#include <filesystem>

namespace pagoda::test {

std::filesystem::path testdata_dir();   // ../shared/testdata beside the checkout
std::filesystem::path source_dir();     // the checkout
std::filesystem::path pagoda_binary();  // ./build/pagoda (empty in a build without the CLI)
// The ids tests/node/tokenizer_reference.js writes (the tokenizer_reference_ids fixture).
std::filesystem::path tokenizer_reference_dir();

}  // namespace pagoda::test
