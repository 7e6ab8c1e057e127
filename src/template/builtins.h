// jinja2's builtin filters and tests, plus the filters Hugging Face installs (tojson with
// ensure_ascii=False). Unknown names return nullptr so the caller can report the template line.
#pragma once

#include <string_view>

#include "template/value.h"

namespace pagoda::jinja {

using FilterFn = Value (*)(const Value& base, CallArgs& args);
using TestFn = bool (*)(const Value& base, CallArgs& args);

FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

}  // namespace pagoda::jinja
