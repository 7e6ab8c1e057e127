#pragma once
// The tiny random-weight model the engine tests run on: generated once per process (CTest runs
// every case in a process of its own) and removed when the process exits, so test runs leave
// nothing in /tmp.

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "demo/model_generator.h"

namespace pagoda::test {

struct TinyModel {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("pagoda_engine_test_" + std::to_string(::getpid())))
                        .string();
  TinyModel() {
    ModelSpec spec = model_preset("tiny");
    spec.max_position_embeddings = 1024;
    generate_model(spec, dir);
  }
  ~TinyModel() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

inline const std::string& tiny_model_dir() {
  static const TinyModel model;
  return model.dir;
}

}  // namespace pagoda::test
