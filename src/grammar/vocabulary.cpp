// Vocabulary: sorted ids and the mask of ordinary tokens.
#include "grammar/vocabulary.h"

#include <algorithm>

#include "grammar/grammar_error.h"

namespace pagoda::grammar {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids)
    : token_bytes_(std::move(token_bytes)),
      stop_token_ids_(std::move(stop_token_ids)),
      is_stop_(token_bytes_.size(), 0),
      normal_mask_((token_bytes_.size() + 31) / 32, 0) {
  for (const int32_t id : stop_token_ids_) {
    if (id < 0 || static_cast<size_t>(id) >= size()) {
      grammar_fail("stop token id {} is outside the vocabulary of {} tokens", id, size());
    }
    is_stop_[id] = 1;
  }
  for (size_t id = 0; id < size(); ++id) {
    if (!is_stop_[id] && !token_bytes_[id].empty()) sorted_ids_.push_back(static_cast<int32_t>(id));
  }
  std::sort(sorted_ids_.begin(), sorted_ids_.end(),
            [&](int32_t a, int32_t b) { return token_bytes_[a] < token_bytes_[b]; });
  for (const int32_t id : sorted_ids_) {
    set_bit(normal_mask_, id);
    max_token_bytes_ = std::max(max_token_bytes_, token_bytes_[id].size());
  }
}

}  // namespace pagoda::grammar
