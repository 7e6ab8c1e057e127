// The conversation `pagoda chat` keeps, and the rule that keeps it inside the context window:
// when the prompt no longer leaves room for an answer, the oldest turns go first; the system
// prompt and the newest question never do. Free of the engine (the prompt is rendered through a
// callback), so the rule is tested without a model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::cli {

// One exchange: the user's message and the answer (empty while it is being generated).
struct ChatTurn {
  std::string user;
  std::string assistant;
};

class ChatHistory {
 public:
  explicit ChatHistory(std::string system_prompt = "") : system_prompt_(std::move(system_prompt)) {}

  void add_user(std::string text) { turns_.push_back({std::move(text), {}}); }
  void set_answer(std::string text) { turns_.back().assistant = std::move(text); }
  void drop_oldest() { turns_.erase(turns_.begin()); }
  void drop_newest() { turns_.pop_back(); }
  void clear() { turns_.clear(); }  // the system prompt stays

  size_t num_turns() const { return turns_.size(); }
  const std::vector<ChatTurn>& turns() const { return turns_; }

  // OpenAI-style messages: the system prompt (when given), then each turn's user message and
  // answer; an empty answer (the newest turn's, before generation) is left out.
  nlohmann::json messages() const;

 private:
  std::string system_prompt_;
  std::vector<ChatTurn> turns_;
};

// The prompt's token ids for `messages` (chat template with the generation prompt, encoded).
using RenderPrompt = std::function<std::vector<int32_t>(const nlohmann::json& messages)>;

struct ChatFit {
  bool fits = false;  // false: the newest message alone leaves no room for even one token
  std::vector<int32_t> prompt_ids;
  int num_dropped_turns = 0;
  int64_t max_tokens = 0;  // the answer's budget: the room left, at most the --max-tokens cap
};

// How much room an answer should have before older turns are dropped to make it: the
// --max-tokens cap when given, else 256, and never more than half the context (so a long cap
// on a small context does not throw the whole history away).
int64_t answer_reserve(int64_t max_model_len, std::optional<int64_t> max_tokens_cap);

// Drops the oldest turns of `history` until its prompt leaves `reserve` tokens of
// `max_model_len` for the answer, or only the newest turn is left. The answer then gets the room
// that is left, capped by `max_tokens_cap`. When even the newest turn alone fills the context,
// `fits` is false and the history keeps that turn (the caller decides what to do with it).
ChatFit fit_history(ChatHistory& history, const RenderPrompt& render, int64_t max_model_len,
                    int64_t reserve, std::optional<int64_t> max_tokens_cap);

}  // namespace pagoda::cli
