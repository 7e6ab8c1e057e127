// Each penalty changes the logits exactly as its formula says, checked on hand-computed vectors.
#include "sampling/penalties.h"

#include <vector>

#include <gtest/gtest.h>

#include "sampling/sampler.h"

namespace pagoda {
namespace {

// Prompt [1, 2, 2]; generated [2, 3, 3]; six-token vocabulary.
const std::vector<int32_t> kPrompt = {1, 2, 2};
const std::vector<int32_t> kGenerated = {2, 3, 3};
const std::vector<float> kLogits = {1.0f, 2.0f, -1.0f, 0.5f, -0.5f, 3.0f};

std::vector<float> penalized(const PenaltyParams& params) {
  PenaltyState state(params, kPrompt, 16);
  for (int32_t id : kGenerated) state.accept(id);
  std::vector<float> logits = kLogits;
  state.apply(logits.data(), static_cast<int64_t>(logits.size()));
  return logits;
}

TEST(Penalties, NeutralParamsChangeNothing) {
  PenaltyState state(PenaltyParams{}, kPrompt, 16);
  EXPECT_FALSE(state.active());
  EXPECT_EQ(penalized(PenaltyParams{}), kLogits);
}

TEST(Penalties, RepetitionDividesPositiveMultipliesNegativeOverPromptAndOutput) {
  // ids 1, 2 (prompt) and 2, 3 (output) are penalized once each, however often they occur.
  const std::vector<float> expected = {1.0f, 2.0f / 1.5f, -1.0f * 1.5f, 0.5f / 1.5f, -0.5f, 3.0f};
  EXPECT_EQ(penalized({1.5f, 0.0f, 0.0f}), expected);
  // A penalty below 1 rewards repetition the same way.
  const std::vector<float> reward = {1.0f, 2.0f / 0.5f, -1.0f * 0.5f, 0.5f / 0.5f, -0.5f, 3.0f};
  EXPECT_EQ(penalized({0.5f, 0.0f, 0.0f}), reward);
}

TEST(Penalties, FrequencySubtractsCountTimesPenaltyOverOutputOnly) {
  // Token 1 is only in the prompt: untouched. Token 2 generated once, token 3 twice.
  const std::vector<float> expected = {1.0f, 2.0f, -1.0f - 0.5f, 0.5f - 1.0f, -0.5f, 3.0f};
  EXPECT_EQ(penalized({1.0f, 0.5f, 0.0f}), expected);
}

TEST(Penalties, PresenceSubtractsOnceOverOutputOnly) {
  const std::vector<float> expected = {1.0f, 2.0f, -1.0f - 0.25f, 0.5f - 0.25f, -0.5f, 3.0f};
  EXPECT_EQ(penalized({1.0f, 0.0f, 0.25f}), expected);
  // Negative presence penalty encourages repetition.
  const std::vector<float> negative = {1.0f, 2.0f, -1.0f + 1.0f, 0.5f + 1.0f, -0.5f, 3.0f};
  EXPECT_EQ(penalized({1.0f, 0.0f, -1.0f}), negative);
}

TEST(Penalties, AllThreeInVllmOrder) {
  // repetition first, then frequency, then presence.
  const std::vector<float> expected = {
      1.0f, 2.0f / 2.0f, -1.0f * 2.0f - 0.5f - 0.25f, 0.5f / 2.0f - 1.0f - 0.25f, -0.5f, 3.0f};
  EXPECT_EQ(penalized({2.0f, 0.5f, 0.25f}), expected);
}

TEST(Penalties, CountsAreIncrementalAndIdsOutsideTheVocabularyAreSkipped) {
  PenaltyState state({1.0f, 1.0f, 0.0f}, {}, 4);
  for (int i = 0; i < 5; ++i) state.accept(4);
  state.accept(100);  // beyond the row below: counted, never applied
  EXPECT_EQ(state.output_count(4), 5u);
  EXPECT_EQ(state.output_count(100), 1u);
  EXPECT_EQ(state.output_count(3), 0u);
  std::vector<float> logits(6, 0.0f);
  state.apply(logits.data(), 6);
  EXPECT_EQ(logits, (std::vector<float>{0, 0, 0, 0, -5.0f, 0}));
}

TEST(Penalties, SamplerAppliesThemBeforeGreedy) {
  // With temperature 0 the row left behind by sample() is exactly the penalized logits.
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  RequestSampler sampler(params, kPrompt, {}, 0);
  for (int32_t id : kGenerated) sampler.accept(id);
  std::vector<float> logits = kLogits;
  const SampleResult r = sampler.sample(logits.data(), 6);
  EXPECT_EQ(logits, penalized({2.0f, 0.5f, 0.25f}));
  EXPECT_EQ(r.token_id, 5);
  // A penalty strong enough moves the argmax away from a repeated token.
  params.presence_penalty = 2.0f;
  params.repetition_penalty = 1.0f;
  params.frequency_penalty = 0.0f;
  RequestSampler repeat(params, {}, {}, 0);
  std::vector<float> row = {0.0f, 1.0f, 0.5f};
  EXPECT_EQ(repeat.sample(row.data(), 3).token_id, 1);
  repeat.accept(1);
  row = {0.0f, 1.0f, 0.5f};
  EXPECT_EQ(repeat.sample(row.data(), 3).token_id, 2);
}

}  // namespace
}  // namespace pagoda
