// UTF-8 validation and Rust-compatible lossy repair (see utf8.h).
#include "tokenizer/utf8.h"

namespace pagoda {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid sequence at `pos`, or 0 with `*bad_len` set to the length of the maximal
// ill-formed subpart (at least 1). The ranges follow Table 3-7 of the Unicode standard, which is
// what Rust's decoder implements.
size_t valid_sequence_at(std::string_view s, size_t pos, size_t* bad_len) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  *bad_len = 1;
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t i = 1; i < len; ++i) {
    if (pos + i >= s.size()) {
      *bad_len = i;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char l = i == 1 ? lo : 0x80;
    const unsigned char h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *bad_len = i;
      return 0;
    }
  }
  return len;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  size_t pos = 0, bad = 0;
  while (pos < text.size()) {
    const size_t len = valid_sequence_at(text, pos, &bad);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  size_t pos = 0, bad = 0;
  while (pos < text.size()) {
    const size_t len = valid_sequence_at(text, pos, &bad);
    if (len == 0) {
      append_utf8(out, kReplacementChar);
      pos += bad;
    } else {
      out.append(text.substr(pos, len));
      pos += len;
    }
  }
  return out;
}

size_t incomplete_utf8_suffix(std::string_view text) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(text[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t len = utf8_sequence_length(b);
    if (len > back && b >= 0xC2 && b <= 0xF4) {
      size_t bad = 0;
      // Only a *valid so far* prefix counts as incomplete.
      std::string_view tail = text.substr(n - back);
      if (valid_sequence_at(tail, 0, &bad) == 0 && bad == back) return back;
    }
    return 0;
  }
  return 0;
}

}  // namespace pagoda
