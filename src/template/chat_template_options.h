// The two vLLM serve options about chat templates that are decided outside the template itself:
// where --chat-template's text comes from, and the shape message contents take when they reach
// the template (--chat-template-content-format); vllm/entrypoints/chat_utils.py.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace pagoda {

struct ChatTemplateText {
  std::string source;
  std::string origin;  // for error messages: the path, or "--chat-template (inline)"
};

// --chat-template VALUE as vLLM's load_chat_template reads it: the file if one exists, else
// the value itself when it looks like a template (holds '{', '}' or a newline), with
// backslash escapes (\n, \t, \\, \", \') decoded as Python's unicode_escape does; anything
// else is a path that cannot be opened. Throws pagoda::Error.
ChatTemplateText read_chat_template_argument(const std::string& value);

enum class ContentFormat { kString, kOpenAi };

// "string", "openai", or "auto": openai when `template_source` loops over a message's
// content (`for part in message['content']`, as vLLM's _detect_content_format finds it),
// string otherwise. Throws pagoda::Error for another name.
ContentFormat resolve_content_format(const std::string& name, const std::string& template_source);
const char* content_format_name(ContentFormat format);

// `messages` with every content in `format`: kString joins the text parts of a list with "\n"
// (vLLM's joiner); kOpenAi wraps a string into [{"type": "text", "text": s}]. Other fields and
// null contents are left as they are.
nlohmann::json format_message_contents(const nlohmann::json& messages, ContentFormat format);

}  // namespace pagoda
