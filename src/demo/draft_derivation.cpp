// derive_draft_model: copy, truncate and perturb a target's weights.
#include "demo/draft_derivation.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "util/error.h"
#include "util/half.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// The layer index of "model.layers.N.…", or -1.
int64_t layer_of(const std::string& name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  return std::stoll(name.substr(kPrefix.size()));
}

float load(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32:
      return t.data_as<float>()[i];
    case DType::kF16:
      return f16_to_f32(t.data_as<f16_t>()[i]);
    default:
      return bf16_to_f32(t.data_as<bf16_t>()[i]);
  }
}

void store(DType dtype, uint8_t* data, int64_t i, float v) {
  switch (dtype) {
    case DType::kF32:
      reinterpret_cast<float*>(data)[i] = v;
      break;
    case DType::kF16:
      reinterpret_cast<f16_t*>(data)[i] = f32_to_f16(v);
      break;
    default:
      reinterpret_cast<bf16_t*>(data)[i] = f32_to_bf16(v);
      break;
  }
}

// w + noise * rms(w) * N(0, 1), or rms(w) * N(0, 1) when `randomize`.
void write_perturbed(const Tensor& t, double noise, bool randomize, uint64_t seed, uint8_t* out) {
  const int64_t n = t.num_elements();
  double sum_squares = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = load(t, i);
    sum_squares += v * v;
  }
  const double rms = std::sqrt(sum_squares / static_cast<double>(std::max<int64_t>(n, 1)));
  const double scale = randomize ? rms : noise * rms;
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(t.name));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const double kept = randomize ? 0.0 : load(t, i);
    store(t.dtype, out, i, static_cast<float>(kept + scale * normal(rng)));
  }
}

}  // namespace

void derive_draft_model(const DraftDerivation& d) {
  const fs::path from(d.from);
  const fs::path out(d.out);
  const fs::path config_path = from / "config.json";
  std::ifstream config_file(config_path);
  if (!config_file) fail("{}: cannot read", config_path.string());
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(config_file);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", config_path.string(), e.what());
  }
  const int64_t num_layers = config.value("num_hidden_layers", int64_t{0});
  if (num_layers <= 0) fail("{}: no num_hidden_layers", config_path.string());
  const int64_t kept = d.num_layers > 0 ? std::min(d.num_layers, num_layers) : num_layers;
  config["num_hidden_layers"] = kept;
  if (config.contains("num_nextn_predict_layers")) config["num_nextn_predict_layers"] = 0;
  if (d.noise < 0.0) fail("derive draft: noise must not be negative, got {}", d.noise);

  fs::create_directories(out);
  for (const fs::directory_entry& entry : fs::directory_iterator(from)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || name.ends_with(".safetensors") ||
        name == "model.safetensors.index.json") {
      continue;
    }
    fs::copy_file(entry.path(), out / name, fs::copy_options::overwrite_existing);
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors") || name == "model.safetensors.index.json") {
      fs::remove(entry.path());
    }
  }
  std::ofstream(out / "config.json") << config.dump(2) << "\n";

  const TensorStore store = TensorStore::open(from.string());
  std::vector<const Tensor*> tensors;
  std::vector<TensorLayout> layouts;
  for (const auto& [name, t] : store.tensors()) {
    if (layer_of(name) >= kept) continue;
    if (!t.dtype_supported ||
        (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16)) {
      fail("{}: tensor {} has dtype {}; drafts are derived from float checkpoints", t.path, name,
           t.stored_dtype);
    }
    tensors.push_back(&t);
    layouts.push_back({name, t.stored_dtype, t.shape});
  }
  SafetensorsWriter writer((out / "model.safetensors").string(), layouts);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = *tensors[i];
    if ((d.noise > 0.0 || d.randomize) && t.shape.size() >= 2) {
      write_perturbed(t, d.noise, d.randomize, d.seed, writer.data(i));
    } else {
      std::memcpy(writer.data(i), t.data, static_cast<size_t>(t.size_bytes));
    }
  }
  writer.finish();
}

}  // namespace pagoda
