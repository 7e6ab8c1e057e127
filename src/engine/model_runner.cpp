#include "engine/model_runner.h"

namespace pagoda {

ModelRunner::ModelRunner(Model& model, KvCache& cache) : model_(model), cache_(cache) {}

void ModelRunner::execute(const SchedulerOutput& out) {
  for (const BlockCopy& copy : out.block_copies)
    cache_.copy_block(copy.src_block_id, copy.dst_block_id);

  const int32_t block_size = cache_.block_size();
  batch_.clear();
  logits_index_.assign(out.requests.size(), -1);
  int64_t num_rows = 0;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    const ScheduledRequest& r = out.requests[i];
    ForwardSequence s;
    s.token_begin = static_cast<int32_t>(batch_.token_ids.size());
    s.num_tokens = r.num_new_tokens();
    s.context_len = r.start_position + r.num_new_tokens();
    s.block_table = r.block_ids.data();
    s.needs_logits = r.sample;
    for (int32_t j = 0; j < r.num_new_tokens(); ++j) {
      const int32_t position = r.start_position + j;
      batch_.token_ids.push_back(r.token_ids[static_cast<size_t>(j)]);
      batch_.positions.push_back(position);
      const int64_t block = r.block_ids[static_cast<size_t>(position / block_size)];
      batch_.slot_mapping.push_back(block * block_size + position % block_size);
    }
    batch_.sequences.push_back(s);
    if (r.sample) logits_index_[i] = num_rows++;
  }
  logits_.resize(static_cast<size_t>(num_rows * model_.vocab_size()));
  model_.forward(batch_, cache_, logits_.data());
}

float* ModelRunner::logits_row(size_t scheduled_index) {
  const int64_t row = logits_index_[scheduled_index];
  return row < 0 ? nullptr : logits_.data() + row * model_.vocab_size();
}

}  // namespace pagoda
