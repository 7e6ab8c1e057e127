// Regular expressions (the ECMAScript syntax JSON Schema's `pattern` and vLLM's guided_regex use)
// to the grammar IR: alternation, groups (capturing, non-capturing, named), the quantifiers
// * + ? {n} {n,} {n,m} (lazy forms match the same language), classes with ranges and negation,
// the escapes \d \w \s \D \W \S \t \n \r \f \v \0 \xHH \uHHHH \u{H...}, and `.` (any character
// but a line terminator). Matching is over Unicode characters, emitted as UTF-8. Lookaround and
// backreferences are not regular and are rejected, as are anchors anywhere but at the ends.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace pagoda::grammar {

struct RegexOptions {
  // Emit the language as the content of a JSON string: `"`, `\` and control characters appear
  // in their escaped forms (\" \\ \n \u001f ...), every other character as itself.
  bool json_string = false;
};

struct ParsedRegex {
  ExprPtr expr;
  bool anchored_start = false;  // the pattern began with ^
  bool anchored_end = false;    // the pattern ended with $
};

// Throws GrammarError naming the offset in the pattern, also when PCRE2 cannot compile it
// (pcre2_syntax.h).
ParsedRegex parse_regex(std::string_view pattern, const RegexOptions& options = {});

// One character from `ranges`, in the form RegexOptions asks for.
ExprPtr regex_char_class(const std::vector<CodePointRange>& ranges, const RegexOptions& options);

// A grammar whose language is the whole-string matches of `pattern` (anchors at the ends are
// accepted and change nothing).
Grammar regex_grammar(std::string_view pattern);

}  // namespace pagoda::grammar
