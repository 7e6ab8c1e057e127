// MtpProposer: batches every request's MTP positions into one pass of the layer, then one pass
// per further draft.
#include "engine/mtp_proposer.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "sampling/logits_ops.h"
#include "util/error.h"

namespace pagoda {

void check_mtp_model(const Model& model) {
  if (model.num_mtp_layers() == 0 || model.hidden_size() <= 0) {
    fail(
        "--speculative-config: method \"mtp\" needs a model with multi-token-prediction layers "
        "(DeepSeek-V3/R1's num_nextn_predict_layers); this one has none");
  }
}

MtpProposer::MtpProposer(const SpeculativeConfig& config, Model& model, KvCache& cache)
    : num_speculative_tokens_(config.num_speculative_tokens),
      model_(model),
      cache_(cache),
      hidden_(model.hidden_size()) {
  check_mtp_model(model);
}

void MtpProposer::add_sequence(const ProposalRequest& r, int32_t first, int32_t num,
                               bool needs_logits, std::span<const int32_t> input_ids) {
  const int32_t block_size = cache_.block_size();
  ForwardSequence seq;
  seq.token_begin = static_cast<int32_t>(batch_.token_ids.size());
  seq.num_tokens = num;
  seq.context_len = first + num;
  seq.block_table = r.block_ids.data();
  seq.needs_logits = needs_logits;
  for (int32_t j = 0; j < num; ++j) {
    const int32_t position = first + j;
    batch_.token_ids.push_back(input_ids[static_cast<size_t>(j)]);
    batch_.positions.push_back(position);
    const int64_t block = r.block_ids[static_cast<size_t>(position / block_size)];
    batch_.slot_mapping.push_back(block * block_size + position % block_size);
  }
  batch_.sequences.push_back(seq);
}

void MtpProposer::run(const ExecutionContext& ctx) {
  const int64_t T = batch_.num_tokens();
  output_.resize(static_cast<size_t>(T * hidden_));
  logits_.resize(static_cast<size_t>(batch_.num_logit_rows() * model_.vocab_size()));
  model_.forward_mtp(ctx, batch_, previous_.data(), cache_, logits_.data(), output_.data());
}

void MtpProposer::propose(const ExecutionContext& ctx, std::span<const ProposalRequest> requests,
                          std::vector<std::vector<int32_t>>& drafts) {
  drafts.resize(requests.size());
  for (std::vector<int32_t>& d : drafts) d.clear();
  const std::span<const float> target_hidden = model_.hidden_states();
  const int64_t vocab = model_.vocab_size();

  // Pass 1: every kept position i of every request, with the target's h_i and token i + 1. It
  // keeps the layer's cache in step with the decoder's even for requests that do not draft.
  batch_.clear();
  previous_.clear();
  drafting_.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposalRequest& r = requests[i];
    const int32_t first = r.first_position;
    // Position i needs the token at i + 1: known for every kept position but a last one whose
    // row was not sampled (none such is scheduled today).
    const int32_t num =
        std::min(r.num_kept_positions, static_cast<int32_t>(r.token_ids.size()) - 1 - first);
    if (num <= 0) continue;
    assert(static_cast<size_t>((r.first_row + num) * hidden_) <= target_hidden.size());
    const bool drafts_from_here = r.wants_drafts && num == r.num_kept_positions;
    add_sequence(r, first, num, drafts_from_here,
                 r.token_ids.subspan(static_cast<size_t>(first) + 1, static_cast<size_t>(num)));
    const float* rows = target_hidden.data() + r.first_row * hidden_;
    previous_.insert(previous_.end(), rows, rows + num * hidden_);
    if (drafts_from_here) drafting_.push_back({i, first + num - 1, {}});
  }
  if (batch_.token_ids.empty()) return;
  run(ctx);

  for (int32_t step = 0;; ++step) {
    // The logits rows are the drafting sequences' last rows, in batch order.
    size_t row = 0;
    for (size_t s = 0; s < batch_.sequences.size(); ++s) {
      const ForwardSequence& seq = batch_.sequences[s];
      if (!seq.needs_logits) continue;
      Drafting& d = drafting_[row];
      drafts[d.index].push_back(
          argmax_token(logits_.data() + static_cast<int64_t>(row) * vocab, vocab));
      const float* out = output_.data() + (seq.token_begin + seq.num_tokens - 1) * hidden_;
      d.hidden.assign(out, out + hidden_);
      ++row;
    }
    if (step + 2 > num_speculative_tokens_) break;

    // Draft step + 2: the last draft at the next position, continuing from the layer's own
    // output. Its K/V goes to a slot the request already holds (past its computed tokens, so
    // in a block no other request shares); a request whose blocks end there stops drafting.
    batch_.clear();
    previous_.clear();
    std::vector<Drafting> next;
    for (Drafting& d : drafting_) {
      const ProposalRequest& r = requests[d.index];
      const int32_t position = d.position + 1;
      if (static_cast<size_t>(position / cache_.block_size()) >= r.block_ids.size()) continue;
      inputs_.assign(1, drafts[d.index].back());
      add_sequence(r, position, 1, true, inputs_);
      previous_.insert(previous_.end(), d.hidden.begin(), d.hidden.end());
      next.push_back({d.index, position, {}});
    }
    drafting_ = std::move(next);
    if (drafting_.empty()) break;
    run(ctx);
  }
}

}  // namespace pagoda
