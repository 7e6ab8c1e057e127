// validate(SamplingParams): the defaults pass; each out-of-range field gives a message naming it.
#include "sampling/validate.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(Validate, DefaultsAndEdgesOfTheRangesPass) {
  EXPECT_EQ(validate(SamplingParams{}), std::nullopt);
  SamplingParams edges;
  edges.temperature = 0.0f;
  edges.top_p = 1.0f;
  edges.top_k = -1;
  edges.min_p = 1.0f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.repetition_penalty = 0.01f;
  edges.max_tokens = 1;
  edges.min_tokens = 1;
  edges.logprobs = 20;
  edges.logit_bias = {{0, -100.0f}, {7, 100.0f}};
  edges.allowed_token_ids = {{0}};
  edges.bad_words = {" a"};
  EXPECT_EQ(validate(edges), std::nullopt);
  edges.logprobs = 0;
  edges.top_k = 0;
  edges.top_p = 1e-6f;
  EXPECT_EQ(validate(edges), std::nullopt);
}

TEST(Validate, EachOutOfRangeFieldIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::string field;
    std::function<void(SamplingParams&)> set;
  };
  const std::vector<Case> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [&](SamplingParams& p) { p.temperature = nan; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2.5f; }},
      {"frequency_penalty", [&](SamplingParams& p) { p.frequency_penalty = nan; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = 17; }},  // max_tokens is 16
      {"n", [](SamplingParams& p) { p.n = 0; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
      {"stop_token_ids",
       [](SamplingParams& p) {
         p.stop_token_ids = {3, -4};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{5, 100.5f}};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{5, -101.0f}};
       }},
      {"logit_bias",
       [&](SamplingParams& p) {
         p.logit_bias = {{5, nan}};
       }},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       }},
      {"allowed_token_ids", [](SamplingParams& p) { p.allowed_token_ids.emplace(); }},
      {"allowed_token_ids",
       [](SamplingParams& p) {
         p.allowed_token_ids = {{4, -2}};
       }},
      {"bad_words",
       [](SamplingParams& p) {
         p.bad_words = {"fine", ""};
       }},
      {"bad_words", [](SamplingParams& p) { p.bad_words = {" \n"}; }},
  };
  for (const Case& c : cases) {
    SamplingParams params;
    c.set(params);
    const std::optional<std::string> error = validate(params);
    ASSERT_TRUE(error.has_value()) << c.field;
    EXPECT_EQ(error->rfind(c.field + " ", 0), 0u) << *error;
  }
}

}  // namespace
}  // namespace pagoda
