// A second judge of a regex's syntax: PCRE2's compiler. Our parser takes ECMAScript's syntax
// and is lenient where it can afford to be (a quantifier on a quantifier, a class escape at a
// range's end, a group name used twice); PCRE2, which the tests match outputs with, refuses
// those, and so do JavaScript's unicode-mode RegExp (ajv) and Python's re (vLLM). A pattern
// either rejects is refused, so no request runs on a reading of its regex that other engines
// would not share.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace pagoda::grammar {

// PCRE2's message and offset when it cannot compile `pattern` (UTF mode, ECMAScript's \u
// escapes); nullopt when it can.
std::optional<std::string> pcre2_syntax_error(std::string_view pattern);

}  // namespace pagoda::grammar
