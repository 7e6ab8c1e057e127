// Helpers for the grammar tests: a byte vocabulary (one token per byte value) for checking
// languages, whole-string acceptance, and random sentences drawn by walking the automaton.
#pragma once

#include <cctype>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"

namespace pagoda::grammar::test {

inline std::shared_ptr<const Vocabulary> byte_vocabulary() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    tokens.emplace_back();  // id 256: the stop token
    return std::make_shared<const Vocabulary>(std::move(tokens), std::vector<int32_t>{256});
  }();
  return vocab;
}

inline std::shared_ptr<const CompiledGrammar> byte_grammar(const Grammar& grammar) {
  return std::make_shared<const CompiledGrammar>(Pda::compile(grammar), byte_vocabulary());
}

// The whole of `text` is a sentence of the grammar.
inline bool accepts(const std::shared_ptr<const CompiledGrammar>& grammar, std::string_view text) {
  GrammarMatcher matcher(grammar);
  return matcher.accept_bytes(text) && matcher.can_terminate();
}

// A random sentence, or nullopt when the walk ran past `max_bytes`. Bytes are drawn uniformly
// from those allowed, but punctuation (which closes strings and structures, or moves on to the
// next part of an email or a date) is favoured, more so as the budget runs down, so walks end.
inline std::optional<std::string> random_sentence(
    const std::shared_ptr<const CompiledGrammar>& grammar, std::mt19937& rng,
    size_t max_bytes = 300, bool ascii_only = false) {
  GrammarMatcher matcher(grammar);
  std::string out;
  while (out.size() < max_bytes) {
    const ByteSet allowed = matcher.next_bytes();
    if (matcher.can_terminate() && (allowed.empty() || rng() % 8 == 0)) return out;
    std::vector<uint8_t> choices;
    std::vector<uint8_t> closing;  // punctuation
    for (int b = 0; b < 256; ++b) {
      if (!allowed.contains(static_cast<uint8_t>(b)) || (ascii_only && b >= 0x80)) continue;
      choices.push_back(static_cast<uint8_t>(b));
      if (b < 0x80 && std::ispunct(b)) closing.push_back(static_cast<uint8_t>(b));
    }
    if (choices.empty()) return std::nullopt;
    const unsigned odds = out.size() > max_bytes / 3 ? 2 : 1;
    const auto& pool = (!closing.empty() && rng() % 3 < odds) ? closing : choices;
    const uint8_t b = pool[rng() % pool.size()];
    out += static_cast<char>(b);
    if (!matcher.accept_bytes(std::string_view(&out.back(), 1))) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace pagoda::grammar::test
