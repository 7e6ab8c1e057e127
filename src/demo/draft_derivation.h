// Draft models derived from a target model, for measuring speculative decoding at chosen
// acceptance rates: random weights agree with nothing, so a draft that accepts 90 % or 50 % of
// the time has to be built from the target itself. A copy accepts everything; Gaussian noise
// on every matrix, scaled to each matrix's RMS, makes the copy disagree more the larger the
// noise; keeping only the first layers makes it cheaper. The tokenizer and the other files are
// the target's, so the draft passes the engine's same-vocabulary check.
#pragma once

#include <cstdint>
#include <string>

namespace pagoda {

struct DraftDerivation {
  std::string from;  // the target's directory (float safetensors: F32, F16 or BF16)
  std::string out;   // written (created if needed; model files replaced)
  // Decoder layers kept (the first ones); 0 keeps all. DeepSeek's MTP layers are dropped.
  int64_t num_layers = 0;
  // Each matrix w (tensors of two or more dimensions) becomes w + noise * rms(w) * N(0, 1);
  // norms and biases are copied. 0 copies the weights exactly.
  double noise = 0.0;
  // Each matrix becomes rms(w) * N(0, 1) instead: an unrelated model of the same shape and
  // scale (a draft that accepts about nothing). `noise` is then ignored.
  bool randomize = false;
  uint64_t seed = 0;
};

// Writes the derived model (config.json with the new layer count, one model.safetensors, the
// target's other files). Throws pagoda::Error naming the file for a weight that is not a float.
void derive_draft_model(const DraftDerivation& derivation);

}  // namespace pagoda
