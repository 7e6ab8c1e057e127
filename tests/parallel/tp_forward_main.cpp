// One rank of a tensor-parallel forward pass, as a program of its own (the test launches every
// rank, and the one-process reference, with posix_spawn: no rank inherits another's OpenMP
// state through fork):
//   tp_forward MODEL_DIR OUT_FILE JOB_ID RANK WORLD_SIZE QUANTIZATION
// WORLD_SIZE 1 runs the model whole, with no communicator. The schedule is fixed: two prompts
// (ids spread over the vocabulary) prefilled in one batch, then kSteps greedy decode steps of
// both. Rank 0 writes, for every step, each sequence's greedy token (int32) and its logits row
// (fp32 [vocab]). QUANTIZATION: none, int8 or int4 (at load), optionally with a group size
// (int8/64).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/paged_forward.h"
#include "kernels/host_context.h"
#include "loader/safetensors.h"
#include "model/gguf_model.h"
#include "model/model_config.h"
#include "model/model_registry.h"
#include "model/model_source.h"
#include "parallel/shm_communicator.h"

using namespace pagoda;

namespace {

constexpr int32_t kBlockSize = 4;
constexpr int kSteps = 6;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s MODEL_DIR OUT_FILE JOB_ID RANK WORLD_SIZE QUANT\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const int rank = std::atoi(argv[4]);
    const int world_size = std::atoi(argv[5]);
    const std::string quantization = argv[6];
    std::unique_ptr<ShmCommunicator> comm;
    if (world_size > 1) {
      ShmCommunicatorOptions options;
      options.job_id = argv[3];
      options.rank = rank;
      options.world_size = world_size;
      comm = std::make_unique<ShmCommunicator>(options);
    }
    ModelSource source = open_model_source(dir);
    ModelOptions options;
    const size_t slash = quantization.find('/');
    options.weights.quantize_to = parse_quantization(quantization.substr(0, slash));
    if (slash != std::string::npos)
      options.weights.group_size = std::stoll(quantization.substr(slash + 1));
    options.tensor_parallel = TensorParallel(comm.get());
    // DeepSeek: the 11-token prompt takes MLA's expanded form (this rank's heads of kv_b_proj),
    // the 7-token one and the decodes the absorbed form.
    options.mla_expanded_min_tokens = 8;
    std::unique_ptr<Model> model =
        create_model(host_execution_context(), source.config, source.tensors, options);
    const int64_t vocab = model->vocab_size();

    std::vector<test::PagedSequence> seqs(2);
    const int32_t lengths[] = {7, 11};
    int32_t next_block = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      for (int32_t p = 0; p < lengths[i]; ++p)
        seqs[i].ids.push_back(static_cast<int32_t>((37 * p + 101 * i + 3) % vocab));
      const int32_t num_blocks = (lengths[i] + kSteps + kBlockSize - 1) / kBlockSize;
      for (int32_t b = 0; b < num_blocks; ++b) seqs[i].block_table.push_back(next_block++);
    }
    test::OwnedKvCache cache(model->kv_cache_spec(), next_block, kBlockSize);

    FILE* out = rank == 0 ? std::fopen(argv[2], "wb") : nullptr;
    if (rank == 0 && out == nullptr) throw std::runtime_error("cannot write the output file");
    std::vector<float> logits;
    for (int step = 0; step <= kSteps; ++step) {
      test::StepWork work;  // every sequence's tokens the cache does not hold yet
      for (test::PagedSequence& s : seqs)
        work.emplace_back(&s, static_cast<int32_t>(s.ids.size()) - s.num_computed);
      logits.clear();
      test::forward_step(*model, cache.cache(), work, logits);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const float* row = logits.data() + static_cast<int64_t>(i) * vocab;
        const auto token = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
        seqs[i].ids.push_back(token);
        if (out != nullptr) {
          std::fwrite(&token, sizeof(token), 1, out);
          std::fwrite(row, sizeof(float), static_cast<size_t>(vocab), out);
        }
      }
    }
    if (out != nullptr && std::fclose(out) != 0) throw std::runtime_error("write failed");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: error: %s\n", argv[4], e.what());
    return 1;
  }
  return 0;
}
