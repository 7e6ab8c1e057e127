#include "model/layers/rotary_embedding.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "model/model_config.h"
#include "util/error.h"

namespace pagoda {

RopeParams::Type parse_rope_type(const std::string& name) {
  if (name == "default" || name.empty()) return RopeParams::Type::kDefault;
  if (name == "linear") return RopeParams::Type::kLinear;
  if (name == "dynamic") return RopeParams::Type::kDynamic;
  if (name == "yarn") return RopeParams::Type::kYarn;
  if (name == "llama3") return RopeParams::Type::kLlama3;
  fail("unsupported rope_scaling type '{}' (supported: linear, dynamic, yarn, llama3)", name);
}

RopeParams rope_params_from_config(const ModelConfig& c, int64_t rotary_dim) {
  RopeParams p;
  p.theta = c.rope_theta;
  p.rotary_dim = static_cast<int32_t>(rotary_dim);
  p.max_position_embeddings = c.max_position_embeddings;
  const RopeScalingConfig& s = c.rope_scaling;
  p.type = parse_rope_type(s.type);
  p.factor = s.factor;
  p.original_max_position_embeddings = s.original_max_position_embeddings;
  p.beta_fast = s.beta_fast;
  p.beta_slow = s.beta_slow;
  p.mscale = s.mscale;
  p.mscale_all_dim = s.mscale_all_dim;
  p.attention_factor = s.attention_factor;
  p.low_freq_factor = s.low_freq_factor;
  p.high_freq_factor = s.high_freq_factor;
  return p;
}

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

std::vector<float> default_inv_freq(double theta, int32_t dim) {
  // Reference: inv_freq = 1 / theta^(arange(0, dim, 2) / dim), computed in fp32.
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int32_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return inv;
}

// YaRN: blend interpolated and extrapolated frequencies with a linear ramp between the
// dimensions that complete beta_fast and beta_slow rotations over the original context
// (arXiv:2309.00071, §3; HF `_compute_yarn_parameters`).
std::vector<float> yarn_inv_freq(const RopeParams& p, float* attention_factor) {
  const int32_t dim = p.rotary_dim;
  const double base = p.theta;
  const double factor = p.factor;
  const double original = static_cast<double>(p.original_max_position_embeddings > 0
                                                  ? p.original_max_position_embeddings
                                                  : p.max_position_embeddings);
  if (p.attention_factor > 0) {
    *attention_factor = static_cast<float>(p.attention_factor);
  } else if (p.mscale > 0 && p.mscale_all_dim > 0) {
    *attention_factor = static_cast<float>(yarn_get_mscale(factor, p.mscale) /
                                           yarn_get_mscale(factor, p.mscale_all_dim));
  } else {
    *attention_factor = static_cast<float>(yarn_get_mscale(factor, 1.0));
  }
  auto correction_dim = [&](double num_rotations) {
    return (dim * std::log(original / (num_rotations * 2 * std::numbers::pi))) /
           (2 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(p.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(p.beta_slow)), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp

  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int32_t i = 0; i < dim / 2; ++i) {
    const float pos_freq =
        std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq);
    float ramp = static_cast<float>((i - low) / (high - low));
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrapolation_weight = 1.0f - ramp;
    inv[static_cast<size_t>(i)] =
        interpolation * (1.0f - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  return inv;
}

// Llama 3.1: keep high frequencies, divide low ones by `factor`, interpolate smoothly
// between (HF `_compute_llama3_parameters`).
std::vector<float> llama3_inv_freq(const RopeParams& p) {
  std::vector<float> inv = default_inv_freq(p.theta, p.rotary_dim);
  const double old_context = static_cast<double>(
      p.original_max_position_embeddings > 0 ? p.original_max_position_embeddings : 8192);
  const double low_freq_wavelen = old_context / p.low_freq_factor;
  const double high_freq_wavelen = old_context / p.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f = static_cast<float>(f / p.factor);
      continue;
    }
    const double smooth =
        (old_context / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
    f = static_cast<float>((1 - smooth) * f / p.factor + smooth * f);
  }
  return inv;
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const RopeParams& params) : params_(params) {
  if (params.rotary_dim <= 0 || params.rotary_dim % 2 != 0) {
    fail("rotary dimension must be positive and even, got {}", params.rotary_dim);
  }
  switch (params.type) {
    case RopeParams::Type::kDefault:
      inv_freq_ = default_inv_freq(params.theta, params.rotary_dim);
      break;
    case RopeParams::Type::kLinear:
      // Positions divided by the factor == frequencies divided by it.
      inv_freq_ = default_inv_freq(params.theta, params.rotary_dim);
      for (float& f : inv_freq_) f = static_cast<float>(f / params.factor);
      break;
    case RopeParams::Type::kDynamic: {
      // Dynamic NTK with the base fixed for the full extended context, as vLLM does
      // (HF instead grows the base with the longest sequence seen, which makes a request's
      // output depend on its neighbours in a batch; we prefer a fixed, stateless rule).
      const double dim = params.rotary_dim;
      const double max_len = params.max_position_embeddings * params.factor;
      const double base =
          params.theta *
          std::pow((params.factor * max_len / params.max_position_embeddings) - (params.factor - 1),
                   dim / (dim - 2));
      inv_freq_ = default_inv_freq(base, params.rotary_dim);
      break;
    }
    case RopeParams::Type::kYarn:
      inv_freq_ = yarn_inv_freq(params, &attention_factor_);
      break;
    case RopeParams::Type::kLlama3:
      inv_freq_ = llama3_inv_freq(params);
      break;
  }
}

void RotaryEmbedding::cos_sin(int64_t position, float* cos, float* sin) const {
  // fp32 angle as the reference computes `position * inv_freq` in fp32.
  const float pos = static_cast<float>(position);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = pos * inv_freq_[i];
    cos[i] = std::cos(angle) * attention_factor_;
    sin[i] = std::sin(angle) * attention_factor_;
  }
}

void RotaryEmbedding::cos_sin_rows(const ExecutionContext& ctx, const int32_t* positions,
                                   int64_t num_tokens, float* cos, float* sin) const {
  const auto half = static_cast<int64_t>(inv_freq_.size());
  // A decode step's few rows cost less than starting the threads.
  ctx.threads().parallel_for(
      num_tokens, [&](int64_t t) { cos_sin(positions[t], cos + t * half, sin + t * half); },
      /*serial_up_to=*/8);
}

RopeRows RotaryRows::compute(const ExecutionContext& ctx, const RotaryEmbedding& rope,
                             const int32_t* positions, int64_t num_tokens, bool neox) {
  const int64_t half = rope.rotary_dim() / 2;
  if (cos_.row_size() != half) {
    cos_.set_row_size(half);
    sin_.set_row_size(half);
  }
  cos_.reserve(ctx, num_tokens);
  sin_.reserve(ctx, num_tokens);
  rope.cos_sin_rows(ctx, positions, num_tokens, cos_.data(), sin_.data());
  return RopeRows{cos_.data(), sin_.data(), rope.rotary_dim(), neox};
}

}  // namespace pagoda
