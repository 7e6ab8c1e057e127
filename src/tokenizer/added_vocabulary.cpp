// Leftmost-longest matching of added tokens with HF's strip / single-word rules.
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include <utf8proc.h>

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

// Rust's char::is_alphanumeric, approximated by the Unicode letter and number categories.
bool is_alphanumeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

size_t previous_char_start(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

char32_t last_char(std::string_view text) {
  size_t p = previous_char_start(text, text.size());
  return next_code_point(text, p);
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  int32_t node = 0;
  for (const char c : pattern) {
    const auto b = static_cast<uint8_t>(c);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{-1}));
    if (it != children.end() && it->first == b) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes.size());
      children.insert(it, {b, child});
      nodes.emplace_back();
      node = child;
    }
  }
  first_byte[static_cast<uint8_t>(pattern[0])] = true;
  if (nodes[node].token < 0) nodes[node].token = token;  // first registration wins a duplicate
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                             size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{-1}));
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {i + 1 - pos, nodes[node].token};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  // HF registers special tokens before the other added tokens.
  std::stable_partition(tokens.begin(), tokens.end(),
                        [](const AddedToken& t) { return t.special; });
  for (AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    const size_t index = tokens_.size();
    index_by_id_[token.id] = index;
    index_by_content_.emplace(token.content, index);
    tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    if (!token.normalized) {
      raw_trie_.insert(token.content, static_cast<int32_t>(i));
    } else {
      std::string pattern = token.content;
      if (normalizer) normalizer->normalize(pattern);
      if (!pattern.empty()) normalized_trie_.insert(pattern, static_cast<int32_t>(i));
    }
  }
}

const AddedToken* AddedVocabulary::find_by_id(TokenId id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<TokenId> AddedVocabulary::find_by_content(std::string_view content) const {
  auto it = index_by_content_.find(content);
  if (it == index_by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  auto it = index_by_content_.find(content);
  return it != index_by_content_.end() && tokens_[it->second].special;
}

void AddedVocabulary::split(std::string_view text, bool normalized_tokens,
                            std::vector<TextSegment>& out) const {
  const Trie& trie = normalized_tokens ? normalized_trie_ : raw_trie_;
  size_t start_offset = 0;  // end of the last emitted segment
  size_t search = 0;        // where the (non-overlapping) match iteration resumes
  if (trie.nodes.size() > 1) {
    while (search < text.size()) {
      if (!trie.first_byte[static_cast<uint8_t>(text[search])]) {
        ++search;
        continue;
      }
      const auto [length, index] = trie.longest_at(text, search);
      if (index < 0) {
        ++search;
        continue;
      }
      size_t start = search;
      size_t stop = search + length;
      search = stop;
      const AddedToken& token = tokens_[index];
      if (token.single_word) {
        const bool start_space = start == 0 || !is_alphanumeric(last_char(text.substr(0, start)));
        size_t p = stop;
        const bool stop_space = stop == text.size() || !is_alphanumeric(next_code_point(text, p));
        if (!start_space || !stop_space) continue;  // inside a word: not this token
      }
      if (token.lstrip) {
        size_t new_start = start;
        while (new_start > 0) {
          const size_t prev = previous_char_start(text, new_start);
          size_t p = prev;
          if (!is_white_space(next_code_point(text, p))) break;
          new_start = prev;
        }
        start = std::max(new_start, start_offset);
      }
      if (token.rstrip) {
        while (stop < text.size()) {
          size_t p = stop;
          if (!is_white_space(next_code_point(text, p))) break;
          stop = p;
        }
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, token.id});
      start_offset = stop;
      search = std::max(search, stop);
    }
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace pagoda
