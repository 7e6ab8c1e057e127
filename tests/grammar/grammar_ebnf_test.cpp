// EBNF/GBNF front end and the automaton's checks: languages, repetition, Unicode classes,
// recursion, and the errors bad grammars get.
#include <gtest/gtest.h>

#include "grammar/ebnf_parser.h"
#include "grammar/grammar_error.h"
#include "grammar_test_util.h"

namespace pagoda::grammar {
namespace {

using test::accepts;
using test::byte_grammar;

std::shared_ptr<const CompiledGrammar> ebnf(std::string_view text) {
  return byte_grammar(parse_ebnf(text));
}

std::string error_of(std::string_view text) {
  try {
    Pda::compile(parse_ebnf(text));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(Ebnf, ArithmeticWithRecursionAndComments) {
  const auto g = ebnf(R"g(
    # expressions with precedence, right-recursive
    root   ::= expr
    expr   ::= term ("+" term | "-" term)*
    term   ::= factor ("*" factor)*
    factor ::= [0-9]+ | "(" expr ")"
  )g");
  for (const char* ok : {"1", "12+3", "(1+2)*3", "((7))", "1*2*3-4"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"", "+1", "(1+2", "1+", "1**2", "a"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Ebnf, RepetitionBoundsAndOptional) {
  const auto g = ebnf(R"(root ::= "a"{2,3} "b"? "c"{2} "d"{1,} )");
  EXPECT_TRUE(accepts(g, "aaccd"));
  EXPECT_TRUE(accepts(g, "aaabccddd"));
  EXPECT_FALSE(accepts(g, "accd"));
  EXPECT_FALSE(accepts(g, "aaaaccd"));
  EXPECT_FALSE(accepts(g, "aacd"));
  EXPECT_FALSE(accepts(g, "aacc"));
}

TEST(Ebnf, StringsEscapesAndClasses) {
  const auto g = ebnf(R"(root ::= 'x' "\"q\"\n" [^a-z\]] [\u00e9-\u00ea] "\x41" .)");
  EXPECT_TRUE(accepts(g,
                      "x\"q\"\nZ\xC3\xA9"
                      "A\xE2\x82\xAC"));  // é, then any char (€)
  EXPECT_TRUE(accepts(g,
                      "x\"q\"\n0\xC3\xAA"
                      "A!"));
  EXPECT_FALSE(accepts(g,
                       "x\"q\"\nb\xC3\xA9"
                       "A!"));  // [^a-z]]
  EXPECT_FALSE(accepts(g,
                       "x\"q\"\n]\xC3\xA9"
                       "A!"));
  EXPECT_FALSE(accepts(g,
                       "x\"q\"\n0\xC3\xAB"
                       "A!"));  // ë is outside the range
  EXPECT_FALSE(accepts(g,
                       "x\"q\"\n0\xC3\xA9"
                       "A\xC3"));  // a truncated character
}

TEST(Ebnf, NegatedClassNeverProducesInvalidUtf8) {
  const auto g = ebnf(R"(root ::= [^"]*)");
  EXPECT_TRUE(accepts(g, "h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(g, "\x80"));          // a lone continuation byte
  EXPECT_FALSE(accepts(g, "\xED\xA0\x80"));  // an encoded surrogate
  EXPECT_FALSE(accepts(g, "\xC0\xAF"));      // an overlong form
}

TEST(Ebnf, NestedRecursionKeepsTheStack) {
  const auto g = ebnf(R"(root ::= "[" (root ("," root)*)? "]")");
  EXPECT_TRUE(accepts(g, "[]"));
  EXPECT_TRUE(accepts(g, "[[],[[]],[[],[]]]"));
  EXPECT_FALSE(accepts(g, "[[]"));
  EXPECT_FALSE(accepts(g, "[]]"));
  EXPECT_FALSE(accepts(g, "[[],]"));
}

TEST(Ebnf, NullableRulesAndAmbiguity) {
  const auto g = ebnf(R"(
    root ::= a a b
    a ::= "x"? | "x" "x"
    b ::= ("y" | "y")* )");
  for (const char* ok : {"", "x", "xx", "xxx", "xxxx", "yy", "xxyyy"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  EXPECT_FALSE(accepts(g, "xxxxx"));
  EXPECT_FALSE(accepts(g, "yx"));
}

TEST(Ebnf, ErrorsNameThePlace) {
  EXPECT_NE(error_of("root ::= \"a\" missing").find("'missing' is used but never defined"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"").find("left recursion"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= a\na ::= b a\nb ::= \"\"?").find("left recursion"),
            std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" (\"b\"").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\n\nx ::= [b-a]").find("line 3"), std::string::npos);
  EXPECT_NE(error_of("start ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(error_of("root ::= a\na ::= \"x\" a").find("language is empty"), std::string::npos);
  EXPECT_NE(error_of("root ::= (= \"a\") \"a\"").find("lookahead"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}").find("out of order"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
}

TEST(Ebnf, PathologicalRepetitionIsBounded) {
  // 10000 x 10000 would unroll to 10^8 states: refused, quickly.
  const std::string error = error_of("root ::= (\"a\"{10000}){10000}");
  EXPECT_NE(error.find("too large"), std::string::npos) << error;
  // A long chain of optional items: every state would get the edges of all that follow.
  const std::string chain = error_of("root ::= (\"a\"? \"b\"?){10000}");
  EXPECT_NE(chain.find("too large"), std::string::npos) << chain;
}

}  // namespace
}  // namespace pagoda::grammar
