// Whole-string matching by PCRE2, the independent reference the regex tests compare against.
#pragma once

#include <cstdint>
#include <string>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace pagoda::test {

class Pcre2FullMatch {
 public:
  // UTF mode, anchored at both ends; `extra_options` adds compile options (e.g. PCRE2_ALT_BSUX
  // for ECMAScript's \u escapes).
  explicit Pcre2FullMatch(const std::string& pattern, uint32_t extra_options = 0) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED | extra_options, &error,
                          &offset, nullptr);
    if (code_) data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pcre2FullMatch() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Pcre2FullMatch(const Pcre2FullMatch&) = delete;
  Pcre2FullMatch& operator=(const Pcre2FullMatch&) = delete;

  bool ok() const { return code_ != nullptr; }
  bool matches(const std::string& s) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_,
                       nullptr) >= 0;
  }
  // `s` can be continued into a match.
  bool prefix_of_match(const std::string& s) const {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                               PCRE2_PARTIAL_HARD, data_, nullptr);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

}  // namespace pagoda::test
