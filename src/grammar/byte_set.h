// ByteSet: a set of byte values (256 bits), the label of every terminal edge in the grammar IR and
// in the pushdown automaton.
#pragma once

#include <array>
#include <cstdint>

namespace pagoda::grammar {

class ByteSet {
 public:
  constexpr ByteSet() = default;

  static ByteSet single(uint8_t byte) {
    ByteSet set;
    set.insert(byte);
    return set;
  }
  static ByteSet range(uint8_t first, uint8_t last) {
    ByteSet set;
    set.insert_range(first, last);
    return set;
  }

  void insert(uint8_t byte) { words_[byte >> 6] |= uint64_t{1} << (byte & 63); }
  void insert_range(uint8_t first, uint8_t last) {
    for (unsigned b = first; b <= last; ++b) insert(static_cast<uint8_t>(b));
  }
  bool contains(uint8_t byte) const { return (words_[byte >> 6] >> (byte & 63)) & 1; }
  bool empty() const { return (words_[0] | words_[1] | words_[2] | words_[3]) == 0; }

  ByteSet& operator|=(const ByteSet& other) {
    for (int i = 0; i < 4; ++i) words_[i] |= other.words_[i];
    return *this;
  }
  bool operator==(const ByteSet&) const = default;
  uint64_t word(int i) const { return words_[i]; }

 private:
  std::array<uint64_t, 4> words_{};
};

}  // namespace pagoda::grammar
