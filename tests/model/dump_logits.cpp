// Test driver: runs a model directory's forward pass over given token ids, without the
// engine, and writes the sampled rows' logits as raw fp32 for check_logits.py to compare
// against the PyTorch reference.
//
//   dump_logits MODEL_DIR OUT_FILE MODE IDS [IDS ...]
//   MODE: decode   one token per step, every position's logits (exercises the KV cache)
//         chunk:N  N tokens per step, the last row of each chunk (chunked prefill)
//         batch    every IDS list prefilled in one forward, the last row of each
//   IDS:  comma-separated token ids
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/host_context.h"
#include "loader/safetensors.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_registry.h"

using namespace pagoda;

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

struct Sequence {
  std::vector<int32_t> ids;
  std::vector<int32_t> block_table;
  int32_t num_computed = 0;
};

}  // namespace

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
    std::vector<Sequence> seqs;
    int32_t next_block = 0;
    for (int i = 4; i < argc; ++i) {
      Sequence s;
      s.ids = parse_ids(argv[i]);
      const int32_t num_blocks = static_cast<int32_t>((s.ids.size() + kBlockSize - 1) / kBlockSize);
      // Hand out blocks in reverse so logical order never equals physical order.
      for (int32_t b = 0; b < num_blocks; ++b)
        s.block_table.push_back(next_block + num_blocks - 1 - b);
      next_block += num_blocks;
      seqs.push_back(std::move(s));
    }
    const KvCacheSpec spec = model->kv_cache_spec();
    std::vector<float> memory(
        static_cast<size_t>(KvCache::bytes_needed(spec, next_block, kBlockSize) / 4));
    KvCache cache(spec, next_block, kBlockSize, memory.data());

    std::vector<float> out;
    std::vector<float> logits;
    const int64_t vocab = model->vocab_size();
    auto run_step = [&](const std::vector<std::pair<Sequence*, int32_t>>& work) {
      ForwardBatch batch;
      for (auto [s, n] : work) {
        ForwardSequence fs;
        fs.token_begin = static_cast<int32_t>(batch.token_ids.size());
        fs.num_tokens = n;
        fs.context_len = s->num_computed + n;
        fs.block_table = s->block_table.data();
        fs.needs_logits = true;
        for (int32_t p = s->num_computed; p < s->num_computed + n; ++p) {
          batch.token_ids.push_back(s->ids[static_cast<size_t>(p)]);
          batch.positions.push_back(p);
          batch.slot_mapping.push_back(
              static_cast<int64_t>(s->block_table[static_cast<size_t>(p / kBlockSize)]) *
                  kBlockSize +
              p % kBlockSize);
        }
        batch.sequences.push_back(fs);
        s->num_computed += n;
      }
      logits.assign(static_cast<size_t>(batch.num_logit_rows() * vocab), 0.0f);
      model->forward(host_execution_context(), batch, cache, logits.data());
      out.insert(out.end(), logits.begin(), logits.end());
    };

    if (mode == "batch") {
      std::vector<std::pair<Sequence*, int32_t>> work;
      for (Sequence& s : seqs) work.emplace_back(&s, static_cast<int32_t>(s.ids.size()));
      run_step(work);
    } else {
      const int32_t chunk = mode == "decode" ? 1 : std::stoi(mode.substr(mode.find(':') + 1));
      Sequence& s = seqs.front();
      while (s.num_computed < static_cast<int32_t>(s.ids.size())) {
        const int32_t n =
            std::min<int32_t>(chunk, static_cast<int32_t>(s.ids.size()) - s.num_computed);
        run_step({{&s, n}});
      }
    }
    FILE* f = std::fopen(argv[2], "wb");
    if (f == nullptr) return 1;
    std::fwrite(out.data(), sizeof(float), out.size(), f);
    std::fclose(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
