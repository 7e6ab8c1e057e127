// UTF-8 helpers shared by the tokenizer: decoding one code point, encoding, and the lossy
// repair of invalid input that Rust's String::from_utf8_lossy performs (HF tokenizers only ever
// sees valid UTF-8, so we repair at the edge the same way Rust would).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at `text[pos]` of *valid* UTF-8 and advances `pos`.
inline char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const size_t len = utf8_sequence_length(b0);
  char32_t cp = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < len && pos + i < text.size(); ++i) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  }
  pos += len;
  return cp;
}

// Rust's char::is_whitespace (the White_Space property).
inline bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Appends the UTF-8 encoding of `cp` to `out`.
void append_utf8(std::string& out, char32_t cp);

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Replaces every maximal ill-formed subsequence with U+FFFD, exactly like Rust's
// String::from_utf8_lossy (Unicode "substitution of maximal subparts").
std::string sanitize_utf8(std::string_view text);

// Number of bytes at the end of `text` that form an incomplete (but so far valid) UTF-8
// sequence; 0 when `text` ends on a character boundary.
size_t incomplete_utf8_suffix(std::string_view text);

}  // namespace pagoda
