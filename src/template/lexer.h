// Jinja lexer with Hugging Face's chat-template settings (trim_blocks, lstrip_blocks): splits a
// template into text, tag delimiters and expression tokens, applying whitespace control the way
// jinja2's lexer does, so the text tokens are exactly what jinja2 would output.
#pragma once

#include <string>
#include <vector>

namespace pagoda::jinja {

enum class TokenType {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // value holds the decoded string
  kInteger,
  kFloat,
  kOperator,
  kEnd,
};

struct Token {
  TokenType type;
  std::string value;
  int line;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws TemplateError (with a line) on malformed input.
std::vector<Token> tokenize(const std::string& source, const LexerOptions& options = {});

}  // namespace pagoda::jinja
