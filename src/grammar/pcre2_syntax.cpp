#include "grammar/pcre2_syntax.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

namespace pagoda::grammar {

std::optional<std::string> pcre2_syntax_error(std::string_view pattern) {
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  // \uXXXX (PCRE2_ALT_BSUX) and \u{...} (the extra option, PCRE2 10.38+) as ECMAScript has them.
#ifdef PCRE2_EXTRA_ALT_BSUX
  pcre2_set_compile_extra_options(context, PCRE2_EXTRA_ALT_BSUX);
#endif
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_ALT_BSUX, &error, &offset, context);
  pcre2_compile_context_free(context);
  if (code != nullptr) {
    pcre2_code_free(code);
    return std::nullopt;
  }
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(error, message, sizeof(message));
  return fmt::format("PCRE2 cannot compile it at offset {}: {}", offset,
                     reinterpret_cast<const char*>(message));
}

}  // namespace pagoda::grammar
