// The error every grammar front end and the compiler throw: a pagoda::Error whose message names
// where in the input (a JSON pointer into the schema, a line of the EBNF, an offset in the regex)
// the problem is, so the server can answer 400 with it.
#pragma once

#include <string>

#include "util/error.h"

namespace pagoda::grammar {

class GrammarError : public Error {
 public:
  explicit GrammarError(const std::string& message) : Error(message) {}
};

template <typename... Args>
[[noreturn]] void grammar_fail(fmt::format_string<Args...> format, Args&&... args) {
  throw GrammarError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace pagoda::grammar
