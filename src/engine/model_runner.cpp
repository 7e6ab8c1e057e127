#include "engine/model_runner.h"

#include <algorithm>
#include <limits>

#include "engine/structured_outputs.h"
#include "kernels/host_context.h"
#include "sampling/logits_ops.h"
#include "util/error.h"

namespace pagoda {
namespace {

PositionLogprobs position_logprobs(const SampleResult& sample) {
  PositionLogprobs lp;
  lp.chosen = {sample.token_id, sample.logprob, 0};
  for (const TokenLogprob& t : sample.top_logprobs) lp.top.push_back({t.token_id, t.logprob, 0});
  return lp;
}

}  // namespace

ModelRunner::ModelRunner(Model& model, KvCache& cache, const SpeculativeConfig& speculative_config,
                         bool samples, Model* draft_model, KvCache* draft_cache)
    : model_(model), cache_(cache), sampling_(samples), context_(host_execution_context()) {
  if (samples) {
    proposer_ = make_proposer(speculative_config, model, cache, draft_model, draft_cache);
  }
}

void ModelRunner::update_states(const SchedulerOutput& out) {
  for (const std::string& id : out.finished_request_ids) {
    requests_.erase(id);
    if (proposer_) proposer_->remove_request(id);
  }
  for (const NewRequestData& data : out.new_requests) {
    RunnerRequest r;
    r.token_ids = data.prompt_token_ids;
    r.num_prompt_tokens = static_cast<int32_t>(data.prompt_token_ids.size());
    r.block_ids = data.block_ids;
    r.num_computed_tokens = data.num_computed_tokens;
    if (sampling_) {
      r.sampler = std::make_unique<RequestSampler>(data.sampling_params, data.prompt_token_ids,
                                                   data.eos_token_ids, data.sampling_seed);
      if (data.grammar) {
        GrammarRequestOptions options;
        options.stop_token_ids = data.sampling_params.stop_token_ids;
        options.reasoning_end_token_ids = data.reasoning_end_token_ids;
        if (data.sampling_params.ignore_eos) options.masked_eos_token_ids = data.eos_token_ids;
        r.sampler->add_logits_processor(
            std::make_unique<GrammarLogitsProcessor>(data.grammar, std::move(options)));
      }
    }
    r.wants_logprobs = data.sampling_params.logprobs.has_value();
    r.num_top_prompt_logprobs = data.sampling_params.prompt_logprobs.value_or(0);
    r.readmitted = true;
    r.temperature = data.sampling_params.greedy() ? 0.0f
                                                  : std::max(data.sampling_params.temperature,
                                                             RequestSampler::kMinTemperature);
    r.seed = data.sampling_seed;
    requests_.insert_or_assign(data.request_id, std::move(r));
  }
  for (const CachedRequestData& data : out.cached_requests) {
    auto it = requests_.find(data.request_id);
    if (it == requests_.end()) fail("model runner: unknown request '{}'", data.request_id);
    RunnerRequest& r = it->second;
    if (data.resumed_from_preemption) {
      r.block_ids.clear();
      r.readmitted = true;
    }
    r.block_ids.insert(r.block_ids.end(), data.new_block_ids.begin(), data.new_block_ids.end());
    r.num_computed_tokens = data.num_computed_tokens;
  }
}

void ModelRunner::prepare_inputs(const SchedulerOutput& out, Step& step) {
  const int32_t block_size = cache_.block_size();
  batch_.clear();
  step.scheduled.clear();
  step.logits_index.assign(out.requests.size(), -1);
  step.num_logit_rows.assign(out.requests.size(), 0);
  int64_t num_rows = 0;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    const ScheduledRequest& s = out.requests[i];
    auto it = requests_.find(s.request_id);
    if (it == requests_.end()) fail("model runner: unknown request '{}'", s.request_id);
    RunnerRequest& r = it->second;
    const auto num_known = static_cast<int32_t>(r.token_ids.size());
    const auto num_drafts = static_cast<int32_t>(s.draft_token_ids.size());
    if (r.num_computed_tokens != s.start_position ||
        s.start_position + s.num_new_tokens > num_known + num_drafts ||
        (num_drafts > 0 && s.start_position + s.num_new_tokens != num_known + num_drafts)) {
      fail("model runner: request '{}' scheduled at {} for {} tokens, but holds {} computed of {}",
           s.request_id, s.start_position, s.num_new_tokens, r.num_computed_tokens,
           r.token_ids.size());
    }
    step.scheduled.push_back(&r);
    ForwardSequence seq;
    seq.token_begin = static_cast<int32_t>(batch_.token_ids.size());
    seq.num_tokens = s.num_new_tokens;
    seq.context_len = s.start_position + s.num_new_tokens;
    seq.block_table = r.block_ids.data();
    seq.needs_logits = s.sample;
    seq.all_logits = s.all_logits;
    seq.num_draft_tokens = num_drafts;
    for (int32_t position = s.start_position; position < seq.context_len; ++position) {
      batch_.token_ids.push_back(
          position < num_known ? r.token_ids[static_cast<size_t>(position)]
                               : s.draft_token_ids[static_cast<size_t>(position - num_known)]);
      batch_.positions.push_back(position);
      const int64_t block = r.block_ids[static_cast<size_t>(position / block_size)];
      batch_.slot_mapping.push_back(block * block_size + position % block_size);
    }
    r.num_computed_tokens = seq.context_len;
    batch_.sequences.push_back(seq);
    // The model writes each sequence's rows for its last num_logit_rows() tokens, in order.
    step.num_logit_rows[i] = seq.num_logit_rows();
    if (seq.num_logit_rows() > 0) {
      step.logits_index[i] = num_rows;
      num_rows += seq.num_logit_rows();
    }
  }
  const auto needed = static_cast<size_t>(num_rows * model_.vocab_size());
  // A step with prompt logprobs may need thousands of rows; give that memory back afterwards
  // instead of keeping the high-water mark for every later decode step.
  constexpr size_t kKeepFloats = size_t{16} << 20;  // 64 MiB
  if (step.logits.capacity() > kKeepFloats && step.logits.capacity() > 4 * needed) {
    step.logits = std::vector<float>(needed);
  } else {
    step.logits.resize(needed);
  }
}

ModelRunnerOutput ModelRunner::execute_model(const SchedulerOutput& out) {
  begin_step(out);
  return finish_step(out);
}

void ModelRunner::begin_step(const SchedulerOutput& out) {
  // Drafts are proposed from the step just sampled, on batch_: speculation keeps one step in
  // flight.
  if (proposer_ && !steps_.empty()) fail("model runner: speculative decoding with a step begun");
  update_states(out);
  for (const BlockCopy& copy : out.block_copies) {
    cache_.copy_block(copy.src_block_id, copy.dst_block_id);
    if (proposer_) proposer_->copy_block(copy.src_block_id, copy.dst_block_id);
  }
  Step step;
  if (!spare_steps_.empty()) {
    step = std::move(spare_steps_.back());
    spare_steps_.pop_back();
  }
  prepare_inputs(out, step);
  step.experts = {};
  if (!out.requests.empty()) {
    model_.forward(context_, batch_, cache_, step.logits.data());
    step.experts = model_.last_forward_expert_usage();
  }
  steps_.push_back(std::move(step));
}

std::span<float> ModelRunner::oldest_step_logits() {
  if (steps_.empty()) fail("model runner: no step begun");
  return steps_.front().logits;
}

ModelRunnerOutput ModelRunner::finish_step(const SchedulerOutput& out) {
  if (steps_.empty()) fail("model runner: finish_step without a begun step");
  Step& step = steps_.front();
  if (step.scheduled.size() != out.requests.size())
    fail("model runner: finishing a step of {} requests with the output of {}",
         step.scheduled.size(), out.requests.size());
  ModelRunnerOutput result;
  const size_t num = out.requests.size();
  result.sampled_token_ids.assign(num, -1);
  result.logprobs.resize(num);
  result.prompt_logprobs.resize(num);
  result.num_moe_layers = step.experts.num_moe_layers;
  result.num_routed_experts = step.experts.num_routed_experts;
  if (num > 0 && sampling_) sample_step(out, step, result);
  spare_steps_.push_back(std::move(step));
  steps_.pop_front();
  return result;
}

void ModelRunner::sample_step(const SchedulerOutput& out, Step& step, ModelRunnerOutput& result) {
  const size_t num = out.requests.size();
  compute_prompt_logprobs(out, step, result);

  // Sample every request whose last row was computed; samplers are independent.
  samples_.resize(num);
  num_accepted_.assign(num, 0);
  draft_logprobs_.resize(num);
  drafts_.resize(num);
  const auto count = static_cast<int64_t>(num);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    const auto k = static_cast<size_t>(i);
    drafts_[k].clear();
    draft_logprobs_[k].clear();
    if (out.requests[k].sample) sample_request(step, k, out.requests[k]);
  }
  if (proposer_) propose_drafts(out, step);
  bool any_drafts = false;
  for (size_t k = 0; k < num; ++k) {
    any_drafts = any_drafts || !out.requests[k].draft_token_ids.empty() || !drafts_[k].empty();
  }
  if (any_drafts) {
    result.num_accepted_draft_tokens = num_accepted_;
    result.draft_logprobs = draft_logprobs_;
    result.draft_token_ids.resize(num);
    for (size_t k = 0; k < num; ++k) result.draft_token_ids[k] = drafts_[k];
  }
  for (size_t k = 0; k < num; ++k) {
    if (!out.requests[k].sample) continue;
    const RunnerRequest& r = *step.scheduled[k];
    const SampleResult& sample = samples_[k];
    result.sampled_token_ids[k] = sample.token_id;
    if (r.wants_logprobs) result.logprobs[k] = position_logprobs(sample);
  }
}

void ModelRunner::sample_request(Step& step, size_t k, const ScheduledRequest& scheduled) {
  const int64_t vocab = model_.vocab_size();
  RunnerRequest& r = *step.scheduled[k];
  const auto num_drafts = static_cast<int32_t>(scheduled.draft_token_ids.size());
  // Row j predicts the token after the j-th fed token of the last 1 + num_drafts: row 0 checks
  // draft 0, ..., row num_drafts follows the last draft.
  float* rows =
      step.logits.data() + (step.logits_index[k] + step.num_logit_rows[k] - 1 - num_drafts) * vocab;
  int32_t j = 0;
  for (; j < num_drafts; ++j) {
    const int32_t draft = scheduled.draft_token_ids[static_cast<size_t>(j)];
    bool accepted = false;
    // The draft's distribution at this position, when the proposer sampled the draft.
    const std::span<const float> q =
        r.draft_probs.size() >= static_cast<size_t>((j + 1) * vocab)
            ? std::span<const float>(r.draft_probs)
                  .subspan(static_cast<size_t>(j * vocab), static_cast<size_t>(vocab))
            : std::span<const float>();
    SampleResult verdict = r.sampler->verify(rows + j * vocab, vocab, draft, accepted, q);
    r.token_ids.push_back(verdict.token_id);
    r.sampler->accept(verdict.token_id);
    if (!accepted) {
      samples_[k] = std::move(verdict);
      break;
    }
    // The row that verified the draft is the one plain decoding would have sampled it from.
    if (r.wants_logprobs) draft_logprobs_[k].push_back(position_logprobs(verdict));
  }
  num_accepted_[k] = j;
  if (j == num_drafts) {
    // Every draft held (or there were none): the row after the last one is a free sample.
    samples_[k] = r.sampler->sample(rows + num_drafts * vocab, vocab);
    r.token_ids.push_back(samples_[k].token_id);
    r.sampler->accept(samples_[k].token_id);
  }
}

void ModelRunner::propose_drafts(const SchedulerOutput& out, const Step& step) {
  proposals_.clear();
  for (size_t k = 0; k < out.requests.size(); ++k) {
    const ScheduledRequest& s = out.requests[k];
    RunnerRequest& r = *step.scheduled[k];
    const ForwardSequence& seq = batch_.sequences[k];
    const auto num_rejected = static_cast<int32_t>(s.draft_token_ids.size()) - num_accepted_[k];
    ProposalRequest p;
    p.token_ids = r.token_ids;
    p.block_ids = r.block_ids;
    p.first_position = s.start_position;
    p.num_kept_positions = s.num_new_tokens - num_rejected;
    p.first_row = seq.token_begin;
    p.wants_drafts = s.sample;
    p.request_id = &s.request_id;
    p.readmitted = r.readmitted;
    r.readmitted = false;
    p.temperature = r.temperature;
    p.seed = r.seed;
    r.draft_probs.clear();
    p.draft_probs = &r.draft_probs;
    proposals_.push_back(p);
  }
  proposer_->propose(context_, proposals_, drafts_);
}

void ModelRunner::accept_sampled_tokens(std::span<const ScheduledRequest> requests,
                                        std::span<const int32_t> sampled_token_ids) {
  if (sampled_token_ids.size() != requests.size()) {
    fail("model runner: {} sampled tokens for a step of {} requests", sampled_token_ids.size(),
         requests.size());
  }
  for (size_t k = 0; k < requests.size(); ++k) {
    if (sampled_token_ids[k] < 0) continue;
    auto it = requests_.find(requests[k].request_id);
    if (it == requests_.end())
      fail("model runner: a sampled token for unknown request '{}'", requests[k].request_id);
    it->second.token_ids.push_back(sampled_token_ids[k]);
  }
}

void ModelRunner::compute_prompt_logprobs(const SchedulerOutput& out, const Step& step,
                                          ModelRunnerOutput& result) {
  prompt_rows_.clear();
  const int64_t vocab = model_.vocab_size();
  for (size_t i = 0; i < out.requests.size(); ++i) {
    const ScheduledRequest& s = out.requests[i];
    if (!s.all_logits) continue;
    const RunnerRequest& r = *step.scheduled[i];
    // Row j follows the token at start_position + j, so it predicts the next one; the row after
    // the last prompt token predicts the first output token and is left to the sampler.
    PromptLogprobsChunk chunk;
    chunk.first_position = s.start_position + 1;
    for (int32_t j = 0; j < s.num_new_tokens; ++j) {
      const int32_t position = s.start_position + j + 1;
      if (position >= r.num_prompt_tokens) break;
      prompt_rows_.push_back(
          {i, step.logits.data() + (step.logits_index[i] + j) * vocab, position});
    }
    chunk.positions.resize(static_cast<size_t>(
        std::max(0, std::min(s.start_position + s.num_new_tokens, r.num_prompt_tokens - 1) -
                        s.start_position)));
    result.prompt_logprobs[i] = std::move(chunk);
  }
  if (prompt_rows_.empty()) return;

  // Each row writes its own entry of a chunk sized above, so the rows run in parallel.
  const auto num_rows = static_cast<int64_t>(prompt_rows_.size());
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t k = 0; k < num_rows; ++k) {
    const PromptRow& pr = prompt_rows_[static_cast<size_t>(k)];
    const RunnerRequest& r = *step.scheduled[pr.scheduled_index];
    PromptLogprobsChunk& chunk = *result.prompt_logprobs[pr.scheduled_index];
    const int32_t token_id = r.token_ids[static_cast<size_t>(pr.position)];
    // Raw logprobs (log_softmax of the logits, no penalties or temperature), as the sampler's.
    const double log_normalizer = log_sum_exp(pr.logits, vocab);
    const float target = pr.logits[token_id];
    int32_t rank = 1;  // vLLM: 1 + the number of tokens strictly more likely
    for (int64_t v = 0; v < vocab; ++v) rank += pr.logits[v] > target ? 1 : 0;
    PositionLogprobs& lp = chunk.positions[static_cast<size_t>(pr.position - chunk.first_position)];
    lp.chosen = {token_id, static_cast<float>(static_cast<double>(target) - log_normalizer), rank};
    if (r.num_top_prompt_logprobs > 0) {
      std::vector<int32_t> top_ids;
      top_n_tokens(pr.logits, vocab, r.num_top_prompt_logprobs, top_ids);
      for (size_t t = 0; t < top_ids.size(); ++t) {
        const int32_t id = top_ids[t];
        lp.top.push_back({id,
                          static_cast<float>(static_cast<double>(pr.logits[id]) - log_normalizer),
                          static_cast<int32_t>(t) + 1});
      }
    }
  }
}

}  // namespace pagoda
