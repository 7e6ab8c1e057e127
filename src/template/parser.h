// Jinja parser: tokens to a syntax tree, following the grammar and operator precedence of
// jinja2/parser.py for the statements chat templates use. Unsupported statements (extends,
// include, import, block, recursive loops, ...) are errors naming the line, never ignored.
#pragma once

#include <string>

#include "template/ast.h"

namespace pagoda::jinja {

// Throws TemplateError carrying the offending line.
Body parse_template(const std::string& source);

}  // namespace pagoda::jinja
