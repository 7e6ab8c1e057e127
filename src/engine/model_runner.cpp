#include "engine/model_runner.h"

#include "kernels/host_context.h"

namespace pagoda {

ModelRunner::ModelRunner(Model& model, KvCache& cache)
    : model_(model), cache_(cache), context_(host_execution_context()) {}

void ModelRunner::execute(const SchedulerOutput& out) {
  for (const BlockCopy& copy : out.block_copies)
    cache_.copy_block(copy.src_block_id, copy.dst_block_id);

  const int32_t block_size = cache_.block_size();
  batch_.clear();
  logits_index_.assign(out.requests.size(), -1);
  logits_first_position_.assign(out.requests.size(), 0);
  int64_t num_rows = 0;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    const ScheduledRequest& r = out.requests[i];
    ForwardSequence s;
    s.token_begin = static_cast<int32_t>(batch_.token_ids.size());
    s.num_tokens = r.num_new_tokens();
    s.context_len = r.start_position + r.num_new_tokens();
    s.block_table = r.block_ids.data();
    s.needs_logits = r.sample;
    s.all_logits = r.all_logits;
    for (int32_t j = 0; j < r.num_new_tokens(); ++j) {
      const int32_t position = r.start_position + j;
      batch_.token_ids.push_back(r.token_ids[static_cast<size_t>(j)]);
      batch_.positions.push_back(position);
      const int64_t block = r.block_ids[static_cast<size_t>(position / block_size)];
      batch_.slot_mapping.push_back(block * block_size + position % block_size);
    }
    batch_.sequences.push_back(s);
    // The model writes each sequence's rows for its last num_logit_rows() tokens, in order.
    if (s.num_logit_rows() > 0) {
      logits_index_[i] = num_rows;
      logits_first_position_[i] = s.context_len - s.num_logit_rows();
      num_rows += s.num_logit_rows();
    }
  }
  const auto needed = static_cast<size_t>(num_rows * model_.vocab_size());
  // A step with prompt logprobs may need thousands of rows; give that memory back afterwards
  // instead of keeping the high-water mark for every later decode step.
  constexpr size_t kKeepFloats = size_t{16} << 20;  // 64 MiB
  if (logits_.capacity() > kKeepFloats && logits_.capacity() > 4 * needed) {
    logits_ = std::vector<float>(needed);
  } else {
    logits_.resize(needed);
  }
  model_.forward(context_, batch_, cache_, logits_.data());
}

float* ModelRunner::logits_row(size_t scheduled_index) {
  const LogitsRows rows = logits_rows(scheduled_index);
  const ForwardSequence& s = batch_.sequences[scheduled_index];
  if (!s.needs_logits || rows.num_rows == 0) return nullptr;
  return rows.data + static_cast<int64_t>(rows.num_rows - 1) * model_.vocab_size();
}

ModelRunner::LogitsRows ModelRunner::logits_rows(size_t scheduled_index) {
  const int64_t row = logits_index_[scheduled_index];
  if (row < 0) return {};
  LogitsRows rows;
  rows.data = logits_.data() + row * model_.vocab_size();
  rows.first_position = logits_first_position_[scheduled_index];
  rows.num_rows = batch_.sequences[scheduled_index].num_logit_rows();
  return rows;
}

}  // namespace pagoda
