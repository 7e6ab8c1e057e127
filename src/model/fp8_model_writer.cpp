#include "model/fp8_model_writer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "loader/fp8_checkpoint.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "util/error.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// DeepSeek-V3 quantizes the linear layers of its blocks and keeps the rest in bf16.
bool is_fp8_target(const Tensor& t) {
  return t.shape.size() == 2 && t.dtype_supported && !is_quantized(t.dtype) &&
         (t.name.ends_with("_proj.weight") || t.name.ends_with("_proj_with_mqa.weight"));
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path.string());
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2);
  out.close();
  if (!out) fail("{}: write failed", path.string());
}

}  // namespace

Fp8WriteResult write_fp8_model(const std::string& model_dir, int64_t block_rows,
                               int64_t block_cols) {
  const fs::path dir(model_dir);
  // The store's maps keep the old files readable while new ones are renamed over them.
  const TensorStore store =
      TensorStore::open(model_dir, FileMemory::kMap, nullptr, nullptr, Fp8Weights::kAsStored);
  Fp8WriteResult result;
  std::map<std::string, std::string> scale_shards;  // scale tensor -> its file name
  for (const std::string& file : store.files()) {
    std::vector<const Tensor*> tensors;
    for (const auto& [name, t] : store.tensors())
      if (t.path == file) tensors.push_back(&t);
    std::vector<TensorLayout> layout;
    for (const Tensor* t : tensors) {
      if (t->stored_dtype == "F8_E4M3") fail("{}: {} is FP8 already", file, t->name);
      if (!is_fp8_target(*t)) {
        layout.push_back({t->name, t->stored_dtype, t->shape});
        continue;
      }
      layout.push_back({t->name, "F8_E4M3", t->shape});
      layout.push_back({t->name + "_scale_inv",
                        "F32",
                        {ceil_div(t->shape[0], block_rows), ceil_div(t->shape[1], block_cols)}});
      scale_shards[t->name + "_scale_inv"] = fs::path(file).filename().string();
    }
    const std::string tmp = file + ".fp8.tmp";
    {
      SafetensorsWriter writer(tmp, layout);
      size_t index = 0;
      std::vector<float> wide;
      for (const Tensor* t : tensors) {
        if (!is_fp8_target(*t)) {
          std::memcpy(writer.data(index++), t->data, static_cast<size_t>(t->size_bytes));
          continue;
        }
        wide.resize(static_cast<size_t>(t->num_elements()));
        kernels().to_f32(t->data, t->dtype, t->num_elements(), wide.data());
        uint8_t* q = writer.data(index++);
        auto* scales = reinterpret_cast<float*>(writer.data(index++));
        quantize_fp8_blocks(wide.data(), t->shape[0], t->shape[1], block_rows, block_cols, q,
                            scales);
        ++result.num_matrices;
      }
      writer.finish();
      result.weight_bytes += static_cast<int64_t>(writer.file_size_bytes());
    }
    fs::rename(tmp, file);
  }

  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    json index = read_json(index_path);
    for (const auto& [name, shard] : scale_shards) index["weight_map"][name] = shard;
    write_json(index_path, index);
  }
  const fs::path config_path = dir / "config.json";
  json config = read_json(config_path);
  config["quantization_config"] = {{"quant_method", "fp8"},
                                   {"fmt", "e4m3"},
                                   {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {block_rows, block_cols}}};
  write_json(config_path, config);
  return result;
}

}  // namespace pagoda
