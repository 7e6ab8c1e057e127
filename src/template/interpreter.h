// Jinja evaluator: walks a parsed template with jinja2's scoping rules (a for loop iteration and a
// macro call open a scope, `if` does not; namespace() objects are shared by reference) and the
// globals Hugging Face provides (raise_exception, strftime_now, namespace, range, dict, ...).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "template/ast.h"

namespace pagoda::jinja {

// Throws TemplateError for names of filters/tests that jinja2 would reject at compile time
// (those outside `if` statements and conditional expressions).
void check_filters_and_tests(const Body& body);

// Renders `body` with the given top-level variables. Throws TemplateError with a line.
std::string render(const Body& body, const std::vector<std::pair<std::string, Value>>& variables);

}  // namespace pagoda::jinja
