// Unicode helpers for the Jinja interpreter: Python strings index and slice by code point and
// their case and whitespace predicates are Unicode-aware, so templates see the same string
// semantics as under CPython. Character properties come from utf8proc.
#pragma once

#include <string>
#include <string_view>

namespace pagoda::jinja::text {

// Decodes UTF-8; an invalid byte becomes U+FFFD (CPython would not hold such a str at all).
std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
size_t num_code_points(std::string_view s);

// Python str.isspace for one code point.
bool is_space(char32_t c);
// Python str.isprintable for one code point (what repr() leaves unescaped).
bool is_printable(char32_t c);
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_upper(char32_t c);
bool is_lower(char32_t c);
// Regex \w (Unicode letters, digits and underscore).
bool is_word(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
// Python str.capitalize: first code point upper, the rest lower.
std::string capitalize(std::string_view s);
// Python str.title.
std::string title(std::string_view s);

}  // namespace pagoda::jinja::text
