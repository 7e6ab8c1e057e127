// GPT-2's reversible byte <-> printable-character table used by the ByteLevel pre-tokenizer and
// decoder: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100.. in order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda {

// UTF-8 text of the character standing for `byte`.
std::string_view byte_level_char(uint8_t byte);

// Byte that character `cp` stands for, or -1 when `cp` is not in the table.
int byte_level_byte(char32_t cp);

// Maps every byte of `text` to its character (the ByteLevel pre-tokenizer's transform).
std::string byte_level_encode(std::string_view text);

}  // namespace pagoda
