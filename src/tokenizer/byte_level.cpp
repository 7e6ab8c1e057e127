// The GPT-2 bytes_to_unicode() table (openai/gpt-2 encoder.py), built once.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

struct ByteLevelTable {
  std::array<std::string, 256> char_of_byte;
  std::array<int16_t, 324> byte_of_char;  // every mapped code point is below U+0144
  ByteLevelTable() {
    byte_of_char.fill(-1);
    int next_extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : 256 + next_extra++;
      append_utf8(char_of_byte[b], cp);
      byte_of_char[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTable& table() {
  static const ByteLevelTable t;
  return t;
}

}  // namespace

std::string_view byte_level_char(uint8_t byte) {
  return table().char_of_byte[byte];
}

int byte_level_byte(char32_t cp) {
  return cp < table().byte_of_char.size() ? table().byte_of_char[cp] : -1;
}

std::string byte_level_encode(std::string_view text) {
  const ByteLevelTable& t = table();
  std::string out;
  out.reserve(text.size() * 2);
  for (const char c : text) out += t.char_of_byte[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace pagoda
