#include "loader/weight_format.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "loader/safetensors.h"

namespace pagoda {
namespace {

// The format of one weight matrix as its source stored it.
std::string format_of(const Tensor& t) {
  const std::string& stored = t.stored_dtype;
  if (stored == "F32") return "f32";
  if (stored == "F16") return "f16";
  if (stored == "BF16") return "bf16";
  // FP8 converted at load (loader/fp8_checkpoint.h): what it became.
  if (stored == "FP8") {
    return t.dtype == DType::kF32
               ? "fp8 (as f32)"
               : fmt::format("fp8 (as {}, group {})", dtype_name(t.dtype), t.group_size);
  }
  // AWQ / GPTQ repacked to kI4 (loader/awq_gptq.h), Pagoda's own I8 / U8 checkpoints.
  if (stored == "AWQ" || stored == "GPTQ")
    return fmt::format("{} int4 (group {})", stored, t.group_size);
  if (t.dtype_supported && (t.dtype == DType::kI8 || t.dtype == DType::kI4) &&
      (stored == "I8" || stored == "U8")) {
    return fmt::format("{} (group {})", dtype_name(t.dtype), t.group_size);
  }
  return stored;  // GGUF: the ggml type name (Q8_0, Q4_K, ...); anything else as written
}

}  // namespace

std::vector<WeightFormatShare> weight_formats(const TensorStore& store) {
  std::map<std::string, int64_t> elements;
  for (const auto& [name, t] : store.tensors()) {
    if (t.shape.size() != 2 || !name.ends_with(".weight")) continue;
    elements[format_of(t)] += t.num_elements();
  }
  std::vector<WeightFormatShare> shares;
  for (const auto& [format, n] : elements) shares.push_back({format, n});
  std::stable_sort(shares.begin(), shares.end(),
                   [](const WeightFormatShare& a, const WeightFormatShare& b) {
                     return a.num_elements > b.num_elements;
                   });
  return shares;
}

std::string describe_weight_format(const TensorStore& store) {
  const std::vector<WeightFormatShare> shares = weight_formats(store);
  if (shares.empty()) return "none";
  if (shares.size() == 1) return shares.front().format;
  int64_t total = 0;
  for (const WeightFormatShare& s : shares) total += s.num_elements;
  std::vector<std::string> parts;
  for (const WeightFormatShare& s : shares) {
    const double percent = 100.0 * static_cast<double>(s.num_elements) / static_cast<double>(total);
    parts.push_back(percent >= 1.0 ? fmt::format("{} {:.0f}%", s.format, percent)
                                   : fmt::format("{} <1%", s.format));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace pagoda
