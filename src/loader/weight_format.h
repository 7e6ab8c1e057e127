// What the weights of a model are stored as, in words, for `pagoda info` and the startup log:
// "bf16", "int8 (group 128)", "GPTQ int4 (group 128) 97%, f16 3%", "Q4_K 81%, Q6_K 19%". Read
// from the tensors as the loader opened them, so every source (safetensors floats, Pagoda's own
// int8/int4 checkpoints, AWQ/GPTQ, GGUF files) names its real format.
#pragma once

#include <string>
#include <vector>

namespace pagoda {

class TensorStore;

struct WeightFormatShare {
  std::string format;        // "bf16", "int4 (group 32)", "GPTQ int4 (group 128)", "Q8_0"
  int64_t num_elements = 0;  // of the weight matrices stored in this format
};

// The formats of the weight matrices (2-D `*.weight` tensors), most elements first. Vectors
// (norms, biases) are left out: they are kept in a float type whatever the matrices are.
std::vector<WeightFormatShare> weight_formats(const TensorStore& store);

// One line: the single format, or each with its share of the matrix elements ("Q4_K 81%, Q6_K
// 19%"); "none" for a store without weight matrices.
std::string describe_weight_format(const TensorStore& store);

}  // namespace pagoda
