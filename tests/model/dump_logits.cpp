// Test driver: runs a model directory's forward pass over given token ids, without the
// engine, and writes the sampled rows' logits as raw fp32 for check_logits.py to compare
// against the PyTorch reference.
//
//   dump_logits MODEL_DIR OUT_FILE MODE IDS [IDS ...]
//   MODE: decode   one token per step, every position's logits (exercises the KV cache)
//         chunk:N  N tokens per step, the last row of each chunk (chunked prefill)
//         batch    every IDS list prefilled in one forward, the last row of each
//   IDS:  comma-separated token ids
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/paged_forward.h"
#include "kernels/host_context.h"
#include "loader/safetensors.h"
#include "model/model_config.h"
#include "model/model_registry.h"

using namespace pagoda;

using test::PagedSequence;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: dump_logits MODEL_DIR OUT_FILE MODE IDS [IDS ...]\n");
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const std::string mode = argv[3];
    ModelConfig config = ModelConfig::from_dir(dir);
    TensorStore store = TensorStore::open(dir);
    std::unique_ptr<Model> model =
        create_model(host_execution_context(), config, store, ModelOptions{});

    constexpr int32_t kBlockSize = 4;  // small, so sequences span many blocks
    std::vector<PagedSequence> seqs;
    int32_t next_block = 0;
    for (int i = 4; i < argc; ++i) {
      PagedSequence s;
      s.ids = test::parse_token_ids(argv[i]);
      const int32_t num_blocks = static_cast<int32_t>((s.ids.size() + kBlockSize - 1) / kBlockSize);
      // Hand out blocks in reverse so logical order never equals physical order.
      for (int32_t b = 0; b < num_blocks; ++b)
        s.block_table.push_back(next_block + num_blocks - 1 - b);
      next_block += num_blocks;
      seqs.push_back(std::move(s));
    }
    test::OwnedKvCache cache(model->kv_cache_spec(), next_block, kBlockSize);
    std::vector<float> out;

    if (mode == "batch") {
      test::StepWork work;
      for (PagedSequence& s : seqs) work.emplace_back(&s, static_cast<int32_t>(s.ids.size()));
      test::forward_step(*model, cache.cache(), work, out);
    } else {
      const int32_t chunk = mode == "decode" ? 1 : std::stoi(mode.substr(mode.find(':') + 1));
      PagedSequence& s = seqs.front();
      while (s.num_computed < static_cast<int32_t>(s.ids.size())) {
        const int32_t n =
            std::min<int32_t>(chunk, static_cast<int32_t>(s.ids.size()) - s.num_computed);
        test::forward_step(*model, cache.cache(), {{&s, n}}, out);
      }
    }
    test::write_logits(argv[2], out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
