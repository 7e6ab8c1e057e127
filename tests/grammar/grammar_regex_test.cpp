// The regex front end against std::regex (ECMAScript grammar) as the reference: random sentences
// of our automaton must match, and on random and mutated strings both must agree. std::regex
// works on bytes, so the differential part stays within ASCII; Unicode has its own cases.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "grammar/grammar_error.h"
#include "grammar/regex_parser.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

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

}  // namespace
}  // namespace pagoda::grammar
