#include "tools/pagoda/chat_history.h"

#include <algorithm>

namespace pagoda::cli {

nlohmann::json ChatHistory::messages() const {
  nlohmann::json messages = nlohmann::json::array();
  if (!system_prompt_.empty())
    messages.push_back({{"role", "system"}, {"content", system_prompt_}});
  for (const ChatTurn& turn : turns_) {
    messages.push_back({{"role", "user"}, {"content", turn.user}});
    if (!turn.assistant.empty())
      messages.push_back({{"role", "assistant"}, {"content", turn.assistant}});
  }
  return messages;
}

int64_t answer_reserve(int64_t max_model_len, std::optional<int64_t> max_tokens_cap) {
  constexpr int64_t kDefaultReserve = 256;
  return std::max<int64_t>(1,
                           std::min(max_tokens_cap.value_or(kDefaultReserve), max_model_len / 2));
}

ChatFit fit_history(ChatHistory& history, const RenderPrompt& render, int64_t max_model_len,
                    int64_t reserve, std::optional<int64_t> max_tokens_cap) {
  ChatFit fit;
  fit.prompt_ids = render(history.messages());
  auto room = [&] { return max_model_len - static_cast<int64_t>(fit.prompt_ids.size()); };
  while (room() < reserve && history.num_turns() > 1) {
    history.drop_oldest();
    ++fit.num_dropped_turns;
    fit.prompt_ids = render(history.messages());
  }
  fit.fits = room() >= 1;
  fit.max_tokens = std::max<int64_t>(0, room());
  if (max_tokens_cap) fit.max_tokens = std::min(fit.max_tokens, *max_tokens_cap);
  return fit;
}

}  // namespace pagoda::cli
