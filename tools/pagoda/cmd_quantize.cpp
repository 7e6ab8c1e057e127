// `pagoda quantize`: convert once, deploy many. Loads a float checkpoint with load-time
// quantization exactly as `--quantization` would, then writes what the model computes with:
// every quantized matrix as NAME (I8, or U8 holding packed int4) with NAME_scale (and
// NAME_min) in F16, everything else as stored. The output loads without requantizing
// (TensorStore folds the planes back into one kI8/kI4 tensor).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "kernels/host_context.h"
#include "kernels/quantize.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "tools/pagoda/commands.h"
#include "util/error.h"
#include "util/units.h"

namespace pagoda::cli {
namespace {

namespace fs = std::filesystem;

struct QuantizeOptions {
  std::string model_dir;
  std::string out_dir;
  std::string to;
  int64_t group_size = 0;
};

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

int run_quantize(const QuantizeOptions& o) {
  if (fs::exists(o.out_dir) && !fs::is_empty(o.out_dir)) {
    fail("{}: exists and is not empty; choose a new directory", o.out_dir);
  }
  const ModelConfig config = ModelConfig::from_dir(o.model_dir);
  // FP8 checkpoints (DeepSeek-V3/R1) convert straight into the target panels as they open, a
  // row at a time (loader/fp8_checkpoint.h); a chosen group size needs the exact fp32 weights
  // to requantize instead, which holds them all in memory.
  const Fp8Weights fp8 = o.group_size > 0 ? Fp8Weights::kDequant : parse_fp8_weights(o.to);
  const TensorStore store = TensorStore::open(o.model_dir, FileMemory::kMap, nullptr, nullptr, fp8);

  std::map<std::string, WeightView> quantized;
  ModelOptions options;
  options.max_num_batched_tokens = 1;
  options.weights.quantize_to = parse_quantization(o.to);
  options.weights.group_size = o.group_size;
  options.weights.on_quantized = [&](const std::string& name, const WeightView& w) {
    quantized[name] = w;
  };
  const auto model = create_model(host_execution_context(), config, store,
                                  options);  // quantizes; keeps the copies
  std::set<std::string> fp8_scales;          // consumed by the conversion, not written
  for (const auto& [name, t] : store.tensors()) {
    if (t.stored_dtype != "FP8") continue;
    fp8_scales.insert(name + "_scale_inv");
    fp8_scales.insert(name + "_scale");
    if (is_quantized(t.dtype) && quantized.count(name) == 0) {
      quantized[name] =
          WeightView{t.data, t.dtype, t.shape[0], t.shape[1], t.scales, t.mins, t.group_size};
    }
  }
  if (quantized.empty()) {
    fail("{}: nothing to quantize (the checkpoint is already quantized?)", o.model_dir);
  }

  // What to write: quantized matrices as value + scale (+ min) planes, the rest as stored.
  struct Source {
    const void* data;
    int64_t size_bytes;
  };
  std::vector<TensorLayout> layouts;
  std::vector<Source> sources;
  auto add = [&](std::string name, std::string dtype, std::vector<int64_t> shape, const void* data,
                 int64_t bytes) {
    layouts.push_back({std::move(name), std::move(dtype), std::move(shape)});
    sources.push_back({data, bytes});
  };
  for (const auto& [name, w] : quantized) {
    const int64_t groups = w.cols / w.group_size;
    const bool int4 = w.dtype == DType::kI4;
    add(name, int4 ? "U8" : "I8", {w.rows, int4 ? w.cols / 2 : w.cols}, w.data,
        dtype_row_bytes(w.dtype, w.cols) * w.rows);
    add(name + "_scale", "F16", {w.rows, groups}, w.scales, w.rows * groups * 2);
    if (int4) add(name + "_min", "F16", {w.rows, groups}, w.mins, w.rows * groups * 2);
  }
  for (const auto& [name, t] : store.tensors()) {
    if (quantized.count(name) != 0 || fp8_scales.count(name) != 0) continue;
    // An FP8 matrix the model keeps in float (e.g. with a chosen group size that does not
    // split it) is written as the fp32 it was dequantized to.
    add(name, t.stored_dtype == "FP8" ? "F32" : t.stored_dtype, t.shape, t.data, t.size_bytes);
  }

  fs::create_directories(o.out_dir);
  const fs::path out(o.out_dir);
  {
    SafetensorsWriter writer((out / "model.safetensors").string(), layouts,
                             {{"format", "pt"}, {"quantized_by", "pagoda"}});
    for (size_t i = 0; i < layouts.size(); ++i) {
      if (writer.size_bytes(i) != sources[i].size_bytes) {
        fail("internal: tensor {} has {} bytes, its layout {}", layouts[i].name,
             sources[i].size_bytes, writer.size_bytes(i));
      }
      std::memcpy(writer.data(i), sources[i].data, static_cast<size_t>(sources[i].size_bytes));
    }
    writer.finish();
  }

  // Everything else in the directory (tokenizer, generation config, ...) is copied; config.json
  // records how the weights were quantized.
  for (const fs::directory_entry& entry : fs::directory_iterator(o.model_dir)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || entry.path().extension() == ".safetensors" ||
        file == "model.safetensors.index.json" || file == "config.json") {
      continue;
    }
    fs::copy_file(entry.path(), out / file, fs::copy_options::overwrite_existing);
  }
  nlohmann::json cfg = read_json(fs::path(o.model_dir) / "config.json");
  const WeightView& first = quantized.begin()->second;
  cfg["quantization_config"] = {
      {"quant_method", "pagoda"},
      {"weight_type", o.to},
      {"group_size", o.group_size > 0 ? o.group_size : (o.to == "int8" ? -1 : first.group_size)},
      {"num_quantized_matrices", quantized.size()}};
  std::ofstream(out / "config.json") << cfg.dump(2) << "\n";

  int64_t bytes = 0;
  for (const Source& s : sources) bytes += s.size_bytes;
  fmt::print(stderr, "quantized {} matrices to {}: {} of weights written to {}\n", quantized.size(),
             o.to, format_bytes(static_cast<uint64_t>(bytes)), o.out_dir);
  return 0;
}

}  // namespace

Command register_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* sub = app.add_subcommand(
      "quantize", "Write an int8/int4 copy of a checkpoint that loads without requantizing");
  sub->add_option("--model", o->model_dir, "Hugging Face model directory (float weights)")
      ->required();
  sub->add_option("--to", o->to, "int8 (per output channel) or int4 (groups)")
      ->required()
      ->check(CLI::IsMember({"int8", "int4"}));
  sub->add_option(
      "--group-size", o->group_size,
      "Values per scale, a multiple of 32 (default: per channel for int8, 32 for int4)");
  sub->add_option("--out", o->out_dir, "New directory to write")->required();
  return [o] { return run_quantize(*o); };
}

}  // namespace pagoda::cli
