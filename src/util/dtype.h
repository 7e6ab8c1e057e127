// Element types of stored tensors (weights in safetensors/GGUF files).
#pragma once

#include <cstdint>

namespace pagoda {

enum class DType : uint8_t { kF32, kF16, kBF16 };

inline int64_t dtype_size(DType t) {
  return t == DType::kF32 ? 4 : 2;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

}  // namespace pagoda
