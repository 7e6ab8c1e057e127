// The regex front end against two references: std::regex (ECMAScript grammar) on ASCII, since it
// works on bytes, and PCRE2 in UTF mode on Unicode patterns and strings. Random sentences of our
// automaton must match, and on random and mutated strings the verdicts must agree.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "common/pcre2_full_match.h"
#include "grammar/grammar_error.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

using pagoda::test::Pcre2FullMatch;
using test::accepts;
using test::byte_grammar;

const char* const kPatterns[] = {
    "abc",
    "a|b|cd",
    "(ab)*c",
    "a+b?c*",
    "[a-c]{2,4}x",
    "[^abc]d",
    "(?:foo|bar)+baz",
    "\\d{3}-\\d{4}",
    "\\w+@\\w+\\.com",
    "[A-Z][a-z]*( [A-Z][a-z]*)*",
    "(a|ab)(c|bcd)(d*)",
    "x{3}",
    "x{2,}y",
    "(a*)*b",
    "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?",
    "[\\s\\S]{0,3}z",
    "\\D\\W\\S",
    "[.][*]\\.\\*\\(\\)",
    "a.c",
    "^(yes|no)$",
    "[a-z-]+",
    "[\\]a]+\\[",
    "((a|b)(c|d)){1,3}",
    "\\x41\\u0042[\\x30-\\x32]",
    "a{2}?b+?",
};

// Characters from the pattern and a few strangers, so random strings hit both sides.
std::string alphabet_of(std::string_view pattern) {
  std::string alphabet = "aZ9 -.\n";
  for (const char c : pattern) {
    if (alphabet.find(c) == std::string::npos) alphabet += c;
  }
  return alphabet;
}

TEST(Regex, AgreesWithStdRegex) {
  std::mt19937 rng(20261203);
  for (const char* pattern : kPatterns) {
    SCOPED_TRACE(pattern);
    const std::regex reference(pattern, std::regex::ECMAScript);
    const auto grammar = byte_grammar(regex_grammar(pattern));
    std::vector<std::string> sentences;
    for (int i = 0; i < 200; ++i) {
      if (auto s = test::random_sentence(grammar, rng, 40, /*ascii_only=*/true)) {
        EXPECT_TRUE(std::regex_match(*s, reference)) << "our sentence '" << *s << "'";
        sentences.push_back(*s);
      }
    }
    ASSERT_FALSE(sentences.empty());
    const std::string alphabet = alphabet_of(pattern);
    for (int i = 0; i < 600; ++i) {
      std::string s;
      if (i % 2 == 0) {
        const size_t len = rng() % 9;
        for (size_t k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      } else {
        s = sentences[rng() % sentences.size()];
        const int edits = 1 + static_cast<int>(rng() % 2);
        for (int e = 0; e < edits; ++e) {
          const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
          const char c = alphabet[rng() % alphabet.size()];
          switch (rng() % 3) {
            case 0:
              s.insert(s.begin() + static_cast<long>(at), c);
              break;
            case 1:
              if (at < s.size()) s.erase(at, 1);
              break;
            default:
              if (at < s.size()) s[at] = c;
              break;
          }
        }
      }
      EXPECT_EQ(accepts(grammar, s), std::regex_match(s, reference)) << "string '" << s << "'";
    }
  }
}

// Characters of `text` (UTF-8), as strings.
std::vector<std::string> characters_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    out.push_back(text.substr(i, len));
    i += len;
  }
  return out;
}

// Patterns whose meaning ECMAScript and PCRE2 share (no '.', no \s: their line terminators and
// spaces differ).
const char* const kUnicodePatterns[] = {
    "[à-ö]+ü?",
    "[^a-zé]{1,3}x",
    "(中文|日本語)+[0-9]",
    "😀*(é|e\u0301)",
    "[α-ωΑ-Ω]{2}[^α-ω]",
    "(?:[€$£]\\d+)|[ぁ-ゖ]+",
    "[\\x{80}-\\x{7FF}]+[\\x{800}-\\x{FFFF}][\\x{10000}-\\x{10FFFF}]",
};

TEST(Regex, AgreesWithPcre2OnUnicode) {
  std::mt19937 rng(99);
  for (const char* raw : kUnicodePatterns) {
    SCOPED_TRACE(raw);
    // PCRE2 spells code points \x{...}; ECMAScript \u{...} (our parser takes the latter).
    std::string ours = raw;
    for (size_t at; (at = ours.find("\\x{")) != std::string::npos;) ours.replace(at, 3, "\\u{");
    std::string theirs = raw;
    for (size_t at; (at = theirs.find("\\u0301")) != std::string::npos;)
      theirs.replace(at, 6, "\\x{301}");
    const Pcre2FullMatch reference(theirs);
    ASSERT_TRUE(reference.ok());
    const auto grammar = byte_grammar(regex_grammar(ours));
    std::vector<std::string> sentences;
    for (int i = 0; i < 200; ++i) {
      if (auto s = test::random_sentence(grammar, rng, 60)) {
        EXPECT_TRUE(reference.matches(*s)) << "our sentence '" << *s << "'";
        sentences.push_back(*s);
      }
    }
    ASSERT_FALSE(sentences.empty());
    auto alphabet = characters_of(std::string(raw) + "aé中😀\xC3\xA0\xC3\xB6\xC3\xB7ω");
    for (int i = 0; i < 600; ++i) {
      std::string s;
      if (i % 2 == 0) {
        for (size_t k = 0, len = rng() % 7; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      } else {
        auto chars = characters_of(sentences[rng() % sentences.size()]);
        const size_t at = rng() % (chars.size() + 1);
        const std::string c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0:
            chars.insert(chars.begin() + static_cast<long>(at), c);
            break;
          case 1:
            if (at < chars.size()) chars.erase(chars.begin() + static_cast<long>(at));
            break;
          default:
            if (at < chars.size()) chars[at] = c;
            break;
        }
        for (const auto& c2 : chars) s += c2;
      }
      EXPECT_EQ(accepts(grammar, s), reference.matches(s)) << "string '" << s << "'";
    }
  }
}

TEST(Regex, UnicodeClassesMatchCharacters) {
  const auto g = byte_grammar(regex_grammar("[à-ö]+.\\u{1F600}"));
  EXPECT_TRUE(accepts(g, "àéö\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(g, "a\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(g, "à\n\xF0\x9F\x98\x80"));  // '.' excludes line terminators
}

TEST(Regex, JsonStringModeEscapes) {
  const auto parsed = parse_regex("a\"[\\\\\\n]", {.json_string = true});
  Grammar grammar;
  grammar.add_rule("root", parsed.expr);
  const auto g = byte_grammar(grammar);
  EXPECT_TRUE(accepts(g, "a\\\"\\\\"));
  EXPECT_TRUE(accepts(g, "a\\\"\\n"));
  EXPECT_FALSE(accepts(g, "a\"\\\\"));
  EXPECT_FALSE(accepts(g, "a\\\"\n"));
}

TEST(Regex, NamedGroupsAndLiteralBraces) {
  const auto g = byte_grammar(regex_grammar("(?<year>\\d{2})/x{,2}"));
  EXPECT_TRUE(accepts(g, "26/x{,2}"));
  EXPECT_FALSE(accepts(g, "26/xx"));
}

TEST(Regex, UnsupportedFeaturesAreErrors) {
  for (const char* pattern : {"(?=a)b", "(?!a)b", "(a)\\1", "a\\bb", "a^b", "a$b", "(ab", "ab)",
                              "*a", "[b-a]", "a{3,1}", "\\q"}) {
    EXPECT_THROW(regex_grammar(pattern), GrammarError) << pattern;
  }
}

// Patterns our parser would read (leniently) but PCRE2 refuses: refused, with PCRE2's reason,
// and inside a schema at the pattern's JSON pointer. Each is also an error for JavaScript's
// unicode-mode RegExp, which ajv validates patterns with.
TEST(Regex, WhatPcre2CannotCompileIsRefused) {
  for (const char* pattern : {"(?<n>a)(?<n>b)", "a{2}{3}", "a**", "(?<1a>x)", "[\\d-z]"}) {
    SCOPED_TRACE(pattern);
    EXPECT_FALSE(Pcre2FullMatch(pattern).ok());
    try {
      regex_grammar(pattern);
      ADD_FAILURE() << "accepted";
    } catch (const GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find("PCRE2"), std::string::npos) << e.what();
    }
  }
  try {
    json_schema_grammar(
        std::string_view(R"({"type": "object", "properties": {"code": {"type": "string",
                           "pattern": "^a{2}{3}$"}}})"),
        JsonGrammarOptions{});
    ADD_FAILURE() << "accepted";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("/properties/code/pattern"), std::string::npos)
        << e.what();
  }
  // ECMAScript's escapes stay ours to read: PCRE2 is asked in its ECMAScript-escape mode.
  for (const char* pattern : {"\\u0041\\x42", "[\\u{10000}-\\u{10FFFF}]", "x{,2}"}) {
    EXPECT_NO_THROW(regex_grammar(pattern)) << pattern;
  }
}

}  // namespace
}  // namespace pagoda::grammar
