// A deterministic stand-in for pagoda::Engine behind the EngineBackend interface, so that the
// server's threading, streaming, limits and error paths are tested fast, without a model, and
// under ASan. It "generates" token ids from the prompt by a fixed rule, one token per running
// request per step, at most max_num_seqs running at once, with a KV usage that follows the tokens
// held, and can be told to throw from step() to exercise the engine-death path.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pagoda/async_engine.h"
#include "util/error.h"

namespace pagoda::server::testing {

class FakeEngine final : public EngineBackend {
 public:
  static constexpr int32_t kEos = 2;
  static constexpr int32_t kBos = 1;
  static constexpr int kMaxModelLen = 256;
  static constexpr int kBlockTokens = 16;
  static constexpr int kNumBlocks = 256;

  struct Options {
    int max_num_seqs = 8;
    std::chrono::milliseconds step_time{2};
    int throw_after_steps = -1;  // < 0: never
    // When set, every request generates these texts, one per token, then EOS: a model output
    // written by hand (tool calls in a model's format), cut where the test likes.
    std::vector<std::string> script = {};
  };
  explicit FakeEngine(Options options) : options_(options) {}

  // The token stream the fake produces for a prompt: depends only on the prompt (like greedy).
  static int32_t token_at(const std::vector<int32_t>& prompt, size_t i) {
    uint32_t h = 2166136261u;
    for (int32_t t : prompt) h = (h ^ static_cast<uint32_t>(t)) * 16777619u;
    return static_cast<int32_t>(10 + (h + 7919u * static_cast<uint32_t>(i)) % 90);
  }
  static std::string token_text(int32_t id) { return id == kEos ? "" : fmt::format("w{} ", id); }

  void add_request(const std::string& id, std::vector<int32_t> prompt,
                   const SamplingParams& params) override {
    for (int32_t t : prompt) {
      if (t >= 1000) fail("token id {} is outside the vocabulary (1000)", t);
    }
    Req r;
    r.prompt = std::move(prompt);
    r.params = params;
    r.arrival_s = now_s();
    requests_[id] = std::move(r);
    order_.push_back(id);
  }
  void abort_request(const std::string& id) override { remove(id); }

  std::vector<RequestOutput> step() override {
    if (options_.throw_after_steps >= 0 && num_steps_ >= options_.throw_after_steps) {
      throw std::runtime_error("fake engine failure");
    }
    ++num_steps_;
    std::this_thread::sleep_for(options_.step_time);
    std::vector<RequestOutput> outputs;
    std::vector<std::string> finished;
    int running = 0;
    for (const std::string& id : order_) {
      if (running++ >= options_.max_num_seqs) break;
      Req& r = requests_.at(id);
      const double t = now_s();
      if (r.first_scheduled_s == 0) r.first_scheduled_s = t;
      const int32_t next = token_at(r.prompt, r.tokens.size());
      // EOS after 5 tokens unless ignore_eos or min_tokens says otherwise.
      const std::vector<std::string>& script = options_.script;
      const bool eos = script.empty()
                           ? r.tokens.size() >= 5 && !r.params.ignore_eos &&
                                 static_cast<int>(r.tokens.size()) >= r.params.min_tokens &&
                                 std::find(r.prompt.begin(), r.prompt.end(), 42) != r.prompt.end()
                           : r.tokens.size() >= script.size();
      // The text of generated token k (scripted: its piece of the script).
      auto text_at = [&script](size_t k, int32_t tok) {
        return script.empty() ? token_text(tok) : k < script.size() ? script[k] : std::string();
      };
      const int32_t token = eos ? kEos : next;
      if (r.tokens.empty()) {
        r.first_token_s = t;
        num_prompt_tokens_computed_ += static_cast<int64_t>(r.prompt.size());
      }
      r.tokens.push_back(token);
      r.last_token_s = t;
      RequestOutput out;
      out.request_id = id;
      // As the engine does: a delta output carries what is new, and the prompt only once.
      const bool delta = r.params.output_kind == RequestOutputKind::kDelta;
      const bool first = r.tokens.size() == 1;
      if (!delta || first) out.prompt_token_ids = r.prompt;
      out.metrics = {r.arrival_s, r.first_scheduled_s, r.first_token_s, r.last_token_s, 0};
      if (r.params.prompt_logprobs && (!delta || first))
        out.prompt_logprobs = prompt_logprobs(r.prompt, r.params);
      const std::vector<int32_t> reported =
          delta ? std::vector<int32_t>{token} : r.tokens;  // token_ids, text and logprobs
      for (int s = 0; s < r.params.n; ++s) {
        CompletionOutput o;
        o.index = s;
        o.token_ids = reported;
        const size_t first_reported = r.tokens.size() - reported.size();
        for (size_t k = 0; k < reported.size(); ++k)
          o.text += text_at(first_reported + k, reported[k]);
        o.delta_token_ids = {token};
        o.delta_text = text_at(r.tokens.size() - 1, token);
        if (r.params.logprobs) {
          for (int32_t tok : reported) {
            GeneratedTokenLogprobs lp;
            lp.chosen = {tok, token_text(tok), -0.5f};
            for (int k = 0; k < *r.params.logprobs; ++k)
              lp.top.push_back({tok + k, token_text(tok + k), -0.5f - k});
            o.logprobs.push_back(lp);
          }
        }
        if (eos)
          o.finish_reason = "stop";
        else if (static_cast<int>(r.tokens.size()) >= r.params.max_tokens)
          o.finish_reason = "length";
        out.outputs.push_back(std::move(o));
      }
      out.finished = !out.outputs.front().finish_reason.empty();
      if (out.finished) {
        out.metrics.finished_time_s = t;
        finished.push_back(id);
      }
      num_generated_ += 1;
      outputs.push_back(std::move(out));
    }
    for (const std::string& id : finished) remove(id);
    last_step_num_tokens_ = static_cast<int32_t>(outputs.size());  // one token per request
    return outputs;
  }

  // Prompt logprobs by a fixed rule: token i scores -0.25 * i with rank 1 + i % 3; the
  // alternatives are ids 500, 501, ... scoring -0.1, -0.2, ...
  static std::vector<std::optional<GeneratedTokenLogprobs>> prompt_logprobs(
      const std::vector<int32_t>& prompt, const SamplingParams& params) {
    std::vector<std::optional<GeneratedTokenLogprobs>> out(prompt.size());
    for (size_t i = 1; i < prompt.size(); ++i) {
      GeneratedTokenLogprobs lp;
      lp.chosen = {prompt[i], token_text(prompt[i]), -0.25f * static_cast<float>(i),
                   1 + static_cast<int32_t>(i % 3)};
      for (int k = 0; k < *params.prompt_logprobs; ++k)
        lp.top.push_back({500 + k, token_text(500 + k), -0.1f * static_cast<float>(k + 1), k + 1});
      out[i] = lp;
    }
    return out;
  }

  bool has_unfinished_requests() const override { return !order_.empty(); }

  EngineStats stats() const override {
    EngineStats s;
    s.num_running = std::min<int>(static_cast<int>(order_.size()), options_.max_num_seqs);
    s.num_waiting = static_cast<int>(order_.size()) - s.num_running;
    int blocks = 0;
    int i = 0;
    for (const std::string& id : order_) {
      if (i++ >= options_.max_num_seqs) break;
      const Req& r = requests_.at(id);
      blocks +=
          static_cast<int>((r.prompt.size() + r.tokens.size() + kBlockTokens - 1) / kBlockTokens);
    }
    s.kv_cache_usage = static_cast<double>(blocks) / kNumBlocks;
    s.kv_cache_total_bytes = int64_t{kNumBlocks} * kBlockTokens * 1024;
    s.generation_tokens = num_generated_;
    s.prompt_tokens_computed = num_prompt_tokens_computed_;
    s.num_steps = num_steps_;
    s.last_step_num_tokens = last_step_num_tokens_;
    return s;
  }

  // Words become ids 3 + (hash % 990); "forty-two" starts a prompt whose output ends in EOS.
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(kBos);
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && text[i] == ' ') ++i;
      size_t j = i;
      while (j < text.size() && text[j] != ' ') ++j;
      if (j > i) {
        const std::string word = text.substr(i, j - i);
        ids.push_back(word == "forty-two"
                          ? 42
                          : static_cast<int32_t>(3 + std::hash<std::string>{}(word) % 990));
      }
      i = j;
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s += token_text(id);
    return s;
  }
  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string&) const override {
    const nlohmann::json messages = nlohmann::json::parse(messages_json);
    std::string out;
    for (const auto& m : messages)
      out += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + " ";
    if (add_generation_prompt) out += "assistant:";
    return out;
  }
  std::string model_name() const override { return "fake-model"; }
  int32_t max_model_len() const override { return kMaxModelLen; }
  SamplingParams default_sampling_params() const override { return SamplingParams{}; }

 private:
  struct Req {
    std::vector<int32_t> prompt;
    SamplingParams params;
    std::vector<int32_t> tokens;
    double arrival_s = 0, first_scheduled_s = 0, first_token_s = 0, last_token_s = 0;
  };
  static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void remove(const std::string& id) {
    requests_.erase(id);
    std::erase(order_, id);
  }

  Options options_;
  std::map<std::string, Req> requests_;
  std::vector<std::string> order_;  // FCFS
  int num_steps_ = 0;
  int32_t last_step_num_tokens_ = 0;
  int64_t num_prompt_tokens_computed_ = 0;
  int64_t num_generated_ = 0;
};

}  // namespace pagoda::server::testing
