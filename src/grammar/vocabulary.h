// Vocabulary: the byte string of every token id (after the tokenizer's byte-level or
// sentencepiece decoding), and which ids stop generation. Ids with an empty byte string (special
// tokens other than the stop tokens, unused embedding rows) are never allowed by a grammar.
// The ids are also kept sorted by their bytes, so that walks over the vocabulary share the work
// of common prefixes (token_walker.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pagoda::grammar {

class Vocabulary {
 public:
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids);

  size_t size() const { return token_bytes_.size(); }
  const std::string& bytes(int32_t token_id) const { return token_bytes_[token_id]; }
  bool is_stop(int32_t token_id) const { return is_stop_[token_id] != 0; }
  std::span<const int32_t> stop_token_ids() const { return stop_token_ids_; }
  // Ids with bytes that are not stop tokens, sorted by bytes.
  std::span<const int32_t> sorted_ids() const { return sorted_ids_; }
  // Bitmask (bit i of word i / 32) of sorted_ids().
  std::span<const uint32_t> normal_mask() const { return normal_mask_; }

  // Length in bytes of the longest token.
  size_t max_token_bytes() const { return max_token_bytes_; }
  // Words of a token bitmask over this vocabulary.
  size_t mask_words() const { return (size() + 31) / 32; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> stop_token_ids_;
  std::vector<char> is_stop_;
  std::vector<int32_t> sorted_ids_;
  std::vector<uint32_t> normal_mask_;
  size_t max_token_bytes_ = 0;
};

inline void set_bit(std::span<uint32_t> mask, int32_t id) {
  mask[id >> 5] |= uint32_t{1} << (id & 31);
}
inline void clear_bit(std::span<uint32_t> mask, int32_t id) {
  mask[id >> 5] &= ~(uint32_t{1} << (id & 31));
}
inline bool test_bit(std::span<const uint32_t> mask, int32_t id) {
  return (mask[id >> 5] >> (id & 31)) & 1;
}

}  // namespace pagoda::grammar
