// Rotary position embedding: per-frequency inverse wavelengths with the context-extension
// scalings Hugging Face models declare in `rope_scaling`, and cos/sin rows per position.
// Frequencies follow transformers' `_compute_*_rope_parameters`; see rotary_embedding.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/execution_context.h"
#include "kernels/attention.h"
#include "model/layers/activation.h"

namespace pagoda {

struct RopeParams {
  enum class Type { kDefault, kLinear, kDynamic, kYarn, kLlama3 };
  Type type = Type::kDefault;
  double theta = 10000.0;
  int32_t rotary_dim = 0;  // dimensions rotated per head
  double factor = 1.0;
  int64_t max_position_embeddings = 2048;        // the model's (possibly extended) context
  int64_t original_max_position_embeddings = 0;  // yarn / llama3; 0 = use max_position_embeddings
  double beta_fast = 32.0, beta_slow = 1.0;      // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;     // yarn (DeepSeek); 0 = not given
  double attention_factor = 0.0;                 // yarn; 0 = derive from factor
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
};

// "default", "linear", "dynamic", "yarn", "llama3"; throws pagoda::Error otherwise.
RopeParams::Type parse_rope_type(const std::string& name);

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const RopeParams& params);

  int32_t rotary_dim() const { return params_.rotary_dim; }
  // rotary_dim/2 inverse frequencies, fp32 as the reference computes them.
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // Multiplies cos and sin (YaRN's attention-temperature correction); 1 otherwise.
  float attention_factor() const { return attention_factor_; }

  // cos/sin for one position: each rotary_dim/2 values.
  void cos_sin(int64_t position, float* cos, float* sin) const;
  // cos_sin for each of num_tokens positions into consecutive rows (token i's at
  // cos + i * rotary_dim/2), threads splitting the tokens. Done once per forward pass, since
  // the rows depend only on positions and so serve every layer.
  void cos_sin_rows(const ExecutionContext& ctx, const int32_t* positions, int64_t num_tokens,
                    float* cos, float* sin) const;

 private:
  RopeParams params_;
  std::vector<float> inv_freq_;
  float attention_factor_ = 1.0f;
};

// The cos/sin rows of one forward pass's positions, computed once and read by every layer.
class RotaryRows {
 public:
  // Fills the rows for `positions` [num_tokens] and returns them, with the given pairing.
  RopeRows compute(const ExecutionContext& ctx, const RotaryEmbedding& rope,
                   const int32_t* positions, int64_t num_tokens, bool neox);
  const float* cos(int64_t token) const { return cos_.row(token); }  // [rotary_dim / 2]
  const float* sin(int64_t token) const { return sin_.row(token); }

 private:
  Activation cos_, sin_;  // [T, rotary_dim / 2]
};

struct ModelConfig;
// The rope settings a Hugging Face config.json declares (rope_theta, rope_scaling,
// max_position_embeddings), for `rotary_dim` rotated dimensions per head.
RopeParams rope_params_from_config(const ModelConfig& config, int64_t rotary_dim);

// YaRN's magnitude scale: 0.1 * mscale * ln(scale) + 1 for scale > 1 (DeepSeek-V2 paper,
// HF `get_mscale`). DeepSeek multiplies its softmax scale by yarn_get_mscale(f, mscale_all_dim)^2.
double yarn_get_mscale(double scale, double mscale);

}  // namespace pagoda
