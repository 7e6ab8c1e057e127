#include "common/paged_forward.h"

#include <cstdio>
#include <sstream>

#include "kernels/host_context.h"
#include "model/forward_batch.h"
#include "util/error.h"

namespace pagoda::test {

int64_t cache_slot(const PagedSequence& s, int32_t position, int32_t block_size) {
  return int64_t{s.block_table[static_cast<size_t>(position / block_size)]} * block_size +
         position % block_size;
}

OwnedKvCache::OwnedKvCache(const KvCacheSpec& spec, int32_t num_blocks, int32_t block_size)
    : memory_(static_cast<size_t>(
          (KvCache::bytes_needed(spec, num_blocks, block_size) + sizeof(float) - 1) /
          sizeof(float))),
      cache_(spec, num_blocks, block_size, memory_.data()) {}

void forward_step(Model& model, KvCache& cache, const StepWork& work, std::vector<float>& logits) {
  ForwardBatch batch;
  for (auto [s, n] : work) {
    ForwardSequence fs;
    fs.token_begin = static_cast<int32_t>(batch.token_ids.size());
    fs.num_tokens = n;
    fs.context_len = s->num_computed + n;
    fs.block_table = s->block_table.data();
    fs.needs_logits = true;
    for (int32_t p = s->num_computed; p < fs.context_len; ++p) {
      batch.token_ids.push_back(s->ids[static_cast<size_t>(p)]);
      batch.positions.push_back(p);
      batch.slot_mapping.push_back(cache_slot(*s, p, cache.block_size()));
    }
    batch.sequences.push_back(fs);
    s->num_computed = fs.context_len;
  }
  const size_t first = logits.size();
  logits.resize(first + static_cast<size_t>(batch.num_logit_rows() * model.vocab_size()));
  model.forward(host_execution_context(), batch, cache, logits.data() + first);
}

std::vector<int32_t> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

void write_logits(const std::string& path, const std::vector<float>& logits) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) fail("cannot write {}", path);
  const size_t written = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
  if (std::fclose(f) != 0 || written != logits.size()) fail("cannot write {}", path);
}

}  // namespace pagoda::test
