// ModelSpec's family test (through the registry, not by architecture name) and dtype name.
#include "model/model_spec.h"

#include "model/model_family.h"

namespace pagoda {

bool ModelSpec::is_deepseek() const {
  return find_model_family(architecture) == &deepseek_family();
}

const char* torch_dtype_name(DType dtype) {
  return dtype == DType::kF32 ? "float32" : dtype == DType::kF16 ? "float16" : "bfloat16";
}

}  // namespace pagoda
