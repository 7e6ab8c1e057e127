// derive_draft_model (pagoda make-draft): a copy keeps every weight, --num-layers drops the
// later layers from the file and the config, --noise moves matrices by about noise * rms and
// leaves norms alone, --randomize keeps the scale but not the values.
#include "demo/draft_derivation.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "demo/model_generator.h"
#include "loader/safetensors.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

struct Dirs {
  fs::path root = fs::temp_directory_path() / ("pagoda_derive_" + std::to_string(::getpid()));
  Dirs() {
    ModelSpec spec = model_preset("tiny");
    spec.num_layers = 3;
    generate_model(spec, (root / "target").string());
  }
  ~Dirs() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  std::string derive(const std::string& name, int64_t layers, double noise, bool randomize) {
    DraftDerivation d;
    d.from = (root / "target").string();
    d.out = (root / name).string();
    d.num_layers = layers;
    d.noise = noise;
    d.randomize = randomize;
    d.seed = 1;
    derive_draft_model(d);
    return d.out;
  }
};

// RMS of a - b (b may be null: RMS of a) over a float32 tensor.
double rms_difference(const Tensor& a, const Tensor* b) {
  double sum = 0.0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double d = a.data_as<float>()[i] - (b ? b->data_as<float>()[i] : 0.0f);
    sum += d * d;
  }
  return std::sqrt(sum / static_cast<double>(a.num_elements()));
}

TEST(DraftDerivation, CopyTruncationNoiseAndRandomization) {
  Dirs dirs;
  const TensorStore target = TensorStore::open((dirs.root / "target").string());
  const TensorStore copy = TensorStore::open(dirs.derive("copy", 0, 0.0, false));
  ASSERT_EQ(copy.names(), target.names());
  for (const auto& [name, t] : target.tensors()) {
    const Tensor& c = copy.get(name);
    ASSERT_EQ(c.size_bytes, t.size_bytes) << name;
    EXPECT_EQ(std::memcmp(c.data, t.data, static_cast<size_t>(t.size_bytes)), 0) << name;
  }

  const std::string one = dirs.derive("one", 1, 0.0, false);
  const TensorStore first = TensorStore::open(one);
  EXPECT_TRUE(first.contains("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(first.contains("model.layers.1.self_attn.q_proj.weight"));
  EXPECT_TRUE(first.contains("lm_head.weight"));
  std::ifstream config(fs::path(one) / "config.json");
  EXPECT_EQ(nlohmann::json::parse(config)["num_hidden_layers"], 1);
  EXPECT_TRUE(fs::exists(fs::path(one) / "tokenizer.json"));

  const std::string matrix = "model.layers.0.mlp.down_proj.weight";
  const std::string norm = "model.layers.0.input_layernorm.weight";
  const Tensor& w = target.get(matrix);
  const TensorStore noisy = TensorStore::open(dirs.derive("noisy", 0, 0.1, false));
  // 0.1 * rms(w) of Gaussian noise over 11,008 values: within 5 %.
  EXPECT_NEAR(rms_difference(noisy.get(matrix), &w) / rms_difference(w, nullptr), 0.1, 0.005);
  EXPECT_EQ(rms_difference(noisy.get(norm), &target.get(norm)), 0.0);

  const TensorStore random = TensorStore::open(dirs.derive("random", 0, 0.0, true));
  const double scale = rms_difference(w, nullptr);
  EXPECT_NEAR(rms_difference(random.get(matrix), nullptr) / scale, 1.0, 0.05);
  // Unrelated values: the difference has the RMS of two independent draws, sqrt(2) * scale.
  EXPECT_NEAR(rms_difference(random.get(matrix), &w) / scale, std::sqrt(2.0), 0.07);
}

}  // namespace
}  // namespace pagoda
