// Test driver for the DeepSeek family: runs a model directory's forward pass over given token
// ids through the paged latent cache, without the engine, and writes the sampled rows' logits
// as raw fp32 for check_deepseek.py to compare with the PyTorch reference.
//
//   deepseek_dump [--mla-expanded-min-tokens N] MODEL_DIR|FILE.gguf OUT_FILE MODE IDS [IDS ...]
//   --mla-expanded-min-tokens N: ModelOptions::mla_expanded_min_tokens (1 forces the expanded
//         form of MLA on every sequence, also decodes)
//   MODE: decode    one token per step, every position's logits
//         chunk:N   N tokens per step (chunked prefill), the last row of each chunk
//         batch     every IDS list in one forward, the last row of each; then one decode step
//                   of all of them together (token id 3), the rows of that step
//         prefix    IDS A then IDS B: A is prefilled; B reuses A's cached full blocks that
//                   cover their common prefix (a prefix-cache hit) and computes only the
//                   rest; the last row of A and of B
//         mtp:N     the model with its MTP layer: N tokens per step through the decoder, each
//                   step followed by the MTP layer over the same positions (but the last id),
//                   pairing the decoder's hidden state at i with id i + 1: every row of those
//                   (len - 1 rows, row i predicts id i + 2); then one recursive step at the
//                   last position, from the MTP layer's own output at len - 2 and token 3
//   IDS:  comma-separated token ids
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/paged_forward.h"
#include "kernels/host_context.h"
#include "loader/safetensors.h"
#include "model/forward_batch.h"
#include "model/gguf_model.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/model_registry.h"

using namespace pagoda;

namespace {

constexpr int32_t kBlockSize = 4;  // small, so sequences span many blocks

using test::PagedSequence;

class Driver {
 public:
  Driver(Model& model, int32_t num_blocks)
      : model_(model), cache_(model.kv_cache_spec(), num_blocks, kBlockSize) {}

  // Hands out blocks in reverse so logical order never equals physical order.
  void allocate(PagedSequence& s, int32_t num_tokens) {
    const auto needed = static_cast<size_t>((num_tokens + kBlockSize - 1) / kBlockSize);
    std::vector<int32_t> fresh;
    while (s.block_table.size() + fresh.size() < needed) fresh.push_back(next_block_++);
    std::reverse(fresh.begin(), fresh.end());
    s.block_table.insert(s.block_table.end(), fresh.begin(), fresh.end());
  }

  // One forward over (sequence, new token count) pairs; appends the logits rows to `out`.
  void step(const test::StepWork& work, std::vector<float>& out) {
    for (auto [s, n] : work) allocate(*s, s->num_computed + n);
    test::forward_step(model_, cache_.cache(), work, out);
  }

  // The MTP layer over positions [first, first + hidden rows) of `s` (already allocated), with
  // `tokens` as inputs; every row's logits appended to `out`, its output rows to `mtp_hidden`.
  void mtp_step(PagedSequence& s, int32_t first, const std::vector<int32_t>& tokens,
                const std::vector<float>& previous, std::vector<float>& out,
                std::vector<float>& mtp_hidden) {
    ForwardBatch batch;
    ForwardSequence fs;
    fs.num_tokens = static_cast<int32_t>(tokens.size());
    fs.context_len = first + fs.num_tokens;
    fs.block_table = s.block_table.data();
    fs.all_logits = true;
    for (int32_t p = first; p < fs.context_len; ++p) {
      batch.token_ids.push_back(tokens[static_cast<size_t>(p - first)]);
      batch.positions.push_back(p);
      batch.slot_mapping.push_back(test::cache_slot(s, p, kBlockSize));
    }
    batch.sequences.push_back(fs);
    std::vector<float> logits(static_cast<size_t>(batch.num_logit_rows() * model_.vocab_size()));
    mtp_hidden.resize(tokens.size() * static_cast<size_t>(model_.hidden_size()));
    model_.forward_mtp(host_execution_context(), batch, previous.data(), cache_.cache(),
                       logits.data(), mtp_hidden.data());
    out.insert(out.end(), logits.begin(), logits.end());
  }

 private:
  Model& model_;
  test::OwnedKvCache cache_;
  int32_t next_block_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  ModelOptions options;
  if (argc > 2 && std::string(argv[1]) == "--mla-expanded-min-tokens") {
    options.mla_expanded_min_tokens = std::stoi(argv[2]);
    argc -= 2;
    argv += 2;
  }
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: deepseek_dump [--mla-expanded-min-tokens N] MODEL_DIR|FILE.gguf OUT_FILE "
                 "MODE IDS [IDS ...]\n");
    return 2;
  }
  try {
    const std::string path = argv[1];
    const std::string mode = argv[3];
    // A model directory or a GGUF file (whose tokenizer is not needed here).
    std::optional<GgufModel> gguf;
    if (is_gguf_path(path)) gguf = open_gguf_model(path);
    const ModelConfig config = gguf ? gguf->config : ModelConfig::from_dir(path);
    const TensorStore store = gguf ? std::move(gguf->tensors) : TensorStore::open(path);
    options.load_mtp_layers = mode.rfind("mtp:", 0) == 0;
    const std::unique_ptr<Model> model =
        create_model(host_execution_context(), config, store, options);

    std::vector<PagedSequence> seqs;
    int32_t total_tokens = 0;
    for (int i = 4; i < argc; ++i) {
      PagedSequence s;
      s.ids = test::parse_token_ids(argv[i]);
      total_tokens += static_cast<int32_t>(s.ids.size()) + 1;
      seqs.push_back(std::move(s));
    }
    Driver driver(*model, total_tokens / kBlockSize + 2 * static_cast<int32_t>(seqs.size()) + 2);
    std::vector<float> out;

    if (mode == "batch") {
      test::StepWork work;
      for (PagedSequence& s : seqs) work.emplace_back(&s, static_cast<int32_t>(s.ids.size()));
      driver.step(work, out);
      for (PagedSequence& s : seqs) s.ids.push_back(3);
      for (auto& w : work) w.second = 1;
      driver.step(work, out);
    } else if (mode == "prefix") {
      PagedSequence& a = seqs.at(0);
      PagedSequence& b = seqs.at(1);
      driver.step({{&a, static_cast<int32_t>(a.ids.size())}}, out);
      size_t common = 0;
      while (common < std::min(a.ids.size(), b.ids.size()) && a.ids[common] == b.ids[common])
        ++common;
      // Only full blocks are shared, and at least one token is always computed.
      const auto num_shared = static_cast<int32_t>(std::min(common, b.ids.size() - 1) / kBlockSize);
      b.block_table.assign(a.block_table.begin(), a.block_table.begin() + num_shared);
      b.num_computed = num_shared * kBlockSize;
      std::fprintf(stderr, "prefix: %d cached tokens reused\n", b.num_computed);
      driver.step({{&b, static_cast<int32_t>(b.ids.size()) - b.num_computed}}, out);
    } else if (options.load_mtp_layers) {
      const int32_t chunk = std::stoi(mode.substr(4));
      PagedSequence& s = seqs.front();
      const auto len = static_cast<int32_t>(s.ids.size());
      const int64_t hidden = model->hidden_size();
      std::vector<float> ignored, previous, mtp_hidden;
      while (s.num_computed < len) {
        const int32_t first = s.num_computed;
        const int32_t n = std::min<int32_t>(chunk, len - first);
        driver.step({{&s, n}}, ignored);
        const int32_t num_mtp = std::min(n, len - 1 - first);  // id first + j + 1 must exist
        if (num_mtp <= 0) break;
        const std::span<const float> h = model->hidden_states();
        previous.assign(h.begin(), h.begin() + num_mtp * hidden);
        driver.mtp_step(s, first, {s.ids.begin() + first + 1, s.ids.begin() + first + 1 + num_mtp},
                        previous, out, mtp_hidden);
      }
      // Recursion: the layer's own output at len - 2 continues at len - 1 (a slot allocated for
      // the decoder's last token, which the MTP layer has not written).
      previous.assign(mtp_hidden.end() - hidden, mtp_hidden.end());
      driver.mtp_step(s, len - 1, {3}, previous, out, mtp_hidden);
    } else {
      const int32_t chunk = mode == "decode" ? 1 : std::stoi(mode.substr(mode.find(':') + 1));
      PagedSequence& s = seqs.front();
      while (s.num_computed < static_cast<int32_t>(s.ids.size())) {
        const int32_t n =
            std::min<int32_t>(chunk, static_cast<int32_t>(s.ids.size()) - s.num_computed);
        driver.step({{&s, n}}, out);
      }
    }
    test::write_logits(argv[2], out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
