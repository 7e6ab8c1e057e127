// EBNF grammars in the form vLLM's `grammar` / xgrammar and llama.cpp's GBNF accept:
//
//   root   ::= "{" ws pair ("," ws pair)* "}"     # comments run to the end of the line
//   pair   ::= [a-z]+ ":" ws value
//   value  ::= "\"" [^"\\]* "\"" | [0-9]{1,3} | . | ( "a" | 'b' )?
//
// Rules are `name ::= body`; a body runs until the next `name ::=`. Elements: double- or
// single-quoted strings (escapes \n \t \r \\ \" \' \xHH \uHHHH \UHHHHHHHH), character classes
// with ranges and ^, `.` (any character), rule names, groups, and the postfix operators
// * + ? {n} {n,} {n,m}. Strings and classes are Unicode, matched as UTF-8. Lookahead
// assertions `(= ...)` are rejected. The start rule is `root` unless named otherwise.
#pragma once

#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace pagoda::grammar {

// Throws GrammarError naming the line and column.
Grammar parse_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace pagoda::grammar
